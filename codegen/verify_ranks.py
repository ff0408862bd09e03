"""``codegen verify`` over the captures of many ranks (several files, or one collector file).

A capture whose spans come from more than one rank (the resource attribute ``dl.rank``) is
checked per rank with ``verify.verify`` (each finding prefixed ``rank N:``), and across ranks:

- every span's resource says where it ran (``dl.rank``, ``host.name`` and the parallel
  coordinates of the registry, with the registry's types), the same on every span of a rank;
- one trace id per run and interval across ranks: every rank's ``megatron.startup`` of a run
  (resource ``megatron.run_id``) is in one trace, and every rank's ``megatron.train`` of interval
  *k* (``megatron.trace_interval``) in one trace, a different one per interval;
- span ids are unique across the whole capture;
- every pipeline link (a link carrying ``megatron.p2p.peer_rank``) resolves to a span of the peer
  rank in the capture, a send in the same direction; a link to a rank that exported nothing is
  not a finding (that rank did not export), unless the run's export setting says it should have;
- every exporting rank is present: the ranks the run's export setting (resource
  ``megatron.export_ranks``) selects in its world (``dl.world_size``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from codegen.capture import CapturedMetric, CapturedSpan
from codegen.resolve.sites import Plan
from codegen.spec.model import Project
from codegen.spec.semconv import attribute_types
from codegen.verify import Report, value_has_type, verify

RANK = "dl.rank"
RUN_ID = "megatron.run_id"
EXPORT_RANKS = "megatron.export_ranks"
WORLD = "dl.world_size"
PEER = "megatron.p2p.peer_rank"
DIRECTION = "megatron.p2p.direction"
# Where a rank runs: present on every exporting rank's resource (the coordinates once Megatron's
# parallel state is initialized, which it is before configure() in pretrain()).
WHERE = (
    RANK,
    "host.name",
    "dl.tensor_parallel.rank",
    "dl.pipeline_parallel.rank",
    "dl.data_parallel.rank",
    "dl.context_parallel.rank",
    "dl.expert_parallel.rank",
)
SIZE_OF = {
    "tp": "dl.tensor_parallel.size",
    "pp": "dl.pipeline_parallel.size",
    "cp": "dl.context_parallel.size",
    "ep": "dl.expert_parallel.size",
}


def ranks_of(spans: Sequence[CapturedSpan]) -> set[int]:
    """The ranks (resource ``dl.rank``) the spans come from."""
    return {r for r in (s.resource.get(RANK) for s in spans) if isinstance(r, int)}


def is_multi_rank(spans: Sequence[CapturedSpan]) -> bool:
    return len(ranks_of(spans)) > 1


def verify_ranks(
    project: Project,
    plan: Plan,
    spans: Sequence[CapturedSpan],
    groups: frozenset[str] | None,
    metrics: Sequence[CapturedMetric] = (),
) -> Report:
    """The per-rank checks of ``verify`` and the cross-rank ones (module docstring)."""
    report = Report(spans=len(spans))
    by_rank: dict[int, list[CapturedSpan]] = defaultdict(list)
    for span in spans:
        rank = span.resource.get(RANK)
        if not isinstance(rank, int):
            report.findings.append(f"{_where(span)}: span '{span.name}' has no resource {RANK}")
            continue
        by_rank[rank].append(span)
    for rank, own in sorted(by_rank.items()):
        sub = verify(project, plan, own, groups, metrics if rank == min(by_rank) else ())
        report.names.update(sub.names)
        report.metrics.update(sub.metrics)
        report.findings.extend(f"rank {rank}: {finding}" for finding in sub.findings)
        report.findings.extend(_where_checks(project, rank, own))
    report.findings.extend(_trace_checks(spans))
    report.findings.extend(_unique_ids(spans))
    report.findings.extend(_link_checks(spans, set(by_rank)))
    report.findings.extend(_present(spans, set(by_rank)))
    if not spans:
        report.findings.append("the capture holds no spans")
    return report


def _where(span: CapturedSpan) -> str:
    return str(getattr(span, "source", "") or span.name)


def _where_checks(project: Project, rank: int, spans: Sequence[CapturedSpan]) -> list[str]:
    types = attribute_types(project)
    findings: list[str] = []
    first = spans[0].resource
    missing = [key for key in WHERE if key not in first]
    if missing:
        findings.append(f"rank {rank}: the resource lacks {', '.join(missing)}")
    for key in WHERE:
        declared = types.get(key)
        if key in first and declared is not None and not value_has_type(first[key], declared):
            findings.append(
                f"rank {rank}: resource attribute '{key}' is {first[key]!r}; the registry says {declared}"
            )
    for span in spans[1:]:
        changed = sorted(k for k in WHERE if span.resource.get(k) != first.get(k))
        if changed:
            findings.append(
                f"rank {rank}: {_where(span)}: span '{span.name}' has another {', '.join(changed)} "
                "than the rank's other spans"
            )
            break
    return findings


def _trace_checks(spans: Sequence[CapturedSpan]) -> list[str]:
    """One trace per run's startup and per run's interval, across ranks."""
    traces: dict[tuple[str, str, Any], dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for span in spans:
        run = str(span.resource.get(RUN_ID, ""))
        if span.name == "megatron.startup":
            key: tuple[str, str, Any] = (run, "startup", None)
        elif span.name == "megatron.train":
            key = (run, "interval", span.attributes.get("megatron.trace_interval"))
        else:
            continue
        traces[key][span.trace_id].add(span.resource.get(RANK, -1))
    findings = []
    owner: dict[str, tuple[str, str, Any]] = {}
    for key, ids in sorted(traces.items(), key=lambda item: str(item[0])):
        run, what, index = key
        label = "the startup" if what == "startup" else f"interval {index}"
        if not run:
            findings.append(f"{label}: the resource lacks {RUN_ID}")
        if len(ids) > 1:
            split = "; ".join(f"{t} on ranks {sorted(r)}" for t, r in sorted(ids.items()))
            findings.append(f"run {run or '?'}: {label} is in {len(ids)} traces, not one: {split}")
        for trace_id in ids:
            if trace_id in owner and owner[trace_id] != key:
                findings.append(f"trace {trace_id} holds both {owner[trace_id]} and {key}")
            owner.setdefault(trace_id, key)
    return findings


def _unique_ids(spans: Sequence[CapturedSpan]) -> list[str]:
    seen: dict[str, CapturedSpan] = {}
    findings = []
    for span in spans:
        other = seen.setdefault(span.span_id, span)
        if other is not span:
            findings.append(
                f"span id {span.span_id} is used twice: '{other.name}' (rank "
                f"{other.resource.get(RANK)}) and '{span.name}' (rank {span.resource.get(RANK)})"
            )
    return findings


def _link_checks(spans: Sequence[CapturedSpan], present: set[int]) -> list[str]:
    by_id = {(s.trace_id, s.span_id): s for s in spans}
    findings = []
    for span in spans:
        if (
            span.name.startswith("megatron.p2p.recv")
            and PEER in span.attributes
            and not any(PEER in link.attributes for link in span.links)
        ):
            findings.append(
                f"rank {span.resource.get(RANK)}: {_where(span)}: '{span.name}' (seq "
                f"{span.attributes.get('megatron.p2p.seq')}) receives from rank "
                f"{span.attributes[PEER]} but has no link to the send"
            )
        for link in span.links:
            peer = link.attributes.get(PEER)
            if peer is None:
                continue
            target = by_id.get((link.trace_id, link.span_id))
            rank = span.resource.get(RANK)
            what = (
                f"rank {rank}: {_where(span)}: '{span.name}' (seq {span.attributes.get('megatron.p2p.seq')})"
            )
            if target is None:
                if peer in present:
                    findings.append(f"{what} links to span {link.span_id} of rank {peer}, not in the capture")
                continue
            if target.resource.get(RANK) != peer:
                findings.append(f"{what} links to a span of rank {target.resource.get(RANK)}, not {peer}")
            direction = link.attributes.get(DIRECTION)
            if not target.name.startswith("megatron.p2p.send") or (
                target.attributes.get(DIRECTION) != direction
            ):
                findings.append(
                    f"{what} links to '{target.name}' ({target.attributes.get(DIRECTION)}), "
                    f"not a {direction} send"
                )
    return findings


def _present(spans: Sequence[CapturedSpan], present: set[int]) -> list[str]:
    """Every rank the export setting selects has spans in the capture."""
    from codegen.otel_runtime._rankspec import parse_export_ranks

    findings = []
    settings: dict[tuple[str, str, int], dict[str, Any]] = {}
    for span in spans:
        resource = span.resource
        setting, world = resource.get(EXPORT_RANKS), resource.get(WORLD)
        if isinstance(setting, str) and isinstance(world, int):
            settings.setdefault((str(resource.get(RUN_ID, "")), setting, world), resource)
    for (run, setting, world), resource in sorted(settings.items()):
        try:
            selection = parse_export_ranks(setting, EXPORT_RANKS)
        except ValueError as error:
            findings.append(f"run {run}: {error}")
            continue
        sizes = {dim: resource.get(key, 1) for dim, key in SIZE_OF.items()}
        expected = {r for r in range(world) if _selects(selection, r, world, sizes)}
        missing = sorted(expected - present)
        if missing:
            findings.append(
                f"run {run}: ranks {missing} export under {EXPORT_RANKS}={setting!r} in a world of "
                f"{world} but sent no spans"
            )
    return findings


def _selects(selection: Any, rank: int, world: int, sizes: dict[str, Any]) -> bool:
    from codegen.otel_runtime._ranks import coordinates_in_order

    coords = coordinates_in_order(rank, world, sizes)
    try:
        return bool(selection.selects(rank, world, coords))
    except ValueError:
        return False
