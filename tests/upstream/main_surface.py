"""#6438's user surface, read from the Megatron-LM main snapshot, against this project's: the
``--otel-*`` flags, the ``MEGATRON_OTEL_*`` variables, the span groups and presets. Renders
``docs/reference/main-compatibility.md``, which lists every difference with its reason.

Read from the trees as text and AST (never imported): the flags from ``arguments.py``, the
variables the tree reads itself, the span groups from ``span_groups.py`` (executed alone: it needs
only ``typing``, nemo-lens absent). #6438 reads most of its variables through nemo-lens
(``NemoLensConfig.from_env(prefix='MEGATRON_OTEL', fallback_prefix='NEMO_LENS')``): those keys
come from nemo-lens's source when it is importable, else from the list below (nemo-lens 0.1.0,
the release on the package index; Megatron pins a git revision of it, b85578fc).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from codegen.diagnostics import Diagnostics
from codegen.spec.load import load_project

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "reference" / "main-compatibility.md"
ARGUMENTS = "megatron/training/arguments.py"
GLOBAL_VARS = "megatron/training/global_vars.py"
SPAN_GROUPS = "megatron/core/telemetry/span_groups.py"
# NemoLensConfig.from_env's keys in nemo-lens 0.1.0 (each read as PREFIX_KEY, then NEMO_LENS_KEY).
NEMO_LENS_KEYS = (
    "ENABLED", "EXPORT_STRATEGY", "EXPORT_RANK", "EXPORT_SAMPLE_RATE", "SAMPLER_ENABLED",
    "TRACES_ENABLED", "METRICS_ENABLED", "LOGS_ENABLED", "SPAN_GROUPS", "EXPORTER", "RUN_ID",
    "USER_ID",
)  # fmt: skip

# Every difference, with its reason. A difference found without a reason here fails the test.
REASONS: dict[str, str] = {
    "flag --otel-export-ranks": "Added: which ranks export (last, all, a list, every:N, "
    "one-per:DIMS); upstream has only the MEGATRON_OTEL_EXPORT_* variables.",
    "flag --otel-span-groups help": "Upstream's help lists a preset `full` that does not exist "
    "(a defect of the hand-written code); the help here lists the presets and groups the "
    "registry has.",
    "variable MEGATRON_OTEL_EXPORTER": "Same values (otlp, console) plus `none`; when unset, the "
    "standard OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER choose each signal's exporter.",
    "variable MEGATRON_OTEL_LOGS_ENABLED": "Accepted, not built, logged once: no bridge of "
    "Python logging to OpenTelemetry logs.",
    "variable MEGATRON_OTEL_RUN_ID": "Same attributes (nemo.run.id, service.instance.id = "
    "ID-rankN) when it or $SLURM_JOB_ID is set; without either, upstream makes a random id per "
    "process, here megatron.run_id (agreed by every rank) identifies the run instead.",
    "variable MEGATRON_OTEL_EXPORT_STRATEGY": "Same strategies and meaning; "
    "MEGATRON_OTEL_EXPORT_RANKS is the richer form (giving both is an error).",
    "variables MEGATRON_OTEL_* added": "Added (export limits, SIGTERM flush, startup "
    "timestamps, export ranks, providers, recording path): see configuration.md.",
    "groups/presets: '*'": "`*` (every group) is accepted besides upstream's names.",
    "group inference_steps": "Added (issue 40): the inference server's steps within a request "
    "(tokenization, chat template, the wait on the engine); upstream reserves `inference` only.",
    "preset all": "Also `inference_steps`, the group added here: `all` is every group.",
    "preset profiling": "Also `inference_steps`, the group added here: `profiling` is every group.",
    "span group registry": "None: the runtime resolves --otel-span-groups against the tree's "
    "own MegatronSpanGroup (its groups and presets), so the two cannot drift.",
}


@dataclass(frozen=True)
class Surface:
    flags: dict[str, str]  # option -> "switch" or "value"
    flag_help: dict[str, str]
    variables: tuple[str, ...]
    groups: frozenset[str]
    presets: dict[str, frozenset[str]]


def _argument_flags(source: str) -> tuple[dict[str, str], dict[str, str]]:
    flags, helps = {}, {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        options = [
            a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--otel")
        ]
        if not options:
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        action = keywords.get("action")
        kind = "switch" if isinstance(action, ast.Constant) and action.value == "store_true" else "value"
        help_node = keywords.get("help")
        text = ast.literal_eval(help_node) if help_node is not None else ""
        for option in options:
            flags[option], helps[option] = kind, str(text)
    return flags, helps


def nemo_lens_keys() -> tuple[str, ...]:
    try:
        import inspect

        from nemo.lens.config import NemoLensConfig
    except ImportError:
        return NEMO_LENS_KEYS
    source = inspect.getsource(NemoLensConfig.from_env)
    return tuple(dict.fromkeys(re.findall(r'_(?:env|bool|int|float)\("([A-Z_]+)"', source)))


def _registry(path: Path) -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    namespace: dict[str, object] = {"__name__": "span_groups_alone"}
    code = path.read_text()
    # nemo-lens absent: the module's own stub SpanGroup (the import below fails on purpose).
    code = code.replace("from nemo.lens.groups import SpanGroup", "raise ImportError")
    exec(compile(code, str(path), "exec"), namespace)
    registry = namespace["MegatronSpanGroup"]
    presets = {str(k): frozenset(v) for k, v in registry._PRESETS.items()}  # type: ignore[attr-defined]
    return frozenset(registry.ALL_GROUPS), presets  # type: ignore[attr-defined]


def upstream_surface(with_6438: Path) -> Surface:
    flags, helps = _argument_flags((with_6438 / ARGUMENTS).read_text())
    read_directly = set()
    for path in (with_6438 / "megatron").rglob("*.py"):
        read_directly.update(re.findall(r"MEGATRON_OTEL_[A-Z_]+", path.read_text(errors="replace")))
    if "prefix='MEGATRON_OTEL'" in (with_6438 / GLOBAL_VARS).read_text():
        read_directly.update(f"MEGATRON_OTEL_{key}" for key in nemo_lens_keys())
    groups, presets = _registry(with_6438 / SPAN_GROUPS)
    return Surface(flags, helps, tuple(sorted(read_directly)), groups, presets)


def our_surface() -> Surface:
    project = load_project(REPO / "specs", Diagnostics())
    flags = {f.option: "switch" if f.action == "store_true" else "value" for f in project.flags}
    helps = {f.option: f.help for f in project.flags}
    variables = tuple(sorted(v.name for v in project.env if v.name.startswith("MEGATRON_OTEL_")))
    presets = {p.name: frozenset(project.expand_preset(p.name)) for p in project.presets}
    return Surface(flags, helps, variables, frozenset(g.name for g in project.groups), presets)


def differences(upstream: Surface, ours: Surface) -> list[tuple[str, str, str]]:
    """``(key, upstream, here)`` for every difference; missing upstream names are keys too."""
    out: list[tuple[str, str, str]] = []
    for option in sorted(set(upstream.flags) | set(ours.flags)):
        up, here = upstream.flags.get(option, "-"), ours.flags.get(option, "-")
        if up != here:
            out.append((f"flag {option}", up, here))
        elif "full" in upstream.flag_help.get(option, "") and "full" not in ours.flag_help[option]:
            out.append((f"flag {option} help", "lists preset `full`", "lists the registry's presets"))
    for name in upstream.variables:
        if name not in ours.variables:
            out.append((f"variable {name}", "read", "-"))
    for name in sorted(set(REASON_VARIABLES) & set(upstream.variables)):
        out.append((f"variable {name}", "read", "read, see reason"))
    added = [name for name in ours.variables if name not in upstream.variables]
    if added:
        out.append(("variables MEGATRON_OTEL_* added", "-", ", ".join(added)))
    for group in sorted(upstream.groups ^ ours.groups):
        out.append((f"group {group}", str(group in upstream.groups), str(group in ours.groups)))
    for preset in sorted(set(upstream.presets) | set(ours.presets)):
        up_members, our_members = upstream.presets.get(preset), ours.presets.get(preset)
        if up_members != our_members:
            out.append((f"preset {preset}", _names(up_members), _names(our_members)))
    out.append(("groups/presets: '*'", "unknown name", "every group"))
    out.append(("span group registry", "MegatronSpanGroup", "MegatronSpanGroup (adopted)"))
    return out


# Variables read with a difference in meaning worth stating even though both sides read them.
REASON_VARIABLES = (
    "MEGATRON_OTEL_EXPORTER",
    "MEGATRON_OTEL_EXPORT_STRATEGY",
    "MEGATRON_OTEL_LOGS_ENABLED",
    "MEGATRON_OTEL_RUN_ID",
)


def _names(members: frozenset[str] | None) -> str:
    return "-" if members is None else ", ".join(sorted(members))


def render(upstream: Surface, ours: Surface) -> str:
    same_vars = [v for v in upstream.variables if v in ours.variables]
    lines = [
        "# Megatron-LM main: #6438's telemetry settings here",
        "",
        "<!-- Generated by tests/upstream/test_main_surface.py from the Megatron-LM main snapshot",
        "(d98e8a64dd) and specs/; CODEGEN_REGENERATE=1 rewrites it. Do not edit by hand. -->",
        "",
        "Upstream Megatron-LM's hand-written telemetry (PR #6438) is configured with three flags",
        "and the `MEGATRON_OTEL_*` variables (most read through nemo-lens, each also as",
        "`NEMO_LENS_*` when unset). On a tree instrumented from the specs, every one of them is",
        "accepted with the same values and meaning, the same span groups and presets included;",
        "this page lists every difference.",
        "",
        f"- Flags upstream: {', '.join(f'`{f}`' for f in sorted(upstream.flags))}; all here.",
        f"- Variables upstream reads: {len(upstream.variables)}; read here: {len(same_vars)}.",
        f"- Span groups upstream: {len(upstream.groups)}; here: {len(ours.groups)}; presets "
        f"upstream: {', '.join(sorted(upstream.presets))}; here: {', '.join(sorted(ours.presets))}.",
        "",
        "| what | upstream (#6438) | here | why |",
        "|---|---|---|---|",
    ]
    for key, up, here in differences(upstream, ours):
        lines.append(f"| {key} | {up} | {here} | {REASONS.get(key, '**no reason given**')} |")
    return "\n".join(lines) + "\n"
