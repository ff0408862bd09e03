"""A synthetic multi-rank capture in the OTLP JSON file format, written without holding it in memory.

Shaped like a real one (the names are the specs' own, per the report's taxonomy): per rank the
backdated startup phases, model setup, data iterators, intervals of ``save_every`` iterations each
closed by a checkpoint save, evaluation every ``eval_every`` iterations, and inside each iteration
forward-backward, the optimizer, microbatch and layer spans, then the iteration report.
``hand_run`` and ``rank_run``: the small hand-made captures (``simple_run``) most tests read.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tests.support.otlp_json import Spans, simple_run


def hand_run(resource: dict[str, Any] | None = None, **run: Any) -> Spans:
    """A hand-made capture: ``Spans(resource)`` holding ``simple_run(spans, **run)``."""
    spans = Spans(resource)
    simple_run(spans, **run)
    return spans


def figures(report: Any) -> dict[str, Any]:
    """Every field of a ``Report``; unknown names without where they were first seen (a file's line
    or the store)."""
    fields = dataclasses.asdict(report)
    fields["unknown"] = {name: count for name, (count, _) in report.unknown.items()}
    return fields


def rank_run(rank: int, pid: int, **run: Any) -> Spans:
    """``hand_run`` of rank ``rank`` of two (service ``test``, process ``pid``)."""
    return hand_run({"service.name": "test", "process.pid": pid, "dl.rank": rank, "dl.world_size": 2}, **run)


def spans_per_iteration(layers: int = 4) -> int:
    """Spans a rank writes per iteration with ``layers`` layer spans per microbatch (4 of them)."""
    return 9 + 4 * layers


MS = 1_000_000


def _attr(key: str, value: object) -> str:
    if isinstance(value, bool):
        return f'{{"key":"{key}","value":{{"boolValue":{"true" if value else "false"}}}}}'
    if isinstance(value, int):
        return f'{{"key":"{key}","value":{{"intValue":"{value}"}}}}'
    return f'{{"key":"{key}","value":{{"stringValue":{json.dumps(value)}}}}}'


class _Writer:
    def __init__(self, handle, resource: dict[str, object], batch: int = 512) -> None:
        self.handle = handle
        self.resource = ",".join(_attr(k, v) for k, v in resource.items())
        self.service = str(resource.get("service.name", ""))
        self.resource_map = json.dumps({k: str(v) for k, v in resource.items()})
        self.pending: list[str] = []
        self.batch = batch
        self.next_id = 1
        self.count = 0

    def span(self, name: str, start: int, end: int, parent: int = 0, iteration: int | None = None,
             trace: int = 1, links: tuple[int, ...] = (), span_id: int = 0) -> int:  # fmt: skip
        span_id = self._id(span_id)
        attrs = [_attr("megatron.span_group", "x")]
        if iteration is not None:
            attrs.append(_attr("megatron.iteration", iteration))
        parent_text = f',"parentSpanId":"{parent:016x}"' if parent else ""
        link_text = ",".join(f'{{"traceId":"{trace - 1:032x}","spanId":"{s:016x}"}}' for s in links)
        self._add(
            f'{{"traceId":"{trace:032x}","spanId":"{span_id:016x}"{parent_text},"name":"{name}","kind":1,'
            f'"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}","attributes":[{",".join(attrs)}],'
            f'"links":[{link_text}],"status":{{}}}}'
        )
        return span_id

    def _id(self, span_id: int) -> int:
        """``span_id``, or the next free id when 0."""
        if not span_id:
            span_id = self.next_id
            self.next_id += 1
        return span_id

    def _add(self, line: str) -> None:
        self.pending.append(line)
        self.count += 1
        if len(self.pending) >= self.batch:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.handle.write(
                f'{{"resourceSpans":[{{"resource":{{"attributes":[{self.resource}]}},'
                f'"scopeSpans":[{{"scope":{{"name":"megatron"}},"spans":[{",".join(self.pending)}]}}]}}]}}\n'
            )
            self.pending = []


class _RowWriter(_Writer):
    """The same spans as the OpenTelemetry Collector's ClickHouse exporter stores them: one
    JSONEachRow line a span in ``codegen.report.store.LOAD_COLUMNS``' shape."""

    def span(self, name: str, start: int, end: int, parent: int = 0, iteration: int | None = None,
             trace: int = 1, links: tuple[int, ...] = (), span_id: int = 0) -> int:  # fmt: skip
        span_id = self._id(span_id)
        attrs = '{"megatron.span_group":"x"' + (
            f',"megatron.iteration":"{iteration}"}}' if iteration is not None else "}"
        )
        parent_text = f"{parent:016x}" if parent else ""
        link_spans = ",".join(f'"{s:016x}"' for s in links)
        link_traces = ",".join(f'"{trace - 1:032x}"' for _ in links)
        self._add(
            f'{{"start":{start},"TraceId":"{trace:032x}","SpanId":"{span_id:016x}","ParentSpanId":"{parent_text}",'
            f'"SpanName":"{name}","SpanKind":"Internal","ServiceName":"{self.service}",'
            f'"ResourceAttributes":{self.resource_map},"ScopeName":"megatron","ScopeVersion":"",'
            f'"SpanAttributes":{attrs},"Duration":{end - start},"StatusCode":"Unset","StatusMessage":"",'
            f'"LinkTraceIds":[{link_traces}],"LinkSpanIds":[{link_spans}]}}'
        )
        return span_id

    def flush(self) -> None:
        if self.pending:
            self.handle.write("\n".join(self.pending) + "\n")
            self.pending = []


def write_capture(path: Path, ranks: int = 8, iterations: int = 5000, save_every: int = 500,
                  eval_every: int = 1000, step_ms: int = 100, seed_skew_ms: int = 3,
                  split: bool = False, layers: int = 4, rows: bool = False) -> int:  # fmt: skip
    """Write the capture: one file, every rank (``split``: one file per rank, ``path`` a folder,
    files ``rank-N.jsonl``); return the number of spans written. ``layers``: layer spans per
    microbatch (``spans_per_iteration(layers)`` spans an iteration). ``rows``: as the ClickHouse
    exporter's rows (``_RowWriter``) instead of OTLP JSON."""
    total = 0
    t0 = 1_700_000_000 * 1_000_000_000
    if split:
        path.mkdir(parents=True, exist_ok=True)
    handle = None
    try:
        for rank in range(ranks):
            if handle is None or split:
                if handle is not None:
                    handle.close()
                handle = (path / f"rank-{rank}.jsonl" if split else path).open("w", encoding="utf-8")
            resource = {"service.name": "synthetic", "process.pid": 1000 + rank, "dl.rank": rank,
                        "dl.world_size": ranks, "host.name": "node0"}  # fmt: skip
            w = (_RowWriter if rows else _Writer)(handle, resource)
            w.span("pre_startup", t0, t0 + 2000 * MS)
            t = t0 + 2000 * MS
            startup = w.span("megatron.startup", t, t + 8000 * MS, trace=2)
            for k, phase in enumerate(("megatron.startup.imports", "megatron.startup.arg_parse",
                                       "megatron.startup.initialize_megatron")):  # fmt: skip
                w.span(phase, t + k * 1000 * MS, t + (k + 1) * 1000 * MS, startup, trace=2)
            w.span("megatron.startup.model_init", t + 3000 * MS, t + 6000 * MS, startup, trace=2)
            w.span("megatron.startup.dataloader", t + 6000 * MS, t + 8000 * MS, startup, trace=2)
            t += 8000 * MS
            previous = startup
            interval = 0
            trace = 3
            interval_start, interval_first, previous_link = t, 0, previous
            for number in range(iterations):
                if number % save_every == 0:
                    if number:
                        w.span(
                            "megatron.train",
                            interval_start,
                            t,
                            0,
                            interval_first,
                            trace,
                            (previous_link,),
                            interval,
                        )
                        trace += 1
                    interval_start, interval_first, previous_link = t, number, previous
                    interval = w.next_id + 10_000_000  # ids of intervals never collide with others
                    previous = interval
                step = (step_ms + (rank * seed_skew_ms if number % 7 == 0 else 0)) * MS
                if number == 0:
                    step *= 5
                it = w.span("megatron.train.iteration", t, t + step, interval, number, trace)
                if number == 0:
                    w.span("megatron.train.first_iteration", t, t + step, it, number, trace)
                fb = w.span(
                    "megatron.train.iteration.forward_backward", t, t + step * 8 // 10, it, trace=trace
                )
                for mb in range(4):
                    kind = "forward" if mb < 2 else "backward"
                    m0 = t + mb * step // 5
                    m = w.span(f"megatron.microbatch.{kind}", m0, m0 + step // 5, fb, trace=trace)
                    for layer in range(layers):
                        l0 = m0 + layer * step // (5 * layers)
                        w.span("megatron.layer.forward", l0, l0 + step // (5 * layers), m, trace=trace)
                w.span("megatron.train.iteration.optimizer", t + step * 8 // 10, t + step, it, trace=trace)
                t += step
                rep = w.span("megatron.train.iteration_report", t, t + 2 * MS, interval, trace=trace)
                w.span("megatron.train.log", t, t + 1 * MS, rep, trace=trace)
                t += 2 * MS
                if (number + 1) % eval_every == 0:
                    ev = w.span("megatron.evaluate", t, t + 500 * MS, interval, trace=trace)
                    w.span("megatron.evaluate.step", t, t + 500 * MS, ev, trace=trace)
                    t += 500 * MS
                if (number + 1) % save_every == 0:
                    save = w.span(
                        "megatron.checkpoint.exposed_save", t, t + 800 * MS, interval, number + 1, trace
                    )
                    w.span("megatron.checkpoint.save", t, t + 790 * MS, save, number + 1, trace)
                    t += 800 * MS
            w.span("megatron.train", interval_start, t, 0, interval_first, trace, (previous_link,), interval)
            w.flush()
            total += w.count
    finally:
        if handle is not None:
            handle.close()
    return total
