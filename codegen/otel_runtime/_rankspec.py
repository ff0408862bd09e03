"""Which ranks export (``MEGATRON_OTEL_EXPORT_RANKS`` / ``--otel-export-ranks``, and the older
``MEGATRON_OTEL_EXPORT_RANK``): the setting parsed (configuration; ``_ranks`` applies it).

``last`` (the default), ``all``, a list of ranks (``0,4,8-11``), ``every:N`` (ranks 0, N, 2N, ...)
or ``one-per:DIMS`` (the first rank of each group along the ``+``-joined dimensions ``tp``,
``pp``, ``dp``, ``cp``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# The dimensions the one-per form names (the dense layers' grid; expert ranks overlap dp).
DIMENSIONS = ("tp", "pp", "dp", "cp")
FORMS = (
    "last, all, a list of ranks (0,4,8-11), every:N (ranks 0, N, 2N, ...), "
    "one-per:DIMS (one rank per index along DIMS, '+'-joined from tp, pp, dp, cp)"
)


@dataclass(frozen=True)
class ExportRanks:
    """Which ranks record and export: ``kind`` is last, all, list, every or one-per."""

    kind: str = "last"
    ranks: tuple[int, ...] = ()  # list
    every: int = 0  # every
    dims: tuple[str, ...] = ()  # one-per: the dimensions whose groups get one rank each
    where: str = "MEGATRON_OTEL_EXPORT_RANKS"
    text: str = "last"

    def many(self) -> bool:
        """Whether more than one rank may export (then the ranks agree on a run id)."""
        return self.kind != "last" and not (self.kind == "list" and len(self.ranks) == 1)

    def selects(self, rank: int, world: int, coordinates: Mapping[str, int]) -> bool:
        """Whether ``rank`` exports; ``ValueError`` when a listed rank is not in the world."""
        if self.kind == "last":
            return rank == world - 1
        if self.kind == "all":
            return True
        if self.kind == "list":
            missing = [r for r in self.ranks if r >= world]
            if missing:
                raise ValueError(
                    f"{self.where}={self.text}: no rank {missing[0]} in a world of {world}; "
                    f"valid ranks: 0..{world - 1}"
                )
            return rank in self.ranks
        if self.kind == "every":
            return rank % self.every == 0
        return all(coordinates.get(dim, 0) == 0 for dim in DIMENSIONS if dim not in self.dims)


def parse_export_ranks(value: str, where: str) -> ExportRanks:
    """``value`` of ``where`` (a variable or flag) as an ``ExportRanks``; ``ValueError`` naming the
    valid forms."""
    text = value.strip()
    key = text.lower().replace(" ", "")
    bad = ValueError(f"{where}={value!r} is not valid; valid forms: {FORMS}")
    if key in ("last", "all"):
        return ExportRanks(key, where=where, text=text)
    if key.startswith("every:"):
        try:
            every = int(key[6:])
        except ValueError:
            raise bad from None
        if every <= 0:
            raise bad
        return ExportRanks("every", every=every, where=where, text=text)
    if key.startswith("one-per:"):
        dims = tuple(key[8:].split("+"))
        if not dims or any(d not in DIMENSIONS for d in dims) or len(set(dims)) != len(dims):
            raise bad
        return ExportRanks("one-per", dims=dims, where=where, text=text)
    ranks: set[int] = set()
    for part in key.split(","):
        low, dash, high = part.partition("-")
        try:
            first, last = int(low), int(high if dash else low)
        except ValueError:
            raise bad from None
        if first < 0 or last < first:
            raise bad
        ranks.update(range(first, last + 1))
    return ExportRanks("list", ranks=tuple(sorted(ranks)), where=where, text=text)


def export_ranks_from(
    ranks: tuple[str, str], default: str, rank: tuple[str, str], rank_default: str
) -> ExportRanks:
    """The export setting from the new (``ranks``: value, where) and the older single-rank setting
    (``rank``); giving both is an error."""
    value, where = ranks
    given = value.strip() != default
    old, old_where = rank
    old_given = old.strip() != rank_default
    if given and old_given:
        raise ValueError(
            f"{where}={value!r} and {old_where}={old!r} are both given; valid: one of them "
            f"({where} takes {FORMS})"
        )
    if old_given:
        try:
            number = int(old)
        except ValueError:
            number = -2
        if number < -1:
            raise ValueError(
                f"{old_where}={old!r} is not valid; valid values: -1 (the last rank) or a rank >= 0"
            )
        if number == -1:
            return ExportRanks("last", where=old_where, text=old)
        return ExportRanks("list", ranks=(number,), where=old_where, text=old)
    return parse_export_ranks(value, where)
