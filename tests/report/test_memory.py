"""Memory, not time: reading keeps flat arrays (tens of bytes a span), never the parsed capture.

A capture four times larger may cost only its spans' array entries more at peak; holding the
parsed JSON or one object per span (1-2 kB each) would fail both bounds. The time of the
1,000,000-span, 8-rank capture is a benchmark row (``python -m benchmarks.report_bench``).
"""

from __future__ import annotations

import tracemalloc

from codegen.report import build
from tests.report.synthetic import write_capture

PER_SPAN_BYTES = 200  # arrays: ~60 bytes a span; lists grow by up to 1/8 more
BASE_BYTES = 8_000_000  # the specs' project, one parsed document, the report itself


def _peak(project, path) -> tuple[int, int]:
    tracemalloc.start()
    try:
        outputs = build(project, [path])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, outputs.report.spans


def test_peak_memory_grows_by_array_entries_only(project, tmp_path):
    small, large = tmp_path / "small.jsonl", tmp_path / "large.jsonl"
    write_capture(small, ranks=2, iterations=100, save_every=50, eval_every=50)
    write_capture(large, ranks=8, iterations=100, save_every=50, eval_every=50)
    peak_small, spans_small = _peak(project, small)
    peak_large, spans_large = _peak(project, large)
    assert spans_large == 4 * spans_small > 20_000
    assert peak_small < BASE_BYTES + PER_SPAN_BYTES * spans_small, peak_small
    grown = peak_large - peak_small
    assert grown < PER_SPAN_BYTES * (spans_large - spans_small), (grown, spans_large - spans_small)
