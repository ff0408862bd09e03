"""Captures in the OTLP JSON file format, built and read for the tests.

Built: :func:`value` and :func:`attributes` encode plain values as OTLP ``AnyValue`` /
``KeyValue`` lists (64-bit integers as strings); :class:`Spans` builds a capture span by span and
:func:`simple_run` adds a whole small training run to it. Read: :func:`read_spans` gives every
span of a capture as a plain dict, through ``codegen.capture`` (the project's one reader).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

S = 1_000_000_000  # ns per second
T0 = 1_700_000_000 * S


def value(item: Any) -> dict[str, Any]:
    """``item`` as an OTLP ``AnyValue``."""
    if isinstance(item, bool):
        return {"boolValue": item}
    if isinstance(item, int):
        return {"intValue": str(item)}
    if isinstance(item, float):
        return {"doubleValue": item}
    if isinstance(item, (list, tuple)):
        return {"arrayValue": {"values": [value(v) for v in item]}}
    return {"stringValue": str(item)}


def attributes(values: Any) -> list[dict[str, Any]]:
    """A mapping as an OTLP ``KeyValue`` list."""
    return [{"key": key, "value": value(item)} for key, item in dict(values or {}).items()]


_STATUS_CODES = {"UNSET": 0, "OK": 1, "ERROR": 2}


def read_spans(path: Path) -> list[dict[str, Any]]:
    """Every span of an OTLP JSON capture (none when there is no file), in export order, as a plain
    dict: name, ids, start and end in ns, attributes, status code (0, 1, 2), linked span ids and
    the ``process.pid`` of the resource that exported it."""
    from codegen.capture import read_spans as read

    if not path.exists():
        return []
    return [
        {
            "name": span.name,
            "trace_id": span.trace_id,
            "span_id": span.span_id,
            "parent_id": span.parent_id,
            "start": span.start_ns,
            "end": span.end_ns,
            "attributes": span.attributes,
            "status": _STATUS_CODES[span.status],
            "links": [link.span_id for link in span.links],
            "pid": span.resource.get("process.pid"),
        }
        for span in read(path)
    ]


def named(spans: list[dict[str, Any]], name: str, iteration: int | None = None) -> list[dict[str, Any]]:
    """The spans called ``name`` (plain dicts, as :func:`read_spans` gives them); with
    ``iteration``, only those whose ``megatron.iteration`` it is."""
    return [
        span
        for span in spans
        if span["name"] == name
        and (iteration is None or span["attributes"].get("megatron.iteration") == iteration)
    ]


def console_capture(spans: list[dict[str, Any]]) -> str:
    """Spans (plain dicts with integer ids) in the SDK console exporter's JSON layout (the fields
    `codegen verify` reads)."""
    return "".join(
        json.dumps(
            {
                "name": s["name"],
                "context": {"trace_id": f"0x{s['trace_id']:032x}", "span_id": f"0x{s['span_id']:016x}"},
                "parent_id": f"0x{s['parent_id']:016x}" if s["parent_id"] is not None else None,
                "attributes": s["attributes"],
            },
            indent=4,
        )
        + "\n"
        for s in spans
    )


class Spans:
    """A capture built span by span: ``add(name, start_s, end_s, parent=..., iteration=...)``."""

    def __init__(self, resource: dict[str, Any] | None = None) -> None:
        self.resource = resource or {"service.name": "test", "process.pid": 1}
        self.spans: list[dict[str, Any]] = []
        self.next = 1

    def add(self, name: str, start: float, end: float, parent: int = 0, iteration: int | None = None,
            error: bool = False, links: Sequence[int] = ()) -> int:  # fmt: skip
        span_id = self.next
        self.next += 1
        attrs = [{"key": "megatron.span_group", "value": {"stringValue": "x"}}]
        if iteration is not None:
            attrs.append({"key": "megatron.iteration", "value": {"intValue": str(iteration)}})
        raw: dict[str, Any] = {
            "traceId": f"{1:032x}",
            "spanId": f"{span_id:016x}",
            "name": name,
            "startTimeUnixNano": str(T0 + round(start * S)),
            "endTimeUnixNano": str(T0 + round(end * S)),
            "attributes": attrs,
            "status": {"code": 2} if error else {},
            "links": [{"traceId": f"{1:032x}", "spanId": f"{s:016x}"} for s in links],
        }
        if parent:
            raw["parentSpanId"] = f"{parent:016x}"
        self.spans.append(raw)
        return span_id

    def document(self) -> dict[str, Any]:
        resource = {"attributes": attributes(self.resource)}
        return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": self.spans}]}]}

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.document()) + "\n", encoding="utf-8")
        return path


def simple_run(spans: Spans, offset: float = 0.0, iterations: int = 4, save_every: int = 2,
               first_iteration: int = 0, step: float = 1.0, fail_after: int | None = None) -> None:  # fmt: skip
    """pre_startup 1 s, startup 3 s (phases 1 s + model_init 1 s + dataloader 1 s), then intervals
    of ``save_every`` iterations of ``step`` s each closed by a 0.5 s save, eval 0.25 s at each save.
    The first iteration takes 3 steps. ``fail_after``: stop (no save) after that many iterations."""
    o = offset
    spans.add("pre_startup", o, o + 1)
    startup = spans.add("megatron.startup", o + 1, o + 4)
    spans.add("megatron.startup.imports", o + 1, o + 2, startup)
    spans.add("megatron.startup.model_init", o + 2, o + 3, startup)
    spans.add("megatron.startup.dataloader", o + 3, o + 4, startup)
    t = o + 4
    number = first_iteration
    done = 0
    while done < iterations:
        start = t
        interval = spans.add("megatron.train", start, start, iteration=number)  # end fixed below
        for _ in range(save_every):
            length = step * 3 if done == 0 else step
            it = spans.add("megatron.train.iteration", t, t + length, interval, iteration=number)
            if done == 0:
                spans.add("megatron.train.first_iteration", t, t + length, it, iteration=number)
            spans.add("megatron.train.iteration.forward_backward", t, t + length * 0.75, it)
            spans.add("megatron.train.iteration.optimizer", t + length * 0.75, t + length, it)
            t += length
            number += 1
            done += 1
            if fail_after is not None and done >= fail_after:
                break
        failed = fail_after is not None and done >= fail_after
        if not failed:
            spans.add("megatron.evaluate", t, t + 0.25, interval)
            t += 0.25
            save = spans.add("megatron.checkpoint.exposed_save", t, t + 0.5, interval, iteration=number)
            spans.add("megatron.checkpoint.save", t, t + 0.4, save, iteration=number)  # one save, not two
            t += 0.5
        for raw in spans.spans:
            if raw["spanId"] == f"{interval:016x}":
                raw["endTimeUnixNano"] = str(T0 + round(t * S))
                if failed:
                    raw["status"] = {"code": 2}
        if failed:
            break
