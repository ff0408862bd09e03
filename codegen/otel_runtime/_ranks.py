"""Many ranks, one trace: which ranks export, where each rank sits, the shared trace ids, and the
pipeline links.

- **Export ranks** (``MEGATRON_OTEL_EXPORT_RANKS`` / ``--otel-export-ranks``, parsed by
  ``_rankspec``): ``last`` (the default), ``all``, a list of ranks (``0,4,8-11``), ``every:N``
  (ranks 0, N, 2N, ...) or
  ``one-per:DIMS`` (the first rank of each group along the ``+``-joined dimensions ``tp``, ``pp``,
  ``dp``, ``cp``: ``one-per:pp`` is one rank per pipeline stage, ``one-per:dp`` one per
  data-parallel replica). The older ``MEGATRON_OTEL_EXPORT_RANK`` (one rank, -1 the last) still
  works when the new setting is not given.
- **Coordinates**: the rank, local rank, host and the rank's index in every parallel dimension,
  from Megatron's ``parallel_state`` once it is initialized (else from the rank order
  ``tp-cp-ep-dp-pp`` and the sizes in ``args``): resource attributes.
- **Shared trace ids**: every rank derives the startup trace's id and interval *k*'s trace id from
  one run id (16 bytes) agreed once in ``configure()`` (rank 0's broadcast over
  ``torch.distributed``) and *k*: no per-step communication. Each rank's startup and interval
  spans are roots of their own (per-rank roots) in the shared trace.
- **Pipeline links**: the *k*-th ``send_forward`` of stage *s* and the *k*-th ``recv_forward`` of
  stage *s* + 1 are the same transfer (and likewise backwards): the send span's id is derived
  from (run id, sending rank, direction, *k*), so the receive span links to it with no
  communication. Both carry ``megatron.p2p.*`` attributes saying which transfer they are.

Nothing here raises into training: a failure degrades to random ids and no links (logged once).
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import _ids
from ._lean_tracer import LeanTracer
from ._state import log_once

# Coordinate resource attribute -> (dimension, parallel_state getter of the rank in it).
COORDINATES: dict[str, tuple[str, str]] = {
    "dl.tensor_parallel.rank": ("tp", "get_tensor_model_parallel_rank"),
    "dl.pipeline_parallel.rank": ("pp", "get_pipeline_model_parallel_rank"),
    "dl.data_parallel.rank": ("dp", "get_data_parallel_rank"),
    "dl.context_parallel.rank": ("cp", "get_context_parallel_rank"),
    "dl.expert_parallel.rank": ("ep", "get_expert_model_parallel_rank"),
}
# Megatron's default rank order of the dense layers, fastest-varying first; the args of each size.
_ORDER = ("tp", "cp", "dp", "pp")
_SIZE_ARGS = {
    "tp": "tensor_model_parallel_size",
    "pp": "pipeline_model_parallel_size",
    "cp": "context_parallel_size",
    "ep": "expert_model_parallel_size",
}
# The p2p spans: name -> (sends: direction or "", receives: direction or "").
P2P: dict[str, tuple[str, str]] = {
    "megatron.p2p.send_forward": ("forward", ""),
    "megatron.p2p.send_backward": ("backward", ""),
    "megatron.p2p.recv_forward": ("", "forward"),
    "megatron.p2p.recv_backward": ("", "backward"),
}


# -- coordinates -----------------------------------------------------------------------------


def coordinates(rank: int, world: int, args: Any = None) -> dict[str, int]:
    """This rank's index in each parallel dimension: ``{"tp": .., "pp": .., ...}``. From Megatron's
    ``parallel_state`` when it is initialized, else from the default rank order and the sizes in
    ``args`` (every index 0 without them). Never raises."""
    state = sys.modules.get("megatron.core.parallel_state")
    try:
        if state is not None and state.model_parallel_is_initialized():
            out = {dim: int(getattr(state, getter)()) for dim, getter in COORDINATES.values()}
            return out
    except Exception:
        log_once(
            "coordinates", "reading parallel_state failed; using the rank order", exc_info=True
        )
    return coordinates_in_order(rank, world, {d: _size(args, n) for d, n in _SIZE_ARGS.items()})


def coordinates_in_order(rank: int, world: int, sizes: Mapping[str, Any]) -> dict[str, int]:
    """``rank``'s coordinates in Megatron's default order (``tp-cp-dp-pp`` for the dense layers,
    ``tp-ep-dp-pp`` for the experts, the expert tensor-parallel size taken as tp) given the sizes
    of tp, pp, cp and ep; the data-parallel size is what the world leaves."""
    known = {d: v if isinstance(v, int) and v > 0 else 1 for d, v in sizes.items()}
    size = {d: known.get(d, 1) for d in ("tp", "pp", "cp", "ep")}
    size["dp"] = max(1, world // max(1, size["tp"] * size["pp"] * size["cp"]))
    out, rest = {}, rank
    for dim in _ORDER:
        out[dim], rest = rest % size[dim], rest // size[dim]
    out["ep"] = (rank // size["tp"]) % size["ep"]
    return out


def coordinate_attributes(rank: int, coords: Mapping[str, int], args: Any = None) -> dict[str, Any]:
    """Resource attributes saying where this rank runs."""
    attributes: dict[str, Any] = {"dl.rank": rank}
    try:
        attributes["host.name"] = socket.gethostname()
    except OSError:
        pass
    for key, (dim, _) in COORDINATES.items():
        if dim in coords:
            attributes[key] = coords[dim]
    vpp = getattr(args, "virtual_pipeline_model_parallel_size", None) if args is not None else None
    if isinstance(vpp, int):
        attributes["dl.virtual_pipeline_parallel.size"] = vpp
    ep = _size(args, "expert_model_parallel_size") if args is not None else None
    if ep is not None:
        attributes["dl.expert_parallel.size"] = ep
    return attributes


def _size(args: Any, name: str) -> int:
    value = getattr(args, name, None) if args is not None else None
    return value if isinstance(value, int) and value > 0 else 1


# -- the run id and the shared trace ids -----------------------------------------------------


def agree_run_id(world: int) -> bytes:
    """16 bytes every rank of this run holds alike: rank 0's random bytes, broadcast once over
    ``torch.distributed`` when it is initialized with more than one rank; this process's own
    otherwise. Every rank calls it (configure() on every rank). Never raises."""
    mine = os.urandom(16)
    dist = sys.modules.get("torch.distributed")
    if world <= 1 or dist is None:
        return mine
    try:
        if not (dist.is_available() and dist.is_initialized()):
            log_once("run-id", "torch.distributed is not initialized: each rank has its own traces")
            return mine
        box: list[Any] = [mine.hex()]
        dist.broadcast_object_list(box, src=0)
        return bytes.fromhex(str(box[0]))
    except Exception:
        log_once(
            "run-id", "agreeing on a run id failed: each rank has its own traces", exc_info=True
        )
        return mine


def derived_id(run_id: bytes, *parts: object, size: int = 16) -> int:
    """A non-zero id of ``size`` bytes derived from the run id and ``parts``."""
    text = "/".join(str(p) for p in parts).encode()
    digest = hashlib.blake2b(text, digest_size=size, key=run_id).digest()
    return int.from_bytes(digest, "big") or 1


def startup_trace_id(run_id: bytes) -> int:
    """The startup trace's id (every rank's ``megatron.startup``)."""
    return derived_id(run_id, "startup")


def interval_trace_id(run_id: bytes, index: int) -> int:
    """Training interval ``index``'s trace id (every rank's ``megatron.train`` of it)."""
    return derived_id(run_id, "interval", index)


def p2p_span_id(run_id: bytes, sender: int, direction: str, seq: int) -> int:
    """The span id of rank ``sender``'s ``seq``-th send in ``direction``."""
    return derived_id(run_id, "p2p", sender, direction, seq, size=8)


class ChosenIds:
    """An SDK ``IdGenerator`` for the runtime's tracer (the SDK tracer and the ``LeanTracer``): ids
    from the per-process generator of ``_ids`` (seeded from ``os.urandom``: unique across ranks,
    whatever Megatron's ``--seed`` did to ``random``), except the trace or span id chosen for the
    next span started on this thread (``choose``)."""

    def __init__(self) -> None:
        self.local = threading.local()
        # Ever chosen on any thread: until then no thread-local is read (most spans choose nothing).
        self.chosen = False

    def choose(self, trace_id: int | None = None, span_id: int | None = None) -> None:
        """The ids of the next span this thread starts (None: random); ``choose()`` clears."""
        if trace_id is not None or span_id is not None:
            self.chosen = True
        elif not self.chosen:
            return
        self.local.trace_id, self.local.span_id = trace_id, span_id

    def generate_span_id(self) -> int:
        """The chosen span id, once; else 8 random bytes."""
        if not self.chosen:
            return _ids.span_id()
        chosen = getattr(self.local, "span_id", None)
        if chosen is not None:
            self.local.span_id = None
            return int(chosen)
        return _ids.span_id()

    def is_trace_id_random(self) -> bool:
        """The W3C random flag: derived ids are a keyed hash of a random run id."""
        return True

    def generate_trace_id(self) -> int:
        """The chosen trace id, once; else 16 random bytes."""
        if not self.chosen:
            return _ids.trace_id()
        chosen = getattr(self.local, "trace_id", None)
        if chosen is not None:
            self.local.trace_id = None
            return int(chosen)
        return _ids.trace_id()


def install_ids(tracer: Any) -> ChosenIds | None:
    """Give ``tracer`` (an SDK tracer: it has ``id_generator``; or a ``LeanTracer``, and the SDK
    tracer behind it) a ``ChosenIds``; None when it is neither (then trace ids stay the
    provider's and no span id is derived)."""
    lean = tracer if isinstance(tracer, LeanTracer) else None
    sdk = lean.sdk_tracer if lean is not None else tracer
    if sdk is None or not hasattr(sdk, "id_generator"):
        return None
    ids = ChosenIds()
    try:
        sdk.id_generator = ids
    except Exception:
        return None
    if lean is not None:
        lean.choose_ids(ids)
    return ids


def start_root(tracer: Any, ids: ChosenIds | None, trace_id: int, name: str, **kwargs: Any) -> Any:
    """``tracer.start_span(name, **kwargs)`` for a root span, in trace ``trace_id`` when the
    tracer takes chosen ids (and ``trace_id`` is set)."""
    if ids is None or not trace_id:
        return tracer.start_span(name, **kwargs)
    ids.choose(trace_id=trace_id)
    try:
        return tracer.start_span(name, **kwargs)
    finally:
        ids.choose()


def start_shared(tracer: Any, run: Any, name: str, values: Mapping[str, Any]) -> Any:
    """``tracer.start_span(name)`` with ``run.ids`` installed: a root span joins the trace of the
    lifecycle phase (``run.trace_id``); a pipeline send gets its derived span id, a receive a link
    to its send (``run.pipeline``)."""
    ids: ChosenIds = run.ids
    links = None
    span_id = None
    pipeline: Pipeline | None = run.pipeline
    if pipeline is not None and name in P2P:
        sender, extra, link = pipeline.transfer(name)
        values = {**values, **extra}
        direction, seq = extra["megatron.p2p.direction"], extra["megatron.p2p.seq"]
        if sender is not None:
            span_id = p2p_span_id(run.run_id, sender, direction, seq)
        if link is not None:
            links = _link(run, p2p_span_id(run.run_id, link[0], direction, link[1]), extra)
    ids.choose(trace_id=run.trace_id or None, span_id=span_id)
    try:
        return tracer.start_span(name, attributes=values, links=links)
    finally:
        ids.choose()


def _link(run: Any, span_id: int, attributes: Mapping[str, Any]) -> list[Any]:
    from opentelemetry import trace

    current = trace.get_current_span().get_span_context()
    trace_id = current.trace_id if current.is_valid else run.trace_id
    if not trace_id:
        return []
    target = trace.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)
    )
    return [trace.Link(target, dict(attributes))]


# -- pipeline links --------------------------------------------------------------------------


@dataclass
class Pipeline:
    """One rank's view of its pipeline neighbours and the transfers it has seen in this run."""

    rank: int
    next_rank: int | None  # the stage after this one (None: last stage, or no pipeline)
    prev_rank: int | None  # the stage before this one (None: first stage)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (send|recv, dir) -> k

    def transfer(self, name: str) -> tuple[int | None, dict[str, Any], tuple[int, int] | None]:
        """For p2p span ``name``: the span id to give it (a send), its attributes, and the
        (sending rank, sequence number) of the send a receive links to."""
        sends, receives = P2P[name]
        role, direction = ("send", sends) if sends else ("recv", receives)
        seq = self.counts.get((role, direction), 0)
        self.counts[role, direction] = seq + 1
        if role == "send":
            peer = self.next_rank if direction == "forward" else self.prev_rank
        else:
            peer = self.prev_rank if direction == "forward" else self.next_rank
        attributes: dict[str, Any] = {"megatron.p2p.direction": direction, "megatron.p2p.seq": seq}
        if peer is None:  # the first stage's recv_forward, the last stage's send_forward, ...
            return None, attributes, None
        attributes["megatron.p2p.peer_rank"] = peer
        if role == "send":
            return self.rank, attributes, None
        return None, attributes, (peer, seq)


def pipeline(rank: int, args: Any = None) -> Pipeline | None:
    """This rank's pipeline neighbours from ``parallel_state``; None without pipeline parallelism
    or with an interleaved schedule (virtual stages: its transfers are not paired by order)."""
    if args is not None and isinstance(
        getattr(args, "virtual_pipeline_model_parallel_size", None), int
    ):
        log_once("p2p-vpp", "pipeline links are not made with virtual pipeline stages")
        return None
    state = sys.modules.get("megatron.core.parallel_state")
    try:
        if state is None or not state.model_parallel_is_initialized():
            return None
        size = int(state.get_pipeline_model_parallel_world_size())
        if size <= 1:
            return None
        stage = int(state.get_pipeline_model_parallel_rank())
        dist = sys.modules["torch.distributed"]
        ranks = list(dist.get_process_group_ranks(state.get_pipeline_model_parallel_group()))
        return Pipeline(
            rank=rank,
            next_rank=ranks[stage + 1] if stage + 1 < size else None,
            prev_rank=ranks[stage - 1] if stage > 0 else None,
        )
    except Exception:
        log_once("p2p", "reading the pipeline neighbours failed: no pipeline links", exc_info=True)
        return None
