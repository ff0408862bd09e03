"""Memory, not time: the report keeps aggregates (the spans it reads one by one, one row per
process and iteration), never the spans themselves, nor the parsed capture.

More spans of the same iterations (a deeper model: more layer spans) cost nothing at peak; more
iterations cost their rows (tens of bytes each). Holding the parsed JSON or one entry per span
would fail both bounds. The time and memory at 1M-30M spans are benchmark rows
(``python -m benchmarks.report_bench``).
"""

from __future__ import annotations

import tracemalloc

from codegen.report import build
from tests.report.synthetic import write_capture

PER_ROW_BYTES = 400  # a row: ~80 bytes of arrays; the report's Iteration objects and dicts the rest
BASE_BYTES = 8_000_000  # the specs' project, one parsed document, the report itself


def _peak(project, path) -> tuple[int, int]:
    tracemalloc.start()
    try:
        outputs = build(project, [path])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, outputs.report.spans


def test_peak_memory_does_not_grow_with_spans_of_the_same_iterations(project, tmp_path):
    small, large = tmp_path / "small.jsonl", tmp_path / "large.jsonl"
    write_capture(small, ranks=4, iterations=100, save_every=50, eval_every=50, layers=1)
    write_capture(large, ranks=4, iterations=100, save_every=50, eval_every=50, layers=16)
    peak_small, spans_small = _peak(project, small)
    peak_large, spans_large = _peak(project, large)
    assert spans_large > 5 * spans_small > 20_000
    assert peak_small < BASE_BYTES, peak_small
    # 60,000 more spans: a span's array entry (~60 bytes) would add 3.6 MB
    assert peak_large - peak_small < 500_000, (peak_small, peak_large)


def test_peak_memory_grows_by_rows_with_iterations(project, tmp_path):
    small, large = tmp_path / "small.jsonl", tmp_path / "large.jsonl"
    write_capture(small, ranks=2, iterations=100, save_every=50, eval_every=50)
    write_capture(large, ranks=8, iterations=100, save_every=50, eval_every=50)
    peak_small, spans_small = _peak(project, small)
    peak_large, spans_large = _peak(project, large)
    assert spans_large == 4 * spans_small > 20_000
    rows = 600  # 6 more ranks x 100 iterations
    assert peak_large - peak_small < PER_ROW_BYTES * rows + 200_000, (peak_small, peak_large)
