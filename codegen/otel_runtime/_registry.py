"""One span-group registry in the tree: Megatron-LM's own when the tree has it.

Megatron-LM main carries a base telemetry layer (``megatron/core/telemetry/``, upstream PR #6415)
whose ``MegatronSpanGroup`` holds the span groups and presets (``ALL_GROUPS``, ``_PRESETS``;
nemo-lens's ``SpanGroup`` under it when that is installed). On such a tree the runtime resolves
``--otel-span-groups`` against that class, so a group or preset changed there changes here: the
specs' declared groups and presets only add what it lacks (and a preset declared as every group,
``*``, also has the groups only the specs declare). On a release without it (0.17-0.19),
the declared ones are the registry.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping

from ._state import log_once
from ._taxonomy import GROUPS as DECLARED_GROUPS
from ._taxonomy import PRESETS as DECLARED_PRESETS

UPSTREAM_MODULE = "megatron.core.telemetry.span_groups"
UPSTREAM_CLASS = "MegatronSpanGroup"


def adopt(
    groups: tuple[str, ...], presets: Mapping[str, frozenset[str]]
) -> tuple[tuple[str, ...], dict[str, frozenset[str]]]:
    """``groups`` and ``presets`` with Megatron-LM's own registry taking their place when the
    tree has one: its groups after the declared ones in declaration order, its presets replacing
    the declared ones of the same name. Unchanged when the tree has none. Never raises."""
    declared = dict(presets)
    if "megatron.core" not in sys.modules:  # the runtime outside a Megatron tree (its own tests)
        return groups, declared
    try:
        registry = getattr(importlib.import_module(UPSTREAM_MODULE), UPSTREAM_CLASS)
        upstream_groups = frozenset(str(g) for g in registry.ALL_GROUPS)
        upstream_presets = {
            str(name).lower(): frozenset(str(g) for g in members)
            for name, members in registry._PRESETS.items()
        }
    except ImportError:
        return groups, declared
    except Exception:
        log_once("registry", "reading %s.%s failed", UPSTREAM_MODULE, UPSTREAM_CLASS, exc_info=True)
        return groups, declared
    merged = groups + tuple(sorted(upstream_groups - set(groups)))
    # A preset the specs declare as every group ("*": profiling, all) keeps the groups the specs
    # add to the tree's registry (inference_steps), as on a release without one.
    added = frozenset(groups) - upstream_groups
    for name, members in upstream_presets.items():
        if added and declared.get(name) == frozenset(groups):
            upstream_presets[name] = members | added
    return merged, {**declared, **upstream_presets}


def current_registry() -> tuple[tuple[str, ...], dict[str, frozenset[str]]]:
    """The groups and presets ``resolve()`` reads, the tree's registry as it is now."""
    return adopt(DECLARED_GROUPS, DECLARED_PRESETS)


# The registry when the runtime was imported (the package's GROUPS and PRESETS).
GROUPS, PRESETS = current_registry()
