"""Parse: capture records -> a compact, checked model of one job (processes, runs, spans).

Spans are kept in flat arrays (about 60 bytes a span), not as objects: a million spans fit in
tens of megabytes, and only one exported document is held as parsed JSON at a time. Everything
the report needs later (accounting, the timeline files) reads these arrays.

A *process* is one exporting rank of one run, told apart by its resource (the run id, the rank,
host and pid). A *run* (an attempt: the first start or a restart) is the set of processes whose
time overlaps, or that share a run id (``megatron.run_id``, which every rank of a multi-rank run
exports, or SLURM's ``run_uuid``). Checked here, each failure a
:class:`~codegen.capture.CaptureError` naming the record (``codegen/capture.py``, the one reader,
refuses malformed records itself, a negative duration among them): a span without an end or start time,
resources of two jobs (``job_uuid``, ``service.name``, or the run's shape attributes differing,
more processes in a run than its ``dl.world_size``).
"""

from __future__ import annotations

import gc
import itertools
import os
import sys
from array import array
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codegen.capture import CapturedSpan, CaptureError, iter_records
from codegen.report.taxonomy import Taxonomy

RANK_KEYS = ("dl.rank", "megatron.rank", "rank", "slurm.procid")
# Resource attributes every process of one job shares (the job's shape).
SHAPE_KEYS = (
    "dl.world_size",
    "dl.tensor_parallel.size",
    "dl.pipeline_parallel.size",
    "dl.data_parallel.size",
    "megatron.num_layers",
    "megatron.hidden_size",
    "megatron.num_attention_heads",
)
THREAD_KEYS = ("thread.id",)
RUN_KEYS = ("megatron.run_id", "run_uuid")  # one value per run (attempt), shared by its ranks


def _run_id(resource: dict[str, Any]) -> str | None:
    return next((str(resource[k]) for k in RUN_KEYS if resource.get(k) is not None), None)


@dataclass
class Process:
    index: int
    key: tuple[Any, ...]
    resource: dict[str, Any]
    source: str  # where its first span was read
    rank: int | None
    start: int = sys.maxsize
    end: int = 0
    run: int = -1  # index of its run, set by ``Capture.close``

    @property
    def label(self) -> str:
        pid = self.resource.get("process.pid")
        rank = f"rank {self.rank}" if self.rank is not None else f"process {self.index}"
        return f"{rank} (pid {pid})" if pid is not None else rank


@dataclass
class Run:
    index: int
    processes: list[int]
    start: int
    end: int
    uuid: str | None = None


@dataclass
class Link:
    span: int  # index of the linking span
    trace_id: str
    span_id: int


@dataclass
class Capture:
    """One job's spans: parallel arrays indexed by span number, and the processes and runs."""

    names: list[str] = field(default_factory=list)  # name index -> name
    name_index: dict[str, int] = field(default_factory=dict)
    name: array[int] = field(default_factory=lambda: array("I"))
    process: array[int] = field(default_factory=lambda: array("I"))
    start: array[int] = field(default_factory=lambda: array("q"))
    end: array[int] = field(default_factory=lambda: array("q"))
    span_id: array[int] = field(default_factory=lambda: array("Q"))
    parent_id: array[int] = field(default_factory=lambda: array("Q"))  # 0: a root
    iteration: array[int] = field(default_factory=lambda: array("q"))  # -1: none
    thread: array[int] = field(default_factory=lambda: array("q"))  # 0: not recorded
    error: array[int] = field(default_factory=lambda: array("b"))  # 1: status ERROR
    links: list[Link] = field(default_factory=list)
    processes: list[Process] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    unknown: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (count, first source)
    metrics: int = 0
    job: dict[str, tuple[Any, str]] = field(default_factory=dict)  # job-identity key -> (value, source)

    def __len__(self) -> int:
        return len(self.name)

    def name_id(self, name: str) -> int:
        index = self.name_index.get(name)
        if index is None:
            index = self.name_index[name] = len(self.names)
            self.names.append(name)
        return index

    def spans_named(self, name: str) -> Iterator[int]:
        index = self.name_index.get(name)
        if index is None:
            return iter(())
        return (i for i, n in enumerate(self.name) if n == index)


def _span_int(value: str, what: str, source: str) -> int:
    if not value:
        return 0
    try:
        return int(value[-16:], 16)
    except ValueError:
        raise CaptureError(located(source, f"{what} {value!r} is not hexadecimal")) from None


def _rank(resource: dict[str, Any]) -> int | None:
    for key in RANK_KEYS:
        value = resource.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.isdigit():
            return int(value)
    return None


PARALLEL_BYTES = 32 * 1024 * 1024  # below this much input, worker processes cost more than they save


def read(paths: Iterable[Path], taxonomy: Taxonomy, jobs: int | None = None) -> Capture:
    """The checked capture of ``paths``. Several files (one per rank, say) are read by up to
    ``jobs`` worker processes (default: one per CPU when the input is large), each into arrays of
    its own, merged in file order; the result is the same as reading them one after the other."""
    files = [Path(p) for p in paths]
    if jobs is None:
        try:
            size = sum(p.stat().st_size for p in files)
        except OSError:
            size = 0  # the reader says which file cannot be read
        jobs = min(len(files), os.cpu_count() or 1) if size >= PARALLEL_BYTES else 1
    if jobs > 1 and len(files) > 1:
        with ProcessPoolExecutor(min(jobs, len(files))) as pool:
            parts = list(pool.map(_read_files, [[p] for p in files], [taxonomy] * len(files)))
        capture = _merge(parts)
    else:
        capture = _read_files(files, taxonomy)
    close(capture)
    return capture


def _merge(parts: list[Capture]) -> Capture:
    capture = Capture()
    by_key: dict[tuple[Any, ...], Process] = {}
    for part in parts:
        for key, (value, source) in part.job.items():
            seen = capture.job.setdefault(key, (value, source))
            if seen[0] != value:
                raise CaptureError(
                    located(
                        source,
                        f"spans of two jobs mixed: {key} is {value!r} here and {seen[0]!r} at {seen[1]}; "
                        "report one job at a time",
                    )
                )
        names = [capture.name_id(n) for n in part.names]
        processes = []
        for theirs in part.processes:
            mine = by_key.get(theirs.key)
            if mine is None:
                mine = Process(
                    len(capture.processes), theirs.key, theirs.resource, theirs.source, theirs.rank
                )
                by_key[theirs.key] = mine
                capture.processes.append(mine)
            mine.start, mine.end = min(mine.start, theirs.start), max(mine.end, theirs.end)
            processes.append(mine.index)
        offset = len(capture.name)
        capture.name.extend(array("I", [names[n] for n in part.name]))
        capture.process.extend(array("I", [processes[p] for p in part.process]))
        for field_name in ("start", "end", "span_id", "parent_id", "iteration", "thread", "error"):
            getattr(capture, field_name).extend(getattr(part, field_name))
        capture.links += [Link(offset + link.span, link.trace_id, link.span_id) for link in part.links]
        for name, (count, where) in part.unknown.items():
            before, first = capture.unknown.get(name, (0, where))
            capture.unknown[name] = (before + count, first)
        capture.metrics += part.metrics
    return capture


def _read_files(paths: list[Path], taxonomy: Taxonomy) -> Capture:
    capture = Capture()
    by_key: dict[tuple[Any, ...], Process] = {}
    key_attr = taxonomy.iteration_key
    known = taxonomy.names
    # the hot loop: local names for every array's append (a million spans take seconds)
    name_index = capture.name_index
    add_name, add_process = capture.name.append, capture.process.append
    add_start, add_end = capture.start.append, capture.end.append
    add_id, add_parent = capture.span_id.append, capture.parent_id.append
    add_iteration, add_thread, add_error = (
        capture.iteration.append,
        capture.thread.append,
        capture.error.append,
    )
    last_resource: dict[str, Any] | None = None
    process: Process | None = None
    # millions of short-lived dicts, none in a cycle: the cyclic collector only costs time here
    collecting = gc.isenabled()
    gc.disable()
    try:
        for span in iter_records(paths):
            if not isinstance(span, CapturedSpan):
                capture.metrics += 1
                _check_job(capture, span.resource, span.source)
                continue
            start, end = span.start_ns, span.end_ns
            if not start or not end:
                raise _error(span, f"span '{span.name}' has no {'end' if start else 'start'} time")
            if span.resource is not last_resource or process is None:
                last_resource = span.resource
                process = _process(capture, by_key, span)
            process.start = min(process.start, start)
            process.end = max(process.end, end)
            name = span.name
            name_id = name_index.get(name)
            if name_id is None:
                name_id = capture.name_id(name)
                if name not in known:
                    capture.unknown[name] = (0, span.source)
            if name in capture.unknown:
                count, where = capture.unknown[name]
                capture.unknown[name] = (count + 1, where)
            if span.links:
                index = len(capture.name)
                for link in span.links:
                    capture.links.append(
                        Link(index, link.trace_id, _span_int(link.span_id, "linked span id", span.source))
                    )
            add_name(name_id)
            add_process(process.index)
            add_start(start)
            add_end(end)
            try:
                add_id(int(span.span_id, 16) if span.span_id else 0)
                add_parent(int(span.parent_id, 16) if span.parent_id else 0)
            except ValueError:
                del capture.name[-1:], capture.process[-1:], capture.start[-1:], capture.end[-1:]
                _span_int(span.span_id, "span id", span.source)
                _span_int(span.parent_id or "", "parent span id", span.source)
                raise
            attributes = span.attributes
            number = attributes.get(key_attr, -1) if attributes else -1
            add_iteration(number if number.__class__ is int else -1)
            thread = attributes.get("thread.id", 0) if attributes else 0
            add_thread(thread if thread.__class__ is int else 0)
            add_error(1 if span.status == "ERROR" else 0)
    finally:
        if collecting:
            gc.enable()
    return capture


def located(source: str, message: str, severity: str = "error") -> str:
    """``path:line:1: error: record N: message`` for a record's ``source`` ("path:line: record N"),
    as the reader words its own errors."""
    where, _, record = source.partition(": ")
    return f"{where}:1: {severity}: {record}: {message}" if record else f"{where}: {severity}: {message}"


def _error(span: CapturedSpan, message: str) -> CaptureError:
    return CaptureError(located(span.source, message))


def _process(capture: Capture, by_key: dict[tuple[Any, ...], Process], span: CapturedSpan) -> Process:
    resource = span.resource
    rank = _rank(resource)
    key = (
        _run_id(resource),
        rank,
        resource.get("host.name"),
        resource.get("process.pid"),
        None
        if any(k in resource for k in ("process.pid", *RUN_KEYS))
        else span.source.partition(": ")[0].rsplit(":", 1)[0],
    )
    process = by_key.get(key)
    if process is None:
        _check_job(capture, resource, span.source)
        process = Process(len(capture.processes), key, dict(resource), span.source, rank)
        by_key[key] = process
        capture.processes.append(process)
    return process


def _check_job(capture: Capture, resource: dict[str, Any], source: str) -> None:
    for key in ("job_uuid", "service.name"):
        value = resource.get(key)
        if value is None:
            continue
        seen = capture.job.setdefault(key, (value, source))
        if seen[0] != value:
            raise CaptureError(
                located(
                    source,
                    f"spans of two jobs mixed: {key} is {value!r} here and {seen[0]!r} at {seen[1]}; "
                    "report one job at a time",
                )
            )


def close(capture: Capture) -> None:
    """Group the processes into runs and check that they belong to one job."""
    if not capture.processes:
        raise CaptureError("error: the capture holds no spans")
    order = sorted(capture.processes, key=lambda p: (p.start, p.index))
    runs: list[Run] = []
    by_uuid: dict[str, Run] = {}
    for process in order:
        uuid = _run_id(process.resource)
        run = by_uuid.get(uuid) if isinstance(uuid, str) else None
        if run is None and uuid is None and runs and runs[-1].uuid is None and process.start < runs[-1].end:
            run = runs[-1]
        if run is None:
            run = Run(len(runs), [], process.start, process.end, uuid if isinstance(uuid, str) else None)
            runs.append(run)
            if run.uuid is not None:
                by_uuid[run.uuid] = run
        run.processes.append(process.index)
        run.start, run.end = min(run.start, process.start), max(run.end, process.end)
        process.run = run.index
    runs.sort(key=lambda r: r.start)
    for index, run in enumerate(runs):
        run.index = index
        for p in run.processes:
            capture.processes[p].run = index
        _check_run(capture, run)
    for before, after in itertools.pairwise(runs):
        if after.start < before.end:
            raise CaptureError(
                located(
                    capture.processes[after.processes[0]].source,
                    f"spans of two jobs mixed: runs {before.uuid} and {after.uuid} overlap in time",
                )
            )
    capture.runs = runs


def _check_run(capture: Capture, run: Run) -> None:
    members = [capture.processes[p] for p in run.processes]
    first = members[0]
    unranked = [m for m in members if m.rank is None]
    if len(members) > 1 and unranked and run.uuid is None:
        raise CaptureError(
            located(
                unranked[-1].source if unranked[-1] is not first else members[1].source,
                "spans of two jobs mixed: processes ran at the same time with neither a rank (dl.rank) nor "
                f"a run id to tie them to one run (here and at {first.source})",
            )
        )
    for other in members[1:]:
        for key in SHAPE_KEYS:
            a, b = first.resource.get(key), other.resource.get(key)
            if a is not None and b is not None and a != b:
                raise CaptureError(
                    located(
                        other.source,
                        f"spans of two jobs mixed: processes running at the same time differ in {key} "
                        f"({b!r} here, {a!r} at {first.source})",
                    )
                )
        if first.rank is not None and first.rank == other.rank:
            raise CaptureError(
                located(
                    other.source,
                    f"spans of two jobs mixed: two processes of rank {other.rank} run at the same time "
                    f"(here and at {first.source})",
                )
            )
    world = first.resource.get("dl.world_size")
    if isinstance(world, int) and len(members) > world:
        raise CaptureError(
            located(
                members[-1].source,
                f"spans of two jobs mixed: {len(members)} processes run at the same time, but "
                f"dl.world_size is {world}",
            )
        )
