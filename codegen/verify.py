"""Compare the spans a run really emitted with the taxonomy generated from the specs.

Takes the spans and metrics :mod:`codegen.capture` read (the OTLP JSON file format, or the SDK
console exporters' output; a malformed record is an error there, not a finding here) and reports:
names not in the taxonomy, documented spans never seen (within the checked groups), spans whose
group or parent differs from the docs, and missing attributes. A capture may also hold metrics:
each must be a declared instrument, with its declared unit and kind.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from codegen.capture import CapturedMetric, CapturedSpan
from codegen.resolve.hierarchy import parents_of
from codegen.resolve.sites import Plan
from codegen.spec.model import Project
from codegen.spec.semconv import attribute_types

GROUP_ATTRIBUTE = "megatron.span_group"
GOODPUT_ATTRIBUTE = "is_goodput_span"


# Instrument kind (telemetry.yaml) -> the OTLP data field its points are exported in.
METRIC_DATA = {"histogram": "histogram", "counter": "sum", "gauge": "gauge"}


@dataclass(frozen=True)
class Expectation:
    group: str
    parents: tuple[str, ...]
    required: tuple[str, ...]


@dataclass
class Report:
    spans: int = 0
    names: Counter[str] = field(default_factory=Counter)
    findings: list[str] = field(default_factory=list)
    metrics: Counter[str] = field(default_factory=Counter)

    def render(self) -> str:
        lines = [f"finding: {f}" for f in self.findings]
        metrics = f", {len(self.metrics)} metric names" if self.metrics else ""
        lines.append(
            f"{self.spans} spans, {len(self.names)} distinct names{metrics} checked: "
            f"{len(self.findings)} finding{'s' if len(self.findings) != 1 else ''}"
        )
        return "\n".join(lines)

    @property
    def clean(self) -> bool:
        return self.spans > 0 and not self.findings


def expectations(project: Project, plan: Plan) -> dict[str, Expectation]:
    parents = parents_of(project, plan)
    out: dict[str, Expectation] = {}
    for span in project.spans:
        required = [GROUP_ATTRIBUTE, *(a.key for a in span.attributes)]
        if span.goodput:
            required.append(GOODPUT_ATTRIBUTE)
        for name in span.names or (span.name,):
            out.setdefault(name, Expectation(span.group, parents[name], tuple(required)))
    for life in project.lifecycle:
        required = [GROUP_ATTRIBUTE] + [key for key, _ in life.attributes]
        required += [GOODPUT_ATTRIBUTE] if life.goodput else []
        out.setdefault(life.name, Expectation(life.group, parents[life.name], tuple(required)))
    return out


_SCALARS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "double": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


def value_has_type(value: Any, declared: str) -> bool:
    """Whether a captured attribute value fits its registry type (``int``, ``string[]``, ...)."""
    if declared.endswith("[]"):
        check = _SCALARS.get(declared[:-2])
        return check is None or (isinstance(value, (list, tuple)) and all(check(v) for v in value))
    check = _SCALARS.get(declared)
    return check is None or check(value)


def verify(
    project: Project,
    plan: Plan,
    captured: list[CapturedSpan],
    groups: frozenset[str] | None,
    metrics: Sequence[CapturedMetric] = (),
) -> Report:
    """``groups``: the groups whose every documented span must appear; None means the groups seen.

    ``metrics``: metric streams from the same capture, checked against the declared instruments.
    """
    expected = expectations(project, plan)
    types = attribute_types(project)
    report = Report(spans=len(captured))
    by_id = {s.span_id: s for s in captured}
    seen_groups: set[str] = set()
    # Groups that recorded in this capture: a span whose documented parent's group did not record
    # runs inside the nearest documented ancestor that did.
    recording = {expected[s.name].group for s in captured if s.name in expected}
    for span in captured:
        report.names[span.name] += 1
        want = expected.get(span.name)
        if want is None:
            report.findings.append(f"span '{span.name}' is not in the taxonomy")
            continue
        group = span.attributes.get(GROUP_ATTRIBUTE)
        seen_groups.add(want.group)
        if group != want.group:
            report.findings.append(f"span '{span.name}' has group {group!r}; the docs say '{want.group}'")
        parent = by_id.get(span.parent_id or "")
        if (
            parent is not None
            and parent.name in expected
            and parent.name not in _allowed_parents(span.name, expected, recording)
        ):
            allowed = ", ".join(want.parents) or "none (a root)"
            report.findings.append(
                f"span '{span.name}' runs inside '{parent.name}'; the docs allow: {allowed}"
            )
        missing = [key for key in want.required if key not in span.attributes]
        if missing:
            report.findings.append(f"span '{span.name}' lacks attribute(s) {', '.join(missing)}")
        for key, value in sorted(span.attributes.items()):
            declared = types.get(key)
            if declared is not None and not value_has_type(value, declared):
                report.findings.append(
                    f"span '{span.name}' attribute '{key}' is {value!r}; the registry says {declared}"
                )
    checked = groups if groups is not None else frozenset(seen_groups)
    for name, want in expected.items():
        if want.group in checked and name not in report.names:
            report.findings.append(f"span '{name}' (group {want.group}) is documented but was never seen")
    if not captured:
        report.findings.append("the capture holds no spans")
    declared_metrics = {m.name: m for m in project.metrics}
    for metric in metrics:
        if metric.name in report.metrics:
            report.metrics[metric.name] += metric.points
            continue
        report.metrics[metric.name] += metric.points
        decl = declared_metrics.get(metric.name)
        if decl is None:
            report.findings.append(f"metric '{metric.name}' is not declared")
            continue
        if metric.unit != decl.unit:
            report.findings.append(
                f"metric '{metric.name}' has unit {metric.unit!r}; the docs say {decl.unit!r}"
            )
        if metric.kind != METRIC_DATA.get(decl.kind, decl.kind):
            report.findings.append(
                f"metric '{metric.name}' is exported as a {metric.kind}; the docs declare a {decl.kind}"
            )
    return report


def _allowed_parents(name: str, expected: dict[str, Expectation], recording: set[str]) -> set[str]:
    """The documented parents of ``name``, and through parents whose group did not record, theirs."""
    allowed: set[str] = set()
    todo = list(expected[name].parents)
    while todo:
        parent = todo.pop()
        if parent in allowed:
            continue
        allowed.add(parent)
        want = expected.get(parent)
        if want is not None and want.group not in recording:
            todo.extend(want.parents)
    return allowed
