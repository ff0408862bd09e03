"""``{any: [SELECTOR, ...]}``: bind each to its first alternative that selects exactly one statement."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import assert_never

import libcst as cst

from codegen.diagnostics import Diagnostics
from codegen.resolve.regions import select
from codegen.resolve.statements import StatementSite, statement_sites
from codegen.spec.model import (
    ANY,
    AroundHook,
    EntryHook,
    Hook,
    Region,
    Selector,
    Span,
    StatementHook,
    WrapHook,
)


class _NoChoice(Exception):
    pass


def has_alternatives(selector: Selector | None) -> bool:
    if selector is None:
        return False
    return selector.kind == ANY or has_alternatives(selector.within)


def concrete(
    entry: Span | Hook, func: cst.FunctionDef, line_of: Callable[[cst.CSTNode], int], diags: Diagnostics
) -> Span | Hook | None:
    """``entry`` with every ``any`` selector replaced by the alternative this function's code takes
    (the entry itself when it has none); None, with an error listing every alternative's outcome,
    when no alternative selects exactly one statement."""
    region = entry.region if isinstance(entry, Span | AroundHook) else None
    selectors = [region.first, region.last] if region is not None else []
    if isinstance(entry, StatementHook | WrapHook):
        selectors.append(entry.selector)
    if isinstance(entry, Span) and entry.stream is not None:
        selectors.append(entry.stream)
    if not any(has_alternatives(s) for s in selectors):
        return entry
    sites = statement_sites(func)
    try:
        if region is not None:
            region = replace(
                region,
                first=_choose(entry, region.first, sites, line_of, diags),
                last=_choose(entry, region.last, sites, line_of, diags),
            )
        match entry:
            case StatementHook() | WrapHook():
                selector = _choose(entry, entry.selector, sites, line_of, diags)
                assert selector is not None  # an entry's own selector stays one
                return replace(entry, selector=selector)
            case AroundHook():
                return replace(entry, region=region)
            case Span():
                assert isinstance(region, Region)
                stream = entry.stream and _choose(entry, entry.stream, sites, line_of, diags)
                return replace(entry, region=region, stream=stream)
            case EntryHook():  # no selector: returned above
                return entry
            case _:
                assert_never(entry)
    except _NoChoice:
        return None


def _choose(
    entry: Span | Hook,
    selector: Selector | None,
    sites: list[StatementSite],
    line_of: Callable[[cst.CSTNode], int],
    diags: Diagnostics,
) -> Selector | None:
    if selector is None or not has_alternatives(selector):
        return selector
    if selector.kind != ANY:
        return replace(selector, within=_choose(entry, selector.within, sites, line_of, diags))
    notes: list[str] = []
    for number, alternative in enumerate(selector.alternatives, 1):
        trial = Diagnostics()
        try:
            chosen = _choose(entry, alternative, sites, line_of, trial)
        except _NoChoice:
            chosen = None
        if chosen is not None and select(entry, chosen, sites, line_of, trial) is not None:
            return chosen
        for found in trial.items:
            notes.append(f"alternative {number}: {found.message}")
            notes.extend(f"  {note}" for note in found.notes)
    diags.error(
        selector.pos,
        f"no alternative of {selector.describe()} selects exactly one statement in {entry.function}",
        notes,
    )
    raise _NoChoice
