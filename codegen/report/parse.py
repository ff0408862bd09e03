"""Parse: capture records -> a compact, checked model of one job (processes, runs, spans).

The report keeps aggregates, not spans: the spans it reads one by one (those that set a
category, the training intervals, saves, loads, the first iteration: tens a run per process) in
flat arrays, and one row per process and iteration (``Steps``: its step time, the time of its
phases and of the logging after it), reduced while reading. The other spans (layers, microbatches,
communication) are counted and dropped, so peak memory grows with processes x iterations (about
80 bytes each), not with spans, and only one exported document is held as parsed JSON at a time.
The Perfetto trace reads the files again, keeping every span of a window (``Window``).

A *process* is one exporting rank of one run, told apart by its resource (the run id, the rank,
host and pid). A *run* (an attempt: the first start or a restart) is the set of processes whose
time overlaps, or that share a run id (``megatron.run_id``, which every rank of a multi-rank run
exports, or SLURM's ``run_uuid``). Checked here, each failure a
:class:`~codegen.capture.CaptureError` naming the record (``codegen/capture/``, the one reader,
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
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codegen.capture import CapturedSpan, CaptureError, iter_records
from codegen.report.taxonomy import FIRST_ITERATION, Taxonomy

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


def _absent(rows: int) -> array[int]:
    return array("q", [-1]) * rows


@dataclass
class Steps:
    """One row per iteration span: its process, number, start, step time, span id, status, and
    the time of its phase spans (children, or children of its first-iteration span) by name.
    ``logging``: the spans after the step (process, start, duration), given to an iteration when
    the capture is closed; ``orphans``: phase spans whose parent was not read before them
    (process, parent id, phase, duration), resolved then too."""

    process: array[int] = field(default_factory=lambda: array("I"))
    number: array[int] = field(default_factory=lambda: array("q"))
    start: array[int] = field(default_factory=lambda: array("q"))
    duration: array[int] = field(default_factory=lambda: array("q"))
    span_id: array[int] = field(default_factory=lambda: array("Q"))
    error: array[int] = field(default_factory=lambda: array("b"))
    phases: dict[str, array[int]] = field(default_factory=dict)  # phase name -> ns per row (-1: none)
    log_process: array[int] = field(default_factory=lambda: array("I"))
    log_start: array[int] = field(default_factory=lambda: array("q"))
    log_duration: array[int] = field(default_factory=lambda: array("q"))
    orphans: list[tuple[int, int, str, int]] = field(default_factory=list)
    aliases: list[tuple[int, int, int]] = field(
        default_factory=list
    )  # first-iteration spans: (process, id, parent)

    def __len__(self) -> int:
        return len(self.number)

    def add(self, process: int, number: int, start: int, duration: int, span_id: int, error: bool) -> int:
        row = len(self.number)
        self.process.append(process)
        self.number.append(number)
        self.start.append(start)
        self.duration.append(duration)
        self.span_id.append(span_id)
        self.error.append(1 if error else 0)
        for column in self.phases.values():
            column.append(-1)
        return row

    def add_phase(self, row: int, name: str, ns: int) -> None:
        column = self.phases.get(name)
        if column is None:
            column = self.phases[name] = _absent(len(self.number))
        column[row] = max(column[row], 0) + ns

    def extend(self, other: Steps, processes: list[int]) -> None:
        offset = len(self.number)
        rows = len(other.number)
        self.process.extend(array("I", [processes[p] for p in other.process]))
        for name in ("number", "start", "duration", "span_id", "error"):
            getattr(self, name).extend(getattr(other, name))
        for name in set(self.phases) | set(other.phases):
            mine = self.phases.setdefault(name, _absent(offset))
            mine.extend(other.phases.get(name, _absent(rows)))
        self.log_process.extend(array("I", [processes[p] for p in other.log_process]))
        self.log_start.extend(other.log_start)
        self.log_duration.extend(other.log_duration)
        self.orphans += [(processes[p], parent, name, ns) for p, parent, name, ns in other.orphans]
        self.aliases += [(processes[p], span, parent) for p, span, parent in other.aliases]

    def resolve(self) -> None:
        """Give each orphan phase span to the row of its parent iteration span (directly or
        through a first-iteration span); those without one count nowhere, as before."""
        if not self.orphans:
            return
        alias = {(p, span): parent for p, span, parent in self.aliases}
        wanted: dict[tuple[int, int], list[tuple[str, int]]] = {}
        for p, parent, name, ns in self.orphans:
            parent = alias.get((p, parent), parent)
            wanted.setdefault((p, parent), []).append((name, ns))
        for row, (p, span) in enumerate(zip(self.process, self.span_id)):
            for name, ns in wanted.pop((p, span), ()):
                self.add_phase(row, name, ns)
        self.orphans = []


@dataclass
class Capture:
    """One job's spans that the accounting reads one by one, as parallel arrays indexed by span
    number, its iterations (``steps``), and the processes and runs. ``total``: every span read."""

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
    steps: Steps = field(default_factory=Steps)
    total: int = 0  # spans read (kept or reduced)

    def __len__(self) -> int:
        return len(self.name)

    def name_id(self, name: str) -> int:
        index = self.name_index.get(name)
        if index is None:
            index = self.name_index[name] = len(self.names)
            self.names.append(name)
        return index


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

# what the reader does with a span of a name (``_kinds``)
MARK, ITERATION, PHASE, LOGGING, FIRST = 1, 2, 4, 8, 16


def _kinds(taxonomy: Taxonomy) -> dict[str, int]:
    """Per span name: MARK (kept: it sets a category, or is an interval, startup, save or load
    span), and how an iteration's row takes it (ITERATION, PHASE, LOGGING; FIRST: the
    first-iteration span, whose phase children count in its parent's row)."""
    kinds: dict[str, int] = {}
    for name in taxonomy.category:
        kinds[name] = MARK
    for name in (taxonomy.interval, taxonomy.startup, *taxonomy.save, *taxonomy.load):
        kinds[name] = kinds.get(name, 0) | MARK
    for name in taxonomy.names_in(FIRST_ITERATION):
        kinds[name] = kinds.get(name, 0) | MARK | FIRST
    kinds[taxonomy.iteration] = kinds.get(taxonomy.iteration, 0) | ITERATION
    for name in taxonomy.step_phases:
        kinds[name] = kinds.get(name, 0) | PHASE
    for name in taxonomy.logging:
        kinds[name] = kinds.get(name, 0) | LOGGING
    return kinds


@dataclass(frozen=True)
class Window:
    """The spans a second read keeps (for the Perfetto trace): those of the processes named (by
    their key, as the first read found them) overlapping that process's time range."""

    ranges: dict[tuple[Any, ...], tuple[int, int]]


def read(paths: Iterable[Path], taxonomy: Taxonomy, jobs: int | None = None,
         window: Window | None = None) -> Capture:  # fmt: skip
    """The checked capture of ``paths``. Several files (one per rank, say) are read by up to
    ``jobs`` worker processes (default: one per CPU when the input is large), each into arrays of
    its own, merged in file order; the result is the same as reading them one after the other.
    With ``window``, every span in it is kept (and no iteration rows are made)."""
    files = [Path(p) for p in paths]
    if jobs is None:
        try:
            size = sum(p.stat().st_size for p in files)
        except OSError:
            size = 0  # the reader says which file cannot be read
        jobs = min(len(files), os.cpu_count() or 1) if size >= PARALLEL_BYTES else 1
    if jobs > 1 and len(files) > 1:
        with ProcessPoolExecutor(min(jobs, len(files))) as pool:
            count = len(files)
            parts = list(pool.map(_read_files, [[p] for p in files], [taxonomy] * count, [window] * count))
        capture = _merge(parts)
    else:
        capture = _read_files(files, taxonomy, window)
    close(capture, files)
    return capture


def _merge(parts: list[Capture]) -> Capture:
    capture = Capture()
    by_key: dict[tuple[Any, ...], Process] = {}
    for part in parts:
        for key, (value, source) in part.job.items():
            _same_job(capture, key, value, source)
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
        capture.steps.extend(part.steps, processes)
        for name, (count, where) in part.unknown.items():
            before, first = capture.unknown.get(name, (0, where))
            capture.unknown[name] = (before + count, first)
        capture.metrics += part.metrics
        capture.total += part.total
    return capture


def _read_files(paths: list[Path], taxonomy: Taxonomy, window: Window | None = None) -> Capture:
    capture = Capture()
    by_key: dict[tuple[Any, ...], Process] = {}
    key_attr = taxonomy.iteration_key
    known = taxonomy.names
    kind_of = _kinds(taxonomy) if window is None else {}
    steps = capture.steps
    pending: dict[tuple[int, int], dict[str, int]] = {}  # (process, parent id) -> phase -> ns
    recent: dict[tuple[int, int], int] = {}  # (process, span id) -> row: the last RECENT iterations read
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
    lo, hi = 0, -1  # the window's range for the current process
    total = 0
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
                if window is not None:
                    lo, hi = window.ranges.get(process.key, (0, -1))
            total += 1
            process.start = min(process.start, start)
            process.end = max(process.end, end)
            name = span.name
            if name not in known:
                count, where = capture.unknown.get(name, (0, span.source))
                capture.unknown[name] = (count + 1, where)
            if window is None:
                kind = kind_of.get(name, 0)
                if not kind:
                    continue
                if kind & ~(MARK | FIRST):
                    _reduce(span, kind, process.index, key_attr, steps, pending, recent)
                    if not kind & MARK:
                        continue
            elif end < lo or start > hi:
                continue
            elif span.links:
                index = len(capture.name)
                for link in span.links:
                    capture.links.append(
                        Link(index, link.trace_id, _span_int(link.span_id, "linked span id", span.source))
                    )
            name_id = name_index.get(name)
            if name_id is None:
                name_id = capture.name_id(name)
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
            if window is None and kind & FIRST:  # its phase children count in its parent's row
                steps.aliases.append((process.index, capture.span_id[-1], capture.parent_id[-1]))
                row = recent.get((process.index, capture.parent_id[-1]))
                if row is not None:  # read after its iteration: its phases go to that row
                    _remember(recent, (process.index, capture.span_id[-1]), row)
                moved = pending.pop((process.index, capture.span_id[-1]), None)
                if moved:
                    into = pending.setdefault((process.index, capture.parent_id[-1]), {})
                    for phase, ns in moved.items():
                        into[phase] = into.get(phase, 0) + ns
    finally:
        if collecting:
            gc.enable()
    capture.total = total
    steps.orphans += [
        (p, parent, phase, ns) for (p, parent), found in pending.items() for phase, ns in found.items()
    ]
    return capture


def _reduce(span: CapturedSpan, kind: int, process: int, key_attr: str, steps: Steps,
            pending: dict[tuple[int, int], dict[str, int]], recent: dict[tuple[int, int], int]) -> None:  # fmt: skip
    """Fold an iteration, phase or logging span into the iterations' rows: a phase span read
    after its iteration (or first-iteration) span goes to its row at once, one read before it
    waits in ``pending`` for it (exporters write a span when it ends: children first)."""
    duration = span.end_ns - span.start_ns
    if kind & ITERATION:
        span_id = _span_int(span.span_id, "span id", span.source) if span.span_id else 0
        attributes = span.attributes
        number = attributes.get(key_attr, -1) if attributes else -1
        row = steps.add(
            process,
            number if number.__class__ is int else -1,
            span.start_ns,
            duration,
            span_id,
            span.status == "ERROR",
        )
        found = pending.pop((process, span_id), None)
        if found:
            for phase, ns in found.items():
                steps.add_phase(row, phase, ns)
        _remember(recent, (process, span_id), row)
    if kind & PHASE and span.parent_id:
        parent = _span_int(span.parent_id, "parent span id", span.source)
        owner = recent.get((process, parent))
        if owner is not None:
            steps.add_phase(owner, span.name, duration)
        else:
            into = pending.setdefault((process, parent), {})
            into[span.name] = into.get(span.name, 0) + duration
    if kind & LOGGING:
        steps.log_process.append(process)
        steps.log_start.append(span.start_ns)
        steps.log_duration.append(duration)


RECENT = 4096  # iteration spans remembered for phase spans read after them


def _remember(recent: dict[tuple[int, int], int], key: tuple[int, int], row: int) -> None:
    recent[key] = row
    if len(recent) > RECENT:
        del recent[next(iter(recent))]  # the oldest (dicts keep insertion order)


def located(source: str, message: str, severity: str = "error") -> str:
    """``path:line:1: error: record N: message`` for a record's ``source`` ("path:line: record N"),
    as the reader words its own errors."""
    where, _, record = source.partition(": ")
    return f"{where}:1: {severity}: {record}: {message}" if record else f"{where}: {severity}: {message}"


def _error(span: CapturedSpan, message: str) -> CaptureError:
    return CaptureError(located(span.source, message))


def process_key(resource: dict[str, Any], file: str) -> tuple[Any, ...]:
    """One process of a run, from its resource: run, rank, host, pid; the file it was read from
    where the resource names neither a pid nor a run (files and the store key processes alike)."""
    return (
        _run_id(resource),
        _rank(resource),
        resource.get("host.name"),
        resource.get("process.pid"),
        None if any(k in resource for k in ("process.pid", *RUN_KEYS)) else file,
    )


def _process(capture: Capture, by_key: dict[tuple[Any, ...], Process], span: CapturedSpan) -> Process:
    resource = span.resource
    key = process_key(resource, span.source.partition(": ")[0].rsplit(":", 1)[0])
    process = by_key.get(key)
    if process is None:
        _check_job(capture, resource, span.source)
        process = Process(len(capture.processes), key, dict(resource), span.source, key[1])
        by_key[key] = process
        capture.processes.append(process)
    return process


def _check_job(capture: Capture, resource: dict[str, Any], source: str) -> None:
    for key in ("job_uuid", "service.name"):
        value = resource.get(key)
        if value is not None:
            _same_job(capture, key, value, source)


def _same_job(capture: Capture, key: str, value: Any, source: str) -> None:
    seen = capture.job.setdefault(key, (value, source))
    if seen[0] != value:
        raise _mixed(
            source, f"{key} is {value!r} here and {seen[0]!r} at {seen[1]}; report one job at a time"
        )


def _mixed(source: str, what: str) -> CaptureError:
    return CaptureError(located(source, f"spans of two jobs mixed: {what}"))


def close(capture: Capture, files: Sequence[Path] = ()) -> None:
    """Group the processes into runs and check that they belong to one job (read from ``files``,
    which an error names)."""
    if not capture.processes:
        if len(files) == 1:
            raise CaptureError(f"{files[0]}: error: the capture holds no spans")
        named = f": {', '.join(map(str, files))}" if files else ""
        raise CaptureError(f"error: the captures hold no spans{named}")
    capture.steps.resolve()
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
            source = capture.processes[after.processes[0]].source
            raise _mixed(source, f"runs {before.uuid} and {after.uuid} overlap in time")
    capture.runs = runs
    _renumber(capture)


def _renumber(capture: Capture) -> None:
    """Number the processes by run, rank and start, whatever order they were read in (from files
    or from a store), so that every source gives the same report."""
    order = sorted(
        capture.processes,
        key=lambda p: (p.run, p.rank if p.rank is not None else sys.maxsize, p.start, repr(p.key)),
    )
    new = [0] * len(order)
    for index, process in enumerate(order):
        new[process.index] = index
        process.index = index
    capture.processes = order
    for run in capture.runs:
        run.processes = sorted(new[p] for p in run.processes)
    steps = capture.steps
    for column in (capture.process, steps.process, steps.log_process):
        for i, p in enumerate(column):
            column[i] = new[p]


def _check_run(capture: Capture, run: Run) -> None:
    members = [capture.processes[p] for p in run.processes]
    first = members[0]
    unranked = [m for m in members if m.rank is None]
    if len(members) > 1 and unranked and run.uuid is None:
        raise _mixed(
            unranked[-1].source if unranked[-1] is not first else members[1].source,
            "processes ran at the same time with neither a rank (dl.rank) nor "
            f"a run id to tie them to one run (here and at {first.source})",
        )
    for other in members[1:]:
        for key in SHAPE_KEYS:
            a, b = first.resource.get(key), other.resource.get(key)
            if a is not None and b is not None and a != b:
                raise _mixed(
                    other.source,
                    f"processes running at the same time differ in {key} ({b!r} here, {a!r} at {first.source})",
                )
        if first.rank is not None and first.rank == other.rank:
            raise _mixed(
                other.source,
                f"two processes of rank {other.rank} run at the same time (here and at {first.source})",
            )
    world = first.resource.get("dl.world_size")
    if isinstance(world, int) and len(members) > world:
        raise _mixed(
            members[-1].source,
            f"{len(members)} processes run at the same time, but dl.world_size is {world}",
        )
