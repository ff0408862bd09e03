"""The spec field tables drive the loader, the JSON Schema and the manual's key list
(docs/reference/spec.md)."""

from __future__ import annotations

import contextlib
import copy
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
from tests.support.paths import REPO


def test_readme_key_list_is_rendered_from_the_tables() -> None:
    readme = (REPO / "docs" / "reference" / "spec.md").read_text(encoding="utf-8")
    assert readme.count(fields.README_BEGIN) == 1
    assert fields.update_readme(readme) == readme, (
        "docs/reference/spec.md's spec keys are stale: replace the section between the markers with "
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
    ("spans", "form", "[1]", "form must be a string, not a list"),
    ("spans", "around", "1", "around must be a mapping"),
    ("spans", "names", "3", "names must be a list"),
    (
        "spans",
        "releases",
        "[1]",
        "releases must be a specifier such as '>=0.19', or {versions: ..., reason: ...}",
    ),
    ("hooks", "guard", "[1]", "guard must be a string, not a list"),
    ("hooks", "stamp", "[1]", "stamp must be a mapping"),
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


# A minimal project using every spec object with required keys, each once (no object refers to
# another that could go missing): loads with no diagnostic.
_MINIMAL: dict = {
    "runtime": {"package": "megatron/otel"},
    "upstream": {
        "distribution": "megatron-core",
        "version": "0.0.0",
        "filename": "fixture.whl",
        "sha256": "0" * 64,
        "supported": [{"version": "0.0.1", "filename": "fixture-0.0.1.whl", "sha256": "1" * 64}],
    },
    "groups": {"step": "Steps."},
    "presets": {"default": {"groups": ["step"], "description": "The default."}},
    "lifecycle": {
        "startup": {"name": "demo.startup", "group": "step"},
        "pre_startup": {"name": "demo.pre", "group": "step", "start": "a", "end": "b"},
        "phases": [{"name": "demo.phase", "group": "step", "start": "a", "end": "b"}],
        "interval": {"name": "demo.interval", "group": "step"},
    },
    "metrics": [{"name": "demo.loss", "kind": "gauge", "unit": "1"}],
    "env": [{"name": "DEMO_VARIABLE"}],
    "flags": {
        "file": "megatron/args.py",
        "function": "add_args",
        "before": {"return": "parser"},
        "parser": "parser",
        "options": [{"option": "--demo-flag", "help": "A flag."}],
    },
    "attributes": {"demo.size": {"type": "int"}},
    "file": "megatron/demo.py",
    "spans": [
        {"name": "demo.forward", "group": "step", "function": "forward", "releases": {"versions": ">=0.0"}},
        {"name": "demo.stream", "group": "step", "function": "forward", "stream": {"call": "run"}},
    ],
    "hooks": [
        {"function": "forward", "entry": True, "call": "otel.note()"},
        {"function": "forward", "wrap": {"call": "run", "argument": 0, "with": "otel.in_context"}},
    ],
}
# Where each table's object is in _MINIMAL (a path of keys and indexes), and the variant (the
# lifecycle role) it is read as.
_PLACES: dict[str, list[tuple[tuple, str | None]]] = {
    "RUNTIME_FIELDS": [(("runtime",), None)],
    "UPSTREAM_FIELDS": [(("upstream",), None)],
    "SUPPORTED_FIELDS": [(("upstream", "supported", 0), None)],
    "LIFECYCLE_SPAN_FIELDS": [
        (("lifecycle", "startup"), "startup"),
        (("lifecycle", "pre_startup"), "pre_startup"),
        (("lifecycle", "phases", 0), "phase"),
        (("lifecycle", "interval"), "interval"),
    ],
    "METRIC_FIELDS": [(("metrics", 0), None)],
    "ENV_FIELDS": [(("env", 0), None)],
    "FLAGS_FIELDS": [(("flags",), None)],
    "FLAG_FIELDS": [(("flags", "options", 0), None)],
    "SPAN_FIELDS": [(("spans", 0), None)],
    "HOOK_FIELDS": [(("hooks", 0), None), (("hooks", 1), None)],
    "WRAP_FIELDS": [(("hooks", 1, "wrap"), None)],
    "STREAM_FIELDS": [(("spans", 1, "stream"), None)],
    "RELEASES_FIELDS": [(("spans", 0, "releases"), None)],
    "TOP_FIELDS": [((), fields.PROJECT)],
}


def _load(tmp_path: Path, document: dict) -> list[tuple[int, int, str]]:
    specs = tmp_path / "specs"
    specs.mkdir(exist_ok=True)
    (specs / "telemetry.yaml").write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    diags = Diagnostics()
    with contextlib.suppress(SpecError):
        load_project(specs, diags)
    return sorted((d.pos.line, d.pos.col, d.message) for d in set(diags.items))


def _required_cases() -> list[tuple[str, tuple, str, str]]:
    cases = []
    for name, places in _PLACES.items():
        for path, variant in places:
            for key in fields.required(getattr(fields, name), variant):
                cases.append((name, path, key, f"{'.'.join(map(str, path)) or 'top'}-{key}"))
    return cases


def test_minimal_project_loads_cleanly(tmp_path: Path) -> None:
    assert _load(tmp_path, _MINIMAL) == []


def test_every_table_with_required_keys_is_probed() -> None:
    needing = {
        name
        for name, table in vars(fields).items()
        if name.endswith("_FIELDS") and any(f.required or f.required_for for f in table)
    }
    assert needing == set(_PLACES)


@pytest.mark.parametrize(
    ("table", "path", "key"), [c[:3] for c in _required_cases()], ids=[c[3] for c in _required_cases()]
)
def test_required_key_is_enforced_by_the_reader(table: str, path: tuple, key: str, tmp_path: Path) -> None:
    """The table's required flag is what the reader checks: the minimal project less that key
    gets exactly one error, saying so, at the object that lacks it."""
    document = copy.deepcopy(_MINIMAL)
    holder = document
    for step in path:
        holder = holder[step]
    del holder[key]
    found = _load(tmp_path, document)
    if path:
        node = yaml.compose((tmp_path / "specs" / "telemetry.yaml").read_text(encoding="utf-8"))
        for step in path:  # the object that lacks the key, in the YAML written
            node = (
                node.value[step]
                if isinstance(step, int)
                else next(v for k, v in node.value if k.value == step)
            )
        assert len(found) == 1, found
        assert found[0][:2] == (node.start_mark.line + 1, node.start_mark.column + 1)
        assert found[0][2].endswith(
            f" is missing '{key}'" + fields.by_key(getattr(fields, table))[key].missing
        )
    else:  # a project-wide declaration: at the top of the first spec file
        assert found[0] == (1, 1, f"missing '{key}': declare it in one spec file"), found
    # the schema agrees: it rejects the object without the key (a project-wide declaration may
    # be in another spec file: each file alone is valid without it)
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra (tox -e test)")
    errors = list(jsonschema.Draft7Validator(spec_schema.spec_schema()).iter_errors(document))
    if not path:
        assert errors == []
        return
    assert len(errors) == 1, [e.message for e in errors]
    reasons = [errors[0], *errors[0].context]  # an anyOf (releases:) says why in its context
    assert f"'{key}' is a required property" in [e.message for e in reasons]


def test_minimal_project_is_valid_for_the_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra (tox -e test)")
    assert list(jsonschema.Draft7Validator(spec_schema.spec_schema()).iter_errors(_MINIMAL)) == []


def test_adding_a_key_is_one_edit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A key added to a table (here a span's, read as a string) is accepted and read by the
    loader, typed in the schema and listed in the README, with no other edit."""
    probe = fields.Field("probe_key", fields.STR, False, '""', "A key added by this test.", "_str")
    monkeypatch.setattr(fields, "SPAN_FIELDS", (*fields.SPAN_FIELDS, probe))
    document = copy.deepcopy(_MINIMAL)
    document["spans"][0]["probe_key"] = "text"
    assert _load(tmp_path, document) == []  # no longer an unknown key
    document["spans"][0]["probe_key"] = [1]  # read by its converter, which reports a wrong value
    (found,) = _load(tmp_path, document)
    text = (tmp_path / "specs" / "telemetry.yaml").read_text(encoding="utf-8")
    assert found[2] == "probe_key must be a string, not a list"
    assert text.splitlines()[found[0] - 1][found[1] - 1 :].startswith("- 1")
    span = spec_schema.spec_schema()["definitions"]["span"]
    assert span["properties"]["probe_key"] == {"type": "string", "description": "A key added by this test."}
    assert '| `probe_key` | string |  | "" | A key added by this test. |' in fields.render_key_list()
    monkeypatch.undo()
    assert _load(tmp_path, document)[0][2].startswith("unknown key in span 'probe_key'")
