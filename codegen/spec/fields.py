"""One field table per spec object: each key's JSON type, whether it is required, its default,
its description and the reader method that converts its value.

The located-diagnostic reader reads every object through its table (``Reader._fields``: unknown
keys, missing required keys, each key with a converter read by it; the keys whose reading depends
on other keys are left to the object's reader), the JSON Schema (``codegen/spec/schema.py``)
types, describes and requires the keys from them, and the manual's "Spec keys" section
(docs/reference/spec.md; the README_* names below are from when it was in README.md) is rendered
from them (``render_key_list``), so adding a key to a spec object is one edit here.
Everything looks the tables up when it runs (``fields.SPAN_FIELDS``, never a copy made at import).
tests/unit/test_spec_fields.py checks that page is current, that every required key is enforced
by the reader and the schema, and that a key added to a table is read, typed and listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from codegen.spec.model import ANY, SELECTOR_KINDS, SPAN_FORMS
from codegen.spec.vocabulary import ATTRIBUTE_TYPES, LIFECYCLE_KEYS, METRIC_KINDS


@dataclass(frozen=True)
class Field:
    """One key of a spec object.

    ``type`` is the JSON Schema of the value (without the description); ``default`` is what an
    absent optional key means, as README text; ``convert`` names the ``Reader`` method that
    reads the value (``_str``, ``_selector``, ...: called as ``method(value_node, key)``, it
    reports a wrong value at the value and returns None), or ``""`` when the object's reader
    reads it by hand because its reading depends on other keys or objects (a span's ``file``, a
    selector's keys, which combine, the top-level declarations, ...).

    ``required``: the reader reports the key's absence (``Reader._fields``), the schema lists
    it under ``required``, the README says "yes". ``required_for``: the key is optional in
    general but required for these variants of the object (the lifecycle roles that need
    timestamps), or, as ``(PROJECT,)``, required in one spec file of the project rather than
    in each; ``missing`` is text appended to the "is missing" message.
    """

    key: str
    type: Mapping[str, Any]
    required: bool = False
    default: str | None = None
    description: str = ""
    convert: str = ""
    required_for: tuple[str, ...] = ()
    missing: str = ""

    def schema(self) -> dict[str, Any]:
        return {**self.type, "description": self.description} if self.description else dict(self.type)


Table = tuple[Field, ...]


def keys(table: Table) -> tuple[str, ...]:
    return tuple(f.key for f in table)


def required(table: Table, variant: str | None = None) -> list[str]:
    """The keys ``table`` requires (of its ``variant``, when given: a lifecycle role)."""
    return [f.key for f in table if f.required or (variant is not None and variant in f.required_for)]


# ``Field.required_for`` of a top-level key one spec file of the project must declare.
PROJECT = "project"


def required_text(field: Field) -> str:
    """The README's "required" cell of ``field``."""
    if field.required:
        return "yes"
    if field.required_for == (PROJECT,):
        return "in one spec file"
    return "for " + " and ".join(field.required_for) if field.required_for else ""


def by_key(table: Table) -> dict[str, Field]:
    return {f.key: f for f in table}


def properties(table: Table) -> dict[str, dict[str, Any]]:
    return {f.key: f.schema() for f in table}


# JSON Schema fragments shared by the tables and schema.py
STR: dict[str, Any] = {"type": "string"}
BOOL: dict[str, Any] = {"type": "boolean"}
NAME: dict[str, Any] = {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"}
PY_FILE: dict[str, Any] = {"type": "string", "pattern": r"^[^/].*\.py$"}
FUNCTION: dict[str, Any] = {
    "type": "string",
    "pattern": r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$",
}
EXPRESSIONS: dict[str, Any] = {
    "type": "object",
    "propertyNames": {"pattern": NAME["pattern"]},
    "additionalProperties": {"type": ["string", "number", "boolean"]},
}
NAMES: dict[str, Any] = {"type": "array", "items": NAME}
RELEASES_FIELDS: Table = (
    Field(
        "versions",
        STR,
        True,
        None,
        "A version specifier such as '>=0.19'.",
        missing=" (a specifier such as '>=0.19')",
    ),
    Field("reason", STR, False, None, "Why the entry is limited to those releases.", "_str"),
)
RELEASES: dict[str, Any] = {
    "description": "The megatron-core releases the entry applies to: a specifier such as '>=0.19', "
    "or {versions: SPECIFIER, reason: TEXT}.",
    "anyOf": [
        {"type": "string"},
        {
            "type": "object",
            "properties": properties(RELEASES_FIELDS),
            "additionalProperties": False,
            "required": ["versions"],
        },
    ],
}


def object_schema(table: Table, **extra: Any) -> dict[str, Any]:
    """The JSON Schema of an object allowing exactly the keys of ``table``, typed by it."""
    needed = required(table)
    return {
        "type": "object",
        "properties": properties(table),
        "additionalProperties": False,
        **({"required": needed} if needed else {}),
        **extra,
    }


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/definitions/{name}"}


_SELECTOR_TEXT = {
    "call": "the statement that calls this dotted name, e.g. self._forward_mlp",
    "assign": "the statement that assigns this variable",
    "return": "the statement that returns this expression",
    "if": "the if statement with this header (end it with ... to match a prefix)",
    "for": "the for statement with this header",
    "while": "the while statement with this header",
    "with": "the with statement with this header",
    "try": "the try statement whose body calls this name",
}
SELECTOR_MODIFIERS = ("within", "occurrence")
# A selector has one kind (or any:), optionally narrowed by the modifiers.
SELECTOR_FIELDS: Table = (
    *(Field(kind, STR, False, None, _SELECTOR_TEXT[kind]) for kind in SELECTOR_KINDS),
    Field(
        "within", ref("selector"), False, "anywhere in the function", "Only inside this compound statement."
    ),
    Field(
        "occurrence", {"type": "integer", "minimum": 1}, False, "the only match", "The Nth match (1-based)."
    ),
    Field(
        ANY,
        {"type": "array", "items": ref("selector"), "minItems": 2},
        False,
        None,
        "Alternatives: the first that selects exactly one statement (alone in its selector).",
    ),
)
# `around:` of a span or hook: a selector, or one of the run/rest/body forms.
REGION_FIELDS: Table = (
    *SELECTOR_FIELDS,
    Field("from", ref("selector"), False, None, "First statement of a run of statements."),
    Field("to", ref("selector"), False, None, "Last statement of that run."),
    Field("after", ref("selector"), False, None, "The rest of the block after this statement."),
    Field("body", ref("selector"), False, None, "The body of this compound statement."),
    Field("branch", {"enum": ["body", "else"]}, False, "body", "With body: its else branch."),
)

SPAN_FIELDS: Table = (
    Field("name", NAME, True, None, "The span name (dotted identifiers).", "_str"),
    Field("group", STR, True, None, "The span group (declared under groups:) that turns it on.", "_str"),
    Field(
        "file", PY_FILE, False, "the spec file's file:", "The instrumented file, relative to the source root."
    ),
    Field("function", FUNCTION, True, None, "The instrumented function: name or Class.method.", "_str"),
    Field(
        "around",
        ref("region"),
        False,
        "the whole body",
        "The covered statements (default: the whole body).",
        "_region",
    ),
    Field(
        "attributes",
        EXPRESSIONS,
        False,
        "{}",
        "Attribute key -> Python expression, evaluated when recording.",
        "_attributes",
    ),
    Field(
        "end_attributes",
        EXPRESSIONS,
        False,
        "{}",
        "Attributes set once the covered statements complete.",
        "_attributes",
    ),
    Field("goodput", BOOL, False, "false", "Whether the span counts towards goodput.", "_bool"),
    Field("note", STR, False, '""', "A note for the generated docs.", "_str"),
    Field(
        "when",
        STR,
        False,
        "always",
        "An extra condition (Python expression), evaluated while the group records.",
        "_expression",
    ),
    Field("names", NAMES, False, None, "The other names name_expr may choose.", "_names"),
    Field("name_expr", STR, False, None, "A Python expression choosing the name at run time.", "_expression"),
    Field(
        "form",
        {"enum": list(SPAN_FORMS)},
        False,
        "the spec file's form:, else try",
        "try (default), flat or decorator.",
        "_form",
    ),
    Field(
        "parents",
        {"anyOf": [NAMES, {"type": "object", "additionalProperties": NAMES}]},
        False,
        None,
        "Spans of other functions this one runs inside (per name when the span has several).",
    ),
    Field("releases", RELEASES, False, "every release", convert="_releases"),
    Field(
        "stream",
        ref("stream"),
        False,
        None,
        "The call returning a streamed response: the span ends with the (async) iterable it "
        "returns (exhausted, closed or abandoned), not when the covered statements complete.",
    ),
)

HOOK_FIELDS: Table = (
    Field("file", PY_FILE, False, "the spec file's file:", "The file, relative to the source root."),
    Field("function", FUNCTION, True, None, "The function: name or Class.method.", "_str"),
    Field("entry", {"const": True}, False, None, "Insert at function entry.", "_true"),
    Field("before", ref("selector"), False, None, "Insert before this statement.", "_selector"),
    Field("after", ref("selector"), False, None, "Insert after this statement.", "_selector"),
    Field(
        "around",
        ref("region"),
        False,
        None,
        "enter before, exit in a finally: after these statements.",
        "_region",
    ),
    Field("whole_function", {}, False, None, "enter/exit around the whole body."),
    Field("call", STR, False, None, "The call expression to insert.", "_call"),
    Field("enter", STR, False, None, "The call before the covered statements.", "_call"),
    Field("exit", STR, False, None, "The call in the finally: after them.", "_call"),
    Field(
        "guard", STR, False, None, "A group name (or metrics): the call runs only while it records.", "_str"
    ),
    Field(
        "record", EXPRESSIONS, False, None, "Metric name -> expression: a metric record site.", "_attributes"
    ),
    Field(
        "stamp",
        EXPRESSIONS,
        False,
        None,
        "Attribute key -> expression, set on the current span.",
        "_attributes",
    ),
    Field("note", STR, False, '""', "A note for the generated docs.", convert="_str"),
    Field("wrap", ref("wrap"), False, None, "Rewrite one call: wrap an argument or its result."),
    Field("releases", RELEASES, False, "every release", convert="_releases"),
)
# A hook has exactly one of these.
HOOK_PLACEMENTS = ("entry", "before", "after", "around", "whole_function", "wrap")

WRAP_FIELDS: Table = (
    Field("call", FUNCTION, True, None, "The called name."),
    Field("within", ref("selector"), False, "anywhere in the function"),
    Field("occurrence", {"type": "integer", "minimum": 1}, False, "the only call"),
    Field(
        "argument",
        {"type": ["integer", "string"]},
        False,
        None,
        "The argument (position or keyword).",
        "_argument",
    ),
    Field("result", STR, False, None, "Wrap the result, recorded under this attribute key.", "_str"),
    Field("with", STR, True, None, "The wrapper function, e.g. otel.in_context.", "_str"),
)

STREAM_FIELDS: Table = (
    Field("call", FUNCTION, True, None, "The called name, e.g. openai_stream."),
    Field("within", ref("selector"), False, "anywhere in the covered statements"),
    Field("occurrence", {"type": "integer", "minimum": 1}, False, "the only call"),
)

_WHL: dict[str, Any] = {"type": "string", "pattern": r"\.whl$"}
_SHA256: dict[str, Any] = {"type": "string", "pattern": "^[0-9a-f]{64}$"}

RUNTIME_FIELDS: Table = (
    Field(
        "package",
        STR,
        True,
        None,
        "The runtime package's path in the source tree, e.g. megatron/core/otel.",
        "_str",
    ),
)
SUPPORTED_FIELDS: Table = (
    Field("version", STR, True, None, "Another megatron-core release the specs support.", "_str"),
    Field("filename", _WHL, True, None, "Its wheel's file name.", "_str"),
    Field("sha256", _SHA256, True, None, "Its wheel's sha256 (64 lowercase hex digits).", "_str"),
)
UPSTREAM_FIELDS: Table = (
    Field("distribution", STR, True, None, "The upstream distribution, e.g. megatron-core.", "_str"),
    Field("version", STR, True, None, "The pinned release the specs are written against.", "_str"),
    Field("filename", _WHL, True, None, "Its wheel's file name.", "_str"),
    Field("sha256", _SHA256, True, None, "Its wheel's sha256 (64 lowercase hex digits).", "_str"),
    Field(
        "supported",
        {"type": "array", "items": object_schema(SUPPORTED_FIELDS)},
        False,
        "none",
        "Other releases the specs support, each with its wheel's sha256.",
    ),
    Field(
        "development",
        STR,
        False,
        "none",
        "The version a development tree's package_info.py names (Megatron-LM main: the next "
        "release, e.g. 0.20.0): `releases:` may name it alone, for code only that tree has.",
        "_str",
    ),
)
PRESET_FIELDS: Table = (
    Field(
        "groups", {"type": "array", "items": STR}, False, "[]", "The groups (or presets, or *) it turns on."
    ),
    Field("description", STR, False, '""', "What the preset is for.", convert="_str"),
)
# The lifecycle roles whose spans are backdated from a start to an end timestamp.
_TIMED = ("phase", "pre_startup")
LIFECYCLE_SPAN_FIELDS: Table = (
    Field("name", NAME, True, None, "The span name (dotted identifiers).", "_str"),
    Field("group", STR, False, "job", "The span group that turns it on.", convert="_str"),
    Field("goodput", BOOL, False, "false", "Whether the span counts towards goodput.", convert="_bool"),
    Field(
        "start",
        STR,
        False,
        None,
        "The startup timestamp key it starts at.",
        "_str",
        required_for=_TIMED,
    ),
    Field("end", STR, False, None, "The startup timestamp key it ends at.", "_str", required_for=_TIMED),
    Field("description", STR, False, '""', "A description for the generated docs.", convert="_str"),
    Field(
        "attributes",
        {"type": "object", "additionalProperties": STR},
        False,
        "{}",
        "Attributes of the span (key -> string).",
        "_labels",
    ),
)
METRIC_FIELDS: Table = (
    Field("name", NAME, True, None, "The metric name (dotted identifiers).", "_str"),
    Field("kind", {"enum": list(METRIC_KINDS)}, True, None, "histogram, gauge or counter.", "_str"),
    Field("unit", STR, True, None, "The unit (UCUM), e.g. s or By.", "_str"),
    Field("description", STR, False, '""', "A description for the generated docs.", convert="_str"),
)
ENV_FIELDS: Table = (
    Field("name", STR, True, None, "The environment variable's name.", "_str"),
    Field("default", {"type": ["string", "integer"]}, False, '""', "Its value when unset.", "_str_or_int"),
    Field("description", STR, False, '""', "A description for the generated docs.", convert="_str"),
    Field(
        "choices", {"type": "array", "items": STR}, False, "any value", "The values it may take.", "_choices"
    ),
    Field(
        "timestamp",
        STR,
        False,
        None,
        "The startup timestamp key it provides (epoch seconds).",
        convert="_str",
    ),
    Field("role", STR, False, "implied by the name", "What the runtime does with it.", convert="_str"),
)
FLAG_FIELDS: Table = (
    Field(
        "option",
        {"type": "string", "pattern": "^--[a-z0-9-]+$"},
        True,
        None,
        "The option, e.g. --otel-enabled.",
        "_str",
    ),
    Field(
        "action",
        STR,
        False,
        "takes a value",
        "store_true, or absent for an option taking a value.",
        convert="_str",
    ),
    Field("metavar", STR, False, None, "The value's name in --help.", convert="_str"),
    Field("env", STR, False, None, "The declared environment variable the option sets.", convert="_str"),
    Field(
        "help",
        STR,
        True,
        None,
        "The help text ({presets} and {groups} are filled in; {env} is the description of the "
        "variable the flag overrides, so that its accepted values are stated once).",
        "_str",
    ),
)
FLAGS_FIELDS: Table = (
    Field("file", PY_FILE, True, None, "The file that builds the argument parser.", "_str"),
    Field("function", FUNCTION, True, None, "The function that builds it.", "_str"),
    Field(
        "before",
        ref("selector"),
        True,
        None,
        "The statement the flags go before.",
        "_selector",
        missing=" (the statement the flags go before)",
    ),
    Field("parser", STR, True, None, "The (dotted) name of the argparse parser or group.", "_str"),
    Field("options", {"type": "array", "items": object_schema(FLAG_FIELDS)}, False, "[]", "The flags."),
)

ATTRIBUTE_FIELDS: Table = (
    Field(
        "type",
        {"enum": list(ATTRIBUTE_TYPES)},
        False,
        "inferred",
        "The attribute's type (semconv names).",
        "_str",
    ),
    Field("brief", STR, False, None, "A one-line description.", "_str"),
    Field("note", STR, False, None, "More description.", "_str"),
    Field(
        "compat",
        STR,
        False,
        None,
        'Why a name that breaks the semconv naming rules stays (e.g. "#6438 emits it"): '
        "the naming warning is not given for it, the taxonomy docs list it with this reason; "
        "on a name that breaks no rule it is a warning.",
        "_str",
    ),
)
_LIFECYCLE_TEXT = {
    "startup": "The root of the startup trace, backdated to program start.",
    "pre_startup": "A root of its own, backdated from its start to its end timestamp.",
    "phases": "Backdated children of startup, each from its start to its end timestamp.",
    "interval": "megatron.train: one root per save_interval iterations, linked to the previous one.",
}


def _lifecycle_span(role: str) -> dict[str, Any]:
    """The schema of a lifecycle span of ``role``: the shared definition, plus the keys that role
    requires."""
    needed = [f.key for f in LIFECYCLE_SPAN_FIELDS if role in f.required_for]
    return {"allOf": [ref("lifecycle_span"), {"required": needed}]} if needed else ref("lifecycle_span")


LIFECYCLE_FIELDS: Table = tuple(
    Field(
        key,
        {"type": "array", "items": _lifecycle_span(role)} if key == "phases" else _lifecycle_span(role),
        False,
        None,
        _LIFECYCLE_TEXT[key],
    )
    for key, role in LIFECYCLE_KEYS.items()
)
TOP_FIELDS: Table = (
    Field(
        "runtime",
        object_schema(RUNTIME_FIELDS),
        False,
        None,
        "Where the generated runtime package goes.",
        required_for=(PROJECT,),
    ),
    Field(
        "upstream",
        object_schema(UPSTREAM_FIELDS),
        False,
        None,
        "The megatron-core wheel the specs are pinned to.",
        required_for=(PROJECT,),
    ),
    Field(
        "groups",
        {
            "type": "object",
            "propertyNames": {"pattern": "^[a-z][a-z0-9_]*$"},
            "additionalProperties": {**STR, "description": "What the group covers."},
        },
        False,
        None,
        "Span groups: name -> what the group covers.",
        required_for=(PROJECT,),
    ),
    Field(
        "presets",
        {
            "type": "object",
            "additionalProperties": {
                "anyOf": [{"type": "array", "items": STR}, object_schema(PRESET_FIELDS)]
            },
        },
        False,
        None,
        "Named sets of groups (or presets) that --otel-span-groups accepts.",
    ),
    Field("lifecycle", object_schema(LIFECYCLE_FIELDS), False, None, "The spans the runtime opens itself."),
    Field(
        "metrics",
        {"type": "array", "items": object_schema(METRIC_FIELDS)},
        False,
        None,
        "The metrics hooks record.",
    ),
    Field(
        "env",
        {"type": "array", "items": object_schema(ENV_FIELDS)},
        False,
        None,
        "The runtime's environment variables.",
    ),
    Field(
        "flags", object_schema(FLAGS_FIELDS), False, None, "Command-line flags added to the argument parser."
    ),
    Field("file", PY_FILE, False, None, "Default file for this spec file's spans and hooks.", "_str"),
    Field(
        "form", {"enum": list(SPAN_FORMS)}, False, "try", "Default form for this spec file's spans.", "_form"
    ),
    Field("spans", {"type": "array", "items": ref("span")}, False, "[]", "This spec file's spans."),
    Field("hooks", {"type": "array", "items": ref("hook")}, False, "[]", "This spec file's hooks."),
    Field(
        "attributes",
        {
            "type": "object",
            "propertyNames": {"pattern": NAME["pattern"]},
            "additionalProperties": object_schema(ATTRIBUTE_FIELDS),
        },
        False,
        None,
        "Span attribute declarations: key -> type, brief, note.",
    ),
)

# The README's "Spec keys" section: (heading, table name) per spec object, in reading order; the
# tables are looked up when rendered (``readme_tables``).
README_TABLES: tuple[tuple[str, str], ...] = (
    ("spec file (top level)", "TOP_FIELDS"),
    ("`spans:` entry", "SPAN_FIELDS"),
    ("`hooks:` entry", "HOOK_FIELDS"),
    ("`wrap:` of a hook", "WRAP_FIELDS"),
    ("`stream:` of a span", "STREAM_FIELDS"),
    ("selector (`before:`, `after:`, `within:`, ...)", "SELECTOR_FIELDS"),
    ("`around:` region", "REGION_FIELDS"),
    ("`releases:` (mapping form)", "RELEASES_FIELDS"),
    ("`runtime:`", "RUNTIME_FIELDS"),
    ("`upstream:`", "UPSTREAM_FIELDS"),
    ("`upstream: supported:` entry", "SUPPORTED_FIELDS"),
    ("`presets:` entry (mapping form)", "PRESET_FIELDS"),
    ("`lifecycle:` span (startup, pre_startup, phases, interval)", "LIFECYCLE_SPAN_FIELDS"),
    ("`lifecycle:`", "LIFECYCLE_FIELDS"),
    ("`metrics:` entry", "METRIC_FIELDS"),
    ("`env:` entry", "ENV_FIELDS"),
    ("`flags:`", "FLAGS_FIELDS"),
    ("`flags: options:` entry", "FLAG_FIELDS"),
    ("`attributes:` entry", "ATTRIBUTE_FIELDS"),
)


def readme_tables() -> list[tuple[str, Table]]:
    """(heading, table) per spec object, in the README's order."""
    tables: dict[str, Table] = {k: v for k, v in globals().items() if k.endswith("_FIELDS")}
    return [(heading, tables[name]) for heading, name in README_TABLES]


README_BEGIN = "<!-- spec keys: rendered from codegen/spec/fields.py (render_key_list); do not edit -->"
README_END = "<!-- end of spec keys -->"


def _type_text(schema: Mapping[str, Any]) -> str:
    """A short name for a value's JSON Schema, for the README."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[1]
    if "enum" in schema:
        return " \\| ".join(str(v) for v in schema["enum"])
    if "const" in schema:
        return "true"
    if "allOf" in schema:
        return _type_text(schema["allOf"][0])
    if "anyOf" in schema:
        return " or ".join(_type_text(s) for s in schema["anyOf"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        return "list"
    if kind == "object":
        return "mapping"
    return str(kind) if kind else "any"


def render_key_list() -> str:
    """The README's key list: one Markdown table per spec object, between the markers."""
    lines = [README_BEGIN]
    for heading, table in readme_tables():
        lines += [
            "",
            f"**{heading}**",
            "",
            "| key | type | required | default | description |",
            "|---|---|---|---|---|",
        ]
        for f in table:
            text = f.description or str(f.type.get("description", ""))
            default = "" if f.required or f.default is None else f.default
            cells = (f"`{f.key}`", _type_text(f.type), required_text(f), default, text)
            lines.append(
                "| " + " | ".join(c.replace("|", "\\|") if i != 1 else c for i, c in enumerate(cells)) + " |"
            )
    lines += ["", README_END]
    return "\n".join(lines)


def update_readme(text: str) -> str:
    """``text`` (the README) with its key list replaced by the current rendering."""
    start = text.index(README_BEGIN)
    end = text.index(README_END) + len(README_END)
    return text[:start] + render_key_list() + text[end:]
