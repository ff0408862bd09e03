"""generated/registry/: the taxonomy as a semantic-convention registry (format v1) that validates
against OpenTelemetry Weaver's JSON Schema; semconv naming rules reported as spec warnings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from codegen.cli import main
from codegen.emit.registry import render_registry
from codegen.pipeline import Generation
from codegen.spec.attributes import infer_type
from codegen.spec.load import load_project
from codegen.spec.semconv import attribute_types, naming_problem, spec_warnings
from tests.generator.support import FIXTURES
from tests.support.paths import REPO, SPECS

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra (tox -e test)")

WEAVER_SCHEMA = REPO / "tests" / "data" / "weaver" / "semconv.schema.json"
SHARED_SCHEMA = REPO.parent / "shared" / "reference" / "weaver" / "semconv.schema.json"
REGISTRY = REPO / "generated" / "registry"


@pytest.fixture(scope="module")
def weaver() -> jsonschema.Draft202012Validator:
    schema = json.loads(WEAVER_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_vendored_schema_is_weavers() -> None:
    """The copy under tests/data is the shared reference's, byte for byte (where it is beside us)."""
    if SHARED_SCHEMA.is_file():
        assert WEAVER_SCHEMA.read_bytes() == SHARED_SCHEMA.read_bytes()
    assert json.loads(WEAVER_SCHEMA.read_text())["$id"].endswith("/semconv.schema.json")


@pytest.mark.parametrize("name", ["attributes.yaml", "spans.yaml", "metrics.yaml"])
def test_registry_validates_against_weaver_schema(name: str, weaver) -> None:
    document = yaml.safe_load((REGISTRY / name).read_text(encoding="utf-8"))
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in weaver.iter_errors(document)]
    assert errors == []
    assert document["groups"]


def test_weaver_schema_rejects_a_broken_registry(weaver) -> None:
    document = yaml.safe_load((REGISTRY / "spans.yaml").read_text(encoding="utf-8"))
    del document["groups"][0]["span_kind"]
    assert list(weaver.iter_errors(document))
    document = yaml.safe_load((REGISTRY / "attributes.yaml").read_text(encoding="utf-8"))
    document["groups"][0]["attributes"][0]["type"] = "integer"
    assert list(weaver.iter_errors(document))


def test_registry_covers_the_taxonomy(generation: Generation) -> None:
    project = generation.project
    spans = yaml.safe_load((REGISTRY / "spans.yaml").read_text())["groups"]
    assert [g["id"] for g in spans] == [f"span.{n}" for n in project.all_span_names()]
    layer = next(g for g in spans if g["id"] == "span.megatron.layer.forward")
    assert {"ref": "megatron.layer_number", "requirement_level": "required"} in layer["attributes"]
    metrics = yaml.safe_load((REGISTRY / "metrics.yaml").read_text())["groups"]
    assert [(g["metric_name"], g["instrument"], g["unit"]) for g in metrics] == [
        (m.name, m.kind, m.unit) for m in project.metrics
    ]
    attributes = yaml.safe_load((REGISTRY / "attributes.yaml").read_text())["groups"][0]["attributes"]
    types = {a["id"]: a["type"] for a in attributes}
    # every attribute typed by the specs: none left as 'any'
    assert "any" not in types.values()
    assert types["megatron.layer_number"] == "int" and types["nvrx.call_idx"] == "int[]"
    assert types == attribute_types(project)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [("3", "int"), ("1.5", "double"), ("'x'", "string"), ("True", "boolean"), ("len(x)", "int"),
     ("str(model_type)", "string"), ("a > b", "boolean"), ("not done", "boolean"), ("f'{a}'", "string"),
     ("self.layer_number", None), ("get_num_microbatches()", None), ("None", None)],
)  # fmt: skip
def test_type_inferred_from_expression(expr: str, expected: str | None) -> None:
    assert infer_type(expr) == expected


@pytest.mark.parametrize(
    ("name", "namespaced", "ok"),
    [("megatron.iteration", True, True), ("num_microbatches", True, False), ("num_microbatches", False, True),
     ("megatron.Layer.forward", False, False), ("megatron.layer-forward", False, False),
     ("nvrx.call_idx", True, True), ("megatron..x", False, False)],
)  # fmt: skip
def test_naming_rules(name: str, namespaced: bool, ok: bool) -> None:
    assert (naming_problem(name, namespaced) is None) == ok


def test_shipped_specs_give_no_warning(capsys, tmp_path: Path) -> None:
    """`codegen apply specs/` on the project's own specs prints no warning (a user must not learn
    to ignore them): #6438's un-namespaced num_microbatches stays, declared with `compat:`."""
    assert spec_warnings(load_project(SPECS)) == []
    assert main(["apply", str(SPECS), "--generated", str(tmp_path / "generated")]) == 0
    err = capsys.readouterr().err
    assert "warning" not in err, err
    spans_page = (REPO / "generated" / "docs" / "spans.md").read_text(encoding="utf-8")
    assert "## Names kept for compatibility" in spans_page
    assert "| `num_microbatches` | #6438" in spans_page


def _compat_specs(tmp_path: Path, declaration: str) -> Path:
    specs = tmp_path / "specs"
    specs.mkdir()
    telemetry = (FIXTURES / "telemetry.yaml").read_text()
    assert "\nattributes:" not in telemetry
    (specs / "telemetry.yaml").write_text(telemetry + "\nattributes:\n" + declaration)
    (specs / "case.yaml").write_text(
        "file: megatron/demo.py\nspans:\n  - name: demo.forward\n    group: layer\n"
        "    function: forward\n    attributes: {num_items: len(items), demo.size: len(items)}\n"
    )
    return specs


def test_an_unnamespaced_name_warns_without_compat_and_errors_with_strict(capsys, tmp_path: Path) -> None:
    """Without `compat:` the naming rule still warns; --strict makes it an error."""
    specs = _compat_specs(tmp_path, "  num_items: {type: int, brief: Items.}\n")
    warnings = [(str(pos), message) for pos, message in spec_warnings(load_project(specs))]
    assert (
        len(warnings) == 1 and "attribute name 'num_items' breaks the semconv naming rules" in warnings[0][1]
    )
    source = FIXTURES / "src"  # validate needs no real tree for the warning: --strict stops first
    assert main(["validate", str(specs), "--strict", "--source", str(source)]) == 2
    err = capsys.readouterr().err
    assert "case.yaml:" in err and ": error: attribute name 'num_items'" in err


def test_compat_silences_only_the_naming_rule_of_its_attribute(tmp_path: Path) -> None:
    specs = _compat_specs(
        tmp_path,
        '  num_items: {type: int, brief: Items., compat: "an old exporter emits it"}\n'
        '  demo.size: {type: int, brief: Size., compat: "no reason"}\n'
        "  Demo.Bad: {type: int, brief: Unused.}\n",
    )
    messages = [m for _, m in spec_warnings(load_project(specs))]
    assert not any("'num_items'" in m for m in messages)
    assert "attribute 'demo.size' has 'compat:' but its name breaks no semconv naming rule" in messages[0]
    assert any("attribute name 'Demo.Bad' breaks the semconv naming rules" in m for m in messages)


def test_untyped_attribute_is_a_warning(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "telemetry.yaml").write_text((FIXTURES / "telemetry.yaml").read_text())
    (specs / "case.yaml").write_text(
        "file: megatron/demo.py\nspans:\n  - name: demo.forward\n    group: layer\n"
        "    function: forward\n    attributes: {demo.size: self.size, demo.count: len(items)}\n"
    )
    warnings = [m for _, m in spec_warnings(load_project(specs))]
    assert warnings == [
        "attribute 'demo.size' has no type: declare it under 'attributes:' "
        "(e.g. {type: int, brief: ...}); the registry says 'any'"
    ]
    registry = yaml.safe_load(render_registry(load_project(specs))["attributes.yaml"])
    types = {a["id"]: a["type"] for a in registry["groups"][0]["attributes"]}
    assert types["demo.size"] == "any" and types["demo.count"] == "int"
