"""generated/schema/spec.schema.json: every spec file validates, structural mistakes are rejected,
and the schema allows exactly the keys the loader accepts."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from codegen.diagnostics import Diagnostics, SpecError
from codegen.spec import fields
from codegen.spec import schema as spec_schema
from codegen.spec.load import load_project
from tests.generator.support import FIXTURES
from tests.support.paths import REPO, SPECS

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the test extra (tox -e test)")

SCHEMA_FILE = REPO / "generated" / spec_schema.SCHEMA_PATH
HEADER = "# yaml-language-server: $schema=../generated/schema/spec.schema.json"
BAD_SPECS = REPO / "tests" / "bad_specs"
# Cases of the bad-spec corpus whose mistake is structural (a key, a type, a required key, the
# one-placement rule): the schema alone rejects them, so an editor flags them while typing.
STRUCTURAL = (
    "unknown_key",
    "wrong_type",
    "missing_required",
    "recursive_alias",
    "hook_without_placement",
    "any_malformed",
    "releases_mapping_keys",
    "releases_not_a_specifier",
)


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _errors(validator: jsonschema.Draft7Validator, document: object) -> list[str]:
    return [e.message for e in validator.iter_errors(document)]


def test_committed_schema_is_the_generated_one() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == spec_schema.render_schema()


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.name)
def test_spec_file_points_at_schema_and_validates(path: Path, validator) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[0] == HEADER
    assert (path.parent / HEADER.split("=", 1)[1]).resolve() == SCHEMA_FILE
    assert _errors(validator, yaml.safe_load(text)) == []


@pytest.mark.parametrize("case", STRUCTURAL)
def test_structural_bad_spec_is_rejected_by_the_schema(case: str, validator) -> None:
    document = yaml.safe_load((BAD_SPECS / f"{case}.yaml").read_text(encoding="utf-8"))
    assert _errors(validator, document)


@pytest.mark.parametrize(
    "document",
    [
        {"spanz": []},
        {"spans": [{"name": "a.b", "group": "g", "function": "f", "form": "wrapped"}]},
        {"spans": [{"name": "a.b", "group": "g", "function": "f", "around": {"call": "x", "occurrence": 0}}]},
        {"spans": [{"name": "a.b", "group": "g", "function": "f", "names": ["a.c"]}]},
        {"spans": [{"name": "a b", "group": "g", "function": "f"}]},
        {"hooks": [{"function": "f", "entry": True, "before": {"call": "g"}, "call": "otel.x()"}]},
        {"metrics": [{"name": "m.x", "kind": "summary", "unit": "s"}]},
        {"upstream": {"distribution": "d", "version": "1", "filename": "d.whl", "sha256": "ABC"}},
        {"flags": {"options": [{"option": "otel-x"}]}},
        {"attributes": {"a.b": {"type": "integer"}}},
        {"spans": [{"name": "a.b", "group": "g", "function": "f", "around": {"any": [{"call": "x"}]}}]},
        {
            "hooks": [
                {
                    "function": "f",
                    "before": {"any": [{"call": "x"}, {"call": "y"}], "occurrence": 1},
                    "call": "c()",
                }
            ]
        },
    ],
    ids=[
        "top_key",
        "form",
        "occurrence",
        "names_without_name_expr",
        "name",
        "two_placements",
        "metric_kind",
        "sha256",
        "flag_option",
        "attribute_type",
        "any_one_alternative",
        "any_with_other_keys",
    ],
)
def test_schema_rejects_structural_mistakes(document: dict, validator) -> None:
    assert _errors(validator, document)


# The loader's own list of valid keys, read from its "unknown key" message, for each object the
# schema describes: they must be the same, so the schema never drifts from the loader.
_PROBES = {
    "spec file": ({"zzz": 1}, fields.keys(fields.TOP_FIELDS)),
    "span": ({"spans": [{"zzz": 1}]}, fields.keys(fields.SPAN_FIELDS)),
    "hook": ({"hooks": [{"zzz": 1}]}, fields.keys(fields.HOOK_FIELDS)),
    "runtime": ({"runtime": {"zzz": 1}}, fields.keys(fields.RUNTIME_FIELDS)),
    "upstream": ({"upstream": {"zzz": 1}}, fields.keys(fields.UPSTREAM_FIELDS)),
    "preset 'p'": ({"presets": {"p": {"zzz": 1}}}, fields.keys(fields.PRESET_FIELDS)),
    "lifecycle": ({"lifecycle": {"zzz": 1}}, fields.keys(fields.LIFECYCLE_FIELDS)),
    "lifecycle startup": (
        {"lifecycle": {"startup": {"zzz": 1, "group": "layer"}}},
        fields.keys(fields.LIFECYCLE_SPAN_FIELDS),
    ),
    "metric": ({"metrics": [{"zzz": 1}]}, fields.keys(fields.METRIC_FIELDS)),
    "env": ({"env": [{"zzz": 1}]}, fields.keys(fields.ENV_FIELDS)),
    "flags": ({"flags": {"zzz": 1}}, fields.keys(fields.FLAGS_FIELDS)),
    "flag": ({"flags": {"options": [{"zzz": 1}]}}, fields.keys(fields.FLAG_FIELDS)),
    "attribute 'a.b'": ({"attributes": {"a.b": {"zzz": 1}}}, fields.keys(fields.ATTRIBUTE_FIELDS)),
    "releases": (
        {"spans": [{"releases": {"versions": ">=0.1", "zzz": 1}}]},
        fields.keys(fields.RELEASES_FIELDS),
    ),
}


@pytest.mark.parametrize("what", sorted(_PROBES))
def test_schema_keys_are_the_loaders(what: str, tmp_path: Path, validator) -> None:
    extra, keys = _PROBES[what]
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(FIXTURES / "telemetry.yaml", specs / "telemetry.yaml")
    fixture = yaml.safe_load((FIXTURES / "telemetry.yaml").read_text(encoding="utf-8"))
    for key in extra:  # the probed declaration replaces the fixture's
        fixture.pop(key, None)
    (specs / "telemetry.yaml").write_text(yaml.safe_dump(fixture), encoding="utf-8")
    (specs / "probe.yaml").write_text(yaml.safe_dump(extra), encoding="utf-8")
    diags = Diagnostics()
    with contextlib.suppress(SpecError):
        load_project(specs, diags)
    messages = [d.message for d in diags.items]
    found = [m for m in messages if f"unknown key in {what} 'zzz'" in m]
    assert found, messages
    valid = re.search(r"\(valid: (.*)\)$", found[0]).group(1).split(", ")
    assert tuple(valid) == tuple(keys)
    assert _errors(validator, extra), "the schema lets the unknown key through"
