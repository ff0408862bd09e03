"""The reader reduces spans to aggregates while reading (``parse.Steps``: a row per process and
iteration; phase spans wait for their iteration span, or are matched when the capture is closed):
the report cannot depend on the order the spans come in."""

from __future__ import annotations

import json

from codegen.report import build
from tests.report.synthetic import figures
from tests.support.paths import REPORT_DATA as DATA


def _reversed(source, target):
    """Every span of ``source`` in the opposite order: parents before children, last line first."""
    lines = []
    for line in reversed(source.read_text().splitlines()):
        document = json.loads(line)
        for resource in document.get("resourceSpans", []):
            resource["scopeSpans"].reverse()
            for scope in resource["scopeSpans"]:
                scope["spans"].reverse()
        lines.append(json.dumps(document))
    target.write_text("\n".join(lines) + "\n")
    return target


def test_order_of_spans_does_not_matter(project, tmp_path):
    for name in ("fresh.jsonl", "resume.jsonl"):
        forward = build(project, [DATA / name])
        backward = build(project, [_reversed(DATA / name, tmp_path / name)])
        assert figures(backward.report) == figures(forward.report), name
        assert forward.report.phase_totals and forward.report.steps.count


def test_phase_spans_read_before_and_after_their_iteration(project, tmp_path):
    forward = build(project, [DATA / "fresh.jsonl"])
    steps = forward.capture.steps
    assert not steps.orphans  # resolved when closed
    backward = build(project, [_reversed(DATA / "fresh.jsonl", tmp_path / "fresh.jsonl")]).capture.steps
    assert sorted(steps.phases) == sorted(backward.phases)
    for name, column in steps.phases.items():
        assert sorted(column) == sorted(backward.phases[name]) and any(v > 0 for v in column), name
