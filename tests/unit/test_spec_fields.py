"""The spec field tables drive the loader, the JSON Schema and the README's key list."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest
import yaml

from codegen.diagnostics import Diagnostics, SpecError
from codegen.spec import fields
from codegen.spec import schema as spec_schema
from codegen.spec.load import _Builder as ProjectReader
from codegen.spec.load import load_project
from tests.generator.support import FIXTURES
from tests.target.conftest import REPO


def test_readme_key_list_is_rendered_from_the_tables() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert readme.count(fields.README_BEGIN) == 1
    assert fields.update_readme(readme) == readme, (
        "README.md's spec keys are stale: replace the section between the markers with "
        "codegen.spec.fields.render_key_list()"
    )


def test_every_table_is_in_the_readme() -> None:
    listed = {id(table) for _, table in fields.readme_tables()}
    tables = [v for k, v in vars(fields).items() if k.endswith("_FIELDS")]
    assert tables and all(id(t) in listed for t in tables)


def test_update_readme_replaces_a_stale_list() -> None:
    stale = f"before\n{fields.README_BEGIN}\n| `gone` |\n{fields.README_END}\nafter\n"
    updated = fields.update_readme(stale)
    assert "`gone`" not in updated
    assert updated.startswith("before\n") and updated.endswith("\nafter\n")
    assert "| `name_expr` | string |" in updated


@pytest.mark.parametrize(
    "table", [t for _, t in fields.readme_tables()], ids=[h for h, _ in fields.README_TABLES]
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


# Each key a table reads through its converter: a wrong value gets the converter's own message,
# at the value's position.
_WRONG = [
    ("spans", "goodput", '"yes"', "goodput must be true or false, not str"),
    ("spans", "note", "[1]", "note must be a string, not a list"),
    ("spans", "when", "{a: 1}", "when must be a string, not a mapping"),
    ("spans", "attributes", "[1]", "attributes must be a mapping"),
    ("hooks", "note", "[1]", "note must be a string, not a list"),
]


@pytest.mark.parametrize(
    ("section", "key", "value", "message"), _WRONG, ids=[f"{w[0]}.{w[1]}" for w in _WRONG]
)
def test_converted_keys_report_at_the_value(
    section: str, key: str, value: str, message: str, tmp_path: Path
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(FIXTURES / "telemetry.yaml", specs / "telemetry.yaml")
    group = next(iter(yaml.safe_load((FIXTURES / "telemetry.yaml").read_text(encoding="utf-8"))["groups"]))
    entry = (
        f"  - {{name: a.b, group: {group}, file: x.py, function: f, {key}: {value}}}\n"
        if section == "spans"
        else f"  - {{file: x.py, function: f, entry: true, call: otel.x(), {key}: {value}}}\n"
    )
    (specs / "probe.yaml").write_text(f"{section}:\n{entry}", encoding="utf-8")
    diags = Diagnostics()
    with contextlib.suppress(SpecError):
        load_project(specs, diags)
    column = entry.index(f"{key}: ") + len(key) + 3
    found = [(d.pos.line, d.pos.col, d.message) for d in diags.items if d.message == message]
    assert found == [(2, column, message)], [d.message for d in diags.items]
