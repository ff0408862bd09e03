"""Render: the capture as Chrome/Perfetto trace-event JSON (opens in ui.perfetto.dev).

One process per exporting rank (of each run), one track per thread (the span's ``thread.id`` when
recorded, else the main track), every span a complete ("X") event, and every span link a flow
("s" at the linked span, "f" at the linking one): the training intervals' links to the previous
interval, and across ranks the pipeline links when the capture has them. Written event by event:
memory does not grow with the output.
"""

from __future__ import annotations

import json
from typing import IO

from codegen.report.parse import Capture
from codegen.report.taxonomy import Taxonomy

MAIN_THREAD = 1


def write_perfetto(capture: Capture, taxonomy: Taxonomy, out: IO[str]) -> int:
    """Write the trace to ``out``; return the number of events."""
    return _write(capture, taxonomy, min(p.start for p in capture.processes), out)


def _us(ns: int, origin: int) -> float:
    return round((ns - origin) / 1000, 3)


def _write(capture: Capture, taxonomy: Taxonomy, origin: int, out: IO[str]) -> int:
    out.write('{"displayTimeUnit":"ms","otherData":{"generator":"codegen report"},"traceEvents":[\n')
    count = 0

    def emit(event: dict[str, object]) -> None:
        nonlocal count
        out.write(("," if count else "") + json.dumps(event, separators=(",", ":")) + "\n")
        count += 1

    threads: dict[int, set[int]] = {}
    for p, t in zip(capture.process, capture.thread):
        threads.setdefault(p, set()).add(t or MAIN_THREAD)
    for process in capture.processes:
        pid = process.index + 1
        label = f"run {process.run}: {process.label}"
        emit({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": label}})
        emit({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
        for tid in sorted(threads.get(process.index, {MAIN_THREAD})):
            name = "main" if tid == MAIN_THREAD else f"thread {tid}"
            emit({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
    names = capture.names
    groups = [taxonomy.group.get(n, "unknown") for n in names]
    categories = [taxonomy.category.get(n, "") for n in names]
    # the complete events, formatted directly (a million of them): each name's fixed part once
    key = json.dumps(taxonomy.iteration_key)
    head = []
    for n, name in enumerate(names):
        args = f'"group":{json.dumps(groups[n])}' + (
            f',"counts_as":"{categories[n]}"' if categories[n] else ""
        )
        head.append((f'{{"ph":"X","name":{json.dumps(name)},"cat":{json.dumps(groups[n])},"ts":', "{" + args))
    write = out.write
    for i in range(len(capture)):
        n = capture.name[i]
        before, args = head[n]
        number = capture.iteration[i]
        extra = (f",{key}:{number}" if number >= 0 else "") + (
            ',"status":"ERROR"' if capture.error[i] else ""
        )
        start = capture.start[i]
        write(
            f'{"," if count else ""}{before}{_us(start, origin)},"dur":{round((capture.end[i] - start) / 1000, 3)},'
            f'"pid":{capture.process[i] + 1},"tid":{capture.thread[i] or MAIN_THREAD},"args":{args}{extra}}}}}\n'
        )
        count += 1
    # flows: from the linked span's end to the linking span's start
    wanted = {link.span_id for link in capture.links}
    where: dict[int, list[int]] = {}
    for i, span_id in enumerate(capture.span_id):
        if span_id in wanted:
            where.setdefault(span_id, []).append(i)
    # numbered in one order whatever order the spans came in (files, a store)
    links = sorted(
        capture.links,
        key=lambda k: (capture.process[k.span], capture.start[k.span], capture.end[k.span], k.span_id),
    )

    def flow(phase: dict[str, object], number: int, i: int, at: int) -> None:
        event = {**phase, "id": number, "name": "link", "cat": "link", "ts": _us(at, origin)}
        emit({**event, "pid": capture.process[i] + 1, "tid": capture.thread[i] or MAIN_THREAD})

    for number, link in enumerate(links, 1):
        found = where.get(link.span_id, [])
        if not found:
            continue
        own = capture.process[link.span]
        source = next((i for i in found if capture.process[i] == own), found[0])
        flow({"ph": "s"}, number, source, max(capture.start[source], capture.end[source] - 1000))
        flow({"ph": "f", "bp": "e"}, number, link.span, capture.start[link.span])
    out.write("]}\n")
    return count
