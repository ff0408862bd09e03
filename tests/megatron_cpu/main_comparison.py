"""Trace for trace: Megatron-LM main's own ``pretrain()`` on CPU with upstream's hand-written
telemetry (#6438, recording through nemo-lens) against the tree the specs instrument, same flags,
``--otel-span-groups all`` (issue 25, item 4). Renders ``docs/reference/main-comparison.md``.

Each span name is compared on: its group, its parents' names, its attribute keys, how many spans
of it per training iteration (count / iterations). The hand-written spans' groups are read from
the with-#6438 source: the group argument of ``managed_span`` / ``trace_fn`` (nemo-lens's helpers)
at the call naming the span, else the ``_otel_sg_enabled(GROUP)`` gate nearest before the name in
the same file (or the statement's own, on the line after), or the gate at the top of the helper
the name is passed to (``_backdated_otel_span``). Ours come from the specs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "reference" / "main-comparison.md"
CALL = re.compile(r"""(?:managed_span|trace_fn|span_cm)\(\s*['"](\w+)['"]\s*,\s*['"]([\w.]+)['"]""")
GATE = re.compile(r"""_otel_sg_enabled\(\s*['"](\w+)['"]\s*\)""")
NAME = re.compile(
    r"""['"]((?:megatron\.(?:startup|train|checkpoint|evaluate|layer|microbatch|grad_sync|p2p|activation)[\w.]*)|pre_startup)['"]"""
)
GATE_WINDOW = 60  # lines before a span's name searched for its gate


def hand_written_groups(with_6438: Path) -> dict[str, str]:
    groups: dict[str, str] = {}
    texts = {p: p.read_text(errors="replace") for p in (with_6438 / "megatron").rglob("*.py")}
    for text in texts.values():
        for group, name in CALL.findall(text):
            groups.setdefault(name, group)
    # helpers gated inside (def helper(name, ...): if not _otel_sg_enabled(G) ...): names passed to them
    for text in texts.values():
        for helper, body in re.findall(r"(?m)^def (\w+)\(([^\n]*\n(?:[ \t][^\n]*\n){0,3})", text):
            gates = GATE.findall(body)
            if gates:
                for name in re.findall(rf"""{helper}\(\s*['"]([\w.]+)['"]""", text):
                    groups.setdefault(name, gates[0])
    for text in texts.values():
        lines = text.splitlines()
        for number, line in enumerate(lines):
            for name in NAME.findall(line):
                if name in groups:
                    continue
                window = "\n".join(lines[max(0, number - GATE_WINDOW) : number + 2])
                gates = GATE.findall(window)
                if gates:
                    groups[name] = gates[-1]
    return groups


@dataclass
class Summary:
    count: int = 0
    parents: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)


def summarize(spans: list[dict[str, Any]]) -> dict[str, Summary]:
    by_id = {s["span_id"]: s for s in spans}
    out: dict[str, Summary] = {}
    for span in spans:
        entry = out.setdefault(span["name"], Summary())
        entry.count += 1
        parent = by_id.get(span["parent_id"]) if span["parent_id"] else None
        entry.parents.add(
            parent["name"] if parent else "(root)" if not span["parent_id"] else "(not exported)"
        )
        entry.keys.update(span["attributes"])
    return out


# The attribute every span of the runtime carries (its group, for queries by group).
RUNTIME_KEYS = {"megatron.span_group"}

# Every difference with its reason, by (span name or "*", aspect). A difference without one fails.
REASONS: dict[tuple[str, str], str] = {
    ("*", "keys"): "Added: every span carries `megatron.span_group` (its group), so a backend can "
    "filter by group; the hand-written spans carry none.",
    ("megatron.train", "keys"): "Added: `megatron.iteration` (the interval's first iteration) and "
    "`megatron.trace_interval` (its index), so each interval trace says which iterations it holds.",
    ("megatron.train.first_iteration", "parents"): "Nesting: here the first-iteration span is a "
    "child of that iteration's `megatron.train.iteration`, which stays a child of its interval "
    "like every other iteration; the hand-written code wraps iteration 0 in it instead, so the "
    "first iteration is the one iteration not directly under `megatron.train`.",
    ("megatron.train.iteration", "parents"): "The same nesting, seen from the iteration: every "
    "iteration's parent is its interval here.",
    ("megatron.train.iteration.forward_backward", "parents"): "The same nesting: on the first "
    "iteration the step's phases sit under `megatron.train.first_iteration` (itself under the "
    "iteration).",
    ("megatron.train.iteration.optimizer", "parents"): "The same nesting as forward_backward.",
    **{
        (name, "extra"): "Launcher timestamps: the runtime reads them from the environment "
        "(MEGATRON_OTEL_JOB_START_TIME, _LAUNCH_SCRIPT_START_TIME, _PRE_SRUN_TIME; both runs have "
        "them set, as a launcher would); the hand-written code takes them only as arguments of "
        "set_startup_timestamps(), which Megatron's entry scripts (pretrain_gpt.py) never pass, so "
        "its pre-startup spans appear only with a launcher that edits the entry script."
        for name in ("pre_startup", "megatron.startup.launch_script", "megatron.startup.container_load")
    },
    ("megatron.checkpoint.timers_log", "group"): "The hand-written code gates it by `step` while "
    "every other span of the checkpoint save is `checkpoint` (the reference taxonomy notes it, "
    "'step (sic)'); here it is `checkpoint`, so `--otel-span-groups checkpoint` shows the whole save.",
}


def compare(
    hand: list[dict[str, Any]],
    ours: list[dict[str, Any]],
    groups_hand: dict[str, str],
    groups_ours: dict[str, str],
    iterations: int,
) -> list[tuple[str, str, str, str]]:
    """``(name, aspect, hand-written, here)`` for every difference."""
    a, b = summarize(hand), summarize(ours)
    out: list[tuple[str, str, str, str]] = []
    for name in sorted(set(a) | set(b)):
        if name not in b:
            out.append((name, "missing", f"{a[name].count} spans", "none"))
            continue
        if name not in a:
            out.append((name, "extra", "none", f"{b[name].count} spans"))
            continue
        left, right = a[name], b[name]
        if groups_hand.get(name, "?") != groups_ours.get(name, "?"):
            out.append((name, "group", groups_hand.get(name, "?"), groups_ours.get(name, "?")))
        if left.parents != right.parents:
            out.append((name, "parents", _names(left.parents), _names(right.parents)))
        extra_keys = right.keys - left.keys - RUNTIME_KEYS
        if left.keys - right.keys or extra_keys:
            out.append((name, "keys", _names(left.keys - right.keys) or "-", _names(extra_keys) or "-"))
        if left.count != right.count:
            out.append(
                (name, "count per iteration", _per(left.count, iterations), _per(right.count, iterations))
            )
    if any(RUNTIME_KEYS <= s.keys for s in b.values()):
        out.append(("*", "keys", "-", _names(RUNTIME_KEYS)))
    return out


def reason(name: str, aspect: str) -> str | None:
    return REASONS.get((name, aspect))


def _names(values: set[str]) -> str:
    return ", ".join(sorted(values))


def _per(count: int, iterations: int) -> str:
    return f"{count / iterations:g}"


def render(
    hand: list[dict[str, Any]],
    ours: list[dict[str, Any]],
    groups_hand: dict[str, str],
    groups_ours: dict[str, str],
    iterations: int,
    argv: list[str],
) -> str:
    a, b = summarize(hand), summarize(ours)
    rows = compare(hand, ours, groups_hand, groups_ours, iterations)
    lines = [
        "# Megatron-LM main: the hand-written trace against the generated one",
        "",
        "<!-- Generated by tests/megatron_cpu/test_main_pretrain.py from two pretrain() runs on",
        "CPU; CODEGEN_REGENERATE=1 rewrites it. Do not edit by hand. -->",
        "",
        "Megatron-LM main (d98e8a64dd) trained on CPU by its own `pretrain()`, same flags, once with",
        "upstream's hand-written telemetry (PR #6438, recording through nemo-lens 0.1.0) and once",
        "as the specs instrument the same commit without #6438:",
        "",
        "```",
        " ".join(argv),
        "```",
        "",
        f"- Hand-written: {len(hand)} spans of {len(a)} names; generated: {len(ours)} spans of "
        f"{len(b)} names; {iterations} training iterations.",
        f"- Names only in the hand-written trace: {len(set(a) - set(b))}; only in the generated: "
        f"{len(set(b) - set(a))}.",
        f"- Differences (below): {len(rows)}.",
        "",
        "Spans compared per name: group, parents' names, attribute keys, spans per iteration.",
        "",
        "| span | aspect | hand-written (#6438) | generated | why |",
        "|---|---|---|---|---|",
    ]
    for name, aspect, left, right in rows:
        lines.append(
            f"| {name} | {aspect} | {left} | {right} | {reason(name, aspect) or '**no reason given**'} |"
        )
    lines += [
        "",
        "## Every span name, side by side",
        "",
        "| span | group | parents | spans per iteration |",
        "|---|---|---|---|",
    ]
    for name in sorted(set(a) | set(b)):
        entry = b.get(name) or a[name]
        lines.append(
            f"| {name} | {groups_ours.get(name, groups_hand.get(name, '?'))} | {_names(entry.parents)} | "
            f"{_per(a[name].count, iterations) if name in a else '-'} / {_per(entry.count, iterations) if name in b else '-'} |"
        )
    return "\n".join(lines) + "\n"
