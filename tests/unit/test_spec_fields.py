"""The spec field tables drive the loader, the JSON Schema and the README's key list."""

from __future__ import annotations

import pytest

from codegen.spec import fields
from codegen.spec import schema as spec_schema
from codegen.spec.load import _Builder as ProjectReader
from tests.target.conftest import REPO


def test_readme_key_list_is_rendered_from_the_tables() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert readme.count(fields.README_BEGIN) == 1
    assert fields.update_readme(readme) == readme, (
        "README.md's spec keys are stale: replace the section between the markers with "
        "codegen.spec.fields.render_key_list()"
    )


def test_every_table_is_in_the_readme() -> None:
    listed = {id(table) for _, table in fields.README_TABLES}
    tables = [v for k, v in vars(fields).items() if k.endswith("_FIELDS")]
    assert tables and all(id(t) in listed for t in tables)


def test_update_readme_replaces_a_stale_list() -> None:
    stale = f"before\n{fields.README_BEGIN}\n| `gone` |\n{fields.README_END}\nafter\n"
    updated = fields.update_readme(stale)
    assert "`gone`" not in updated
    assert updated.startswith("before\n") and updated.endswith("\nafter\n")
    assert "| `name_expr` | string |" in updated


@pytest.mark.parametrize(
    "table", [t for _, t in fields.README_TABLES], ids=[h for h, _ in fields.README_TABLES]
)
def test_table_keys_are_unique_and_converters_exist(table: fields.Table) -> None:
    assert len(fields.keys(table)) == len(set(fields.keys(table)))
    for field in table:
        assert not field.convert or callable(getattr(ProjectReader, field.convert, None)), field.key
        assert not (field.required and field.default is not None), field.key


def test_schema_objects_are_the_tables() -> None:
    definitions = spec_schema.spec_schema()["definitions"]
    for name, table in (
        ("span", fields.SPAN_FIELDS),
        ("hook", fields.HOOK_FIELDS),
        ("wrap", fields.WRAP_FIELDS),
    ):
        assert definitions[name]["properties"] == fields.properties(table)
        assert definitions[name].get("required", []) == fields.required(table)
