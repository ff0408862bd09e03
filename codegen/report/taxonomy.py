"""What the report counts, derived from the specs: which span names fall in which category.

The report never lists span names itself. Its rules name the *roles* of the runtime's lifecycle
spans (startup, its phases, pre_startup, the training interval) and the *groups* declared in
``telemetry.yaml``; the span names of each category are whatever the specs put in those groups
and roles. ``Taxonomy.from_project`` checks that every group a rule names is declared, so a
renamed group fails loudly instead of silently counting nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from codegen.spec.model import Project

# Categories of the wall clock, in the order the report shows them. Each instant of a process's
# time falls in exactly one.
GOODPUT = "goodput"
STARTUP = "startup"
CHECKPOINT_LOAD = "checkpoint_load"
CHECKPOINT_SAVE = "checkpoint_save"
EVALUATION = "evaluation"
DATA_LOADING = "data_loading"
FIRST_ITERATION = "first_iteration"
PROGRESS_LOST = "progress_lost"
RESTART = "restart"
UNACCOUNTED = "unaccounted"
CATEGORIES = (
    GOODPUT,
    STARTUP,
    CHECKPOINT_LOAD,
    CHECKPOINT_SAVE,
    EVALUATION,
    DATA_LOADING,
    FIRST_ITERATION,
    PROGRESS_LOST,
    RESTART,
    UNACCOUNTED,
)
TITLES = {
    GOODPUT: "goodput (training iterations)",
    STARTUP: "start-up and initialization",
    CHECKPOINT_LOAD: "checkpoint load",
    CHECKPOINT_SAVE: "checkpoint save (exposed)",
    EVALUATION: "evaluation",
    DATA_LOADING: "data loading outside the step",
    FIRST_ITERATION: "first-iteration overhead",
    PROGRESS_LOST: "progress lost (redone after a restart)",
    RESTART: "between runs (restart)",
    UNACCOUNTED: "unaccounted (no span)",
}
# The rules: a span of one of these groups counts in the category (badput), wherever it runs.
GROUP_RULES: dict[str, str] = {
    "load_checkpoint": CHECKPOINT_LOAD,
    "checkpoint": CHECKPOINT_SAVE,
    "evaluate": EVALUATION,
    "data_loading": DATA_LOADING,
    "first_iteration": FIRST_ITERATION,
}
STEP_GROUP = "step"  # the group of the per-iteration span and its bookkeeping (logging)


class TaxonomyError(Exception):
    """The specs do not have what the report's rules name."""


@dataclass(frozen=True)
class Taxonomy:
    names: frozenset[str]  # every span name of the specs
    group: Mapping[str, str]  # span name -> group
    category: Mapping[str, str]  # span name -> category, for the spans that set one
    startup_phase: Mapping[str, str]  # span name -> the startup phase it counts in (STARTUP spans)
    startup: str  # lifecycle roles
    phases: tuple[str, ...]  # pre_startup and the backdated phases, in order
    interval: str
    iteration: str  # the per-iteration span
    iteration_key: str  # the attribute holding the iteration number
    step_phases: tuple[str, ...]  # spans inside an iteration, shown as its phases
    logging: tuple[str, ...]  # step-group spans beside the iteration (after it: logging, GC)
    save: tuple[str, ...]  # checkpoint-group spans that carry the iteration (one per save)
    load: tuple[str, ...]  # outermost load_checkpoint-group spans
    # drawn on the job timeline: the outermost span of each category, startup's phases
    timeline: frozenset[str]

    @classmethod
    def from_project(cls, project: Project) -> Taxonomy:
        groups = {g.name for g in project.groups}
        missing = sorted(set(GROUP_RULES) - groups | ({STEP_GROUP} - groups))
        if missing:
            raise TaxonomyError(
                f"the specs declare no group(s) {', '.join(missing)}, which the report's rules name "
                "(codegen/report/taxonomy.py GROUP_RULES)"
            )
        roles: dict[str, list[str]] = {}
        for life in project.lifecycle:
            roles.setdefault(life.role, []).append(life.name)
        for role in ("startup", "interval"):
            if len(roles.get(role, [])) != 1:
                raise TaxonomyError(f"the specs' lifecycle must declare one '{role}' span")
        startup, interval = roles["startup"][0], roles["interval"][0]
        group = {life.name: life.group for life in project.lifecycle}
        parents: dict[str, set[str]] = {}
        attrs: dict[str, set[str]] = {}
        for span in project.spans:
            for name in span.names or (span.name,):
                group.setdefault(name, span.group)
                parents.setdefault(name, set()).update(span.parents_of(name))
                attrs.setdefault(name, set()).update(a.key for a in span.attributes)
        interval_keys = [
            key for life in project.lifecycle if life.role == "interval" for key, _ in life.attributes
        ]
        # the iteration span: of the step group, inside the interval, carrying the interval's
        # iteration attribute
        found = [
            (name, key)
            for name, g in group.items()
            if g == STEP_GROUP and interval in parents.get(name, set())
            for key in interval_keys
            if key in attrs.get(name, set())
        ]
        if len(found) != 1:
            raise TaxonomyError(
                f"the report needs exactly one span of group '{STEP_GROUP}' inside '{interval}' carrying "
                f"one of its attributes ({', '.join(interval_keys) or 'none declared'}); the specs have "
                f"{len(found)}"
            )
        iteration, key = found[0]
        category: dict[str, str] = {}
        startup_phase: dict[str, str] = {}
        phases = tuple(life.name for life in project.lifecycle if life.role in ("pre_startup", "phase"))
        for name in (startup, *phases):
            category[name] = STARTUP
            startup_phase[name] = name
        for name, g in group.items():
            if g in GROUP_RULES:
                category[name] = GROUP_RULES[g]
            elif startup in parents.get(name, set()) and name not in category:
                category[name] = STARTUP  # a direct child of startup: a phase of its own
                startup_phase[name] = name
        category[interval] = GOODPUT

        def outermost(cat: str) -> tuple[str, ...]:
            inside = {n for n, c in category.items() if c == cat}
            return tuple(n for n in inside if not inside & parents.get(n, set()))

        saves = [n for n, c in category.items() if c == CHECKPOINT_SAVE and key in attrs.get(n, set())]
        return cls(
            names=frozenset(project.all_span_names()),
            group=group,
            category=category,
            startup_phase=startup_phase,
            startup=startup,
            phases=phases,
            interval=interval,
            iteration=iteration,
            iteration_key=key,
            step_phases=tuple(n for n, p in parents.items() if iteration in p),
            logging=tuple(
                n
                for n, g in group.items()
                if g == STEP_GROUP and interval in parents.get(n, set()) and n != iteration
            ),
            save=tuple(n for n in saves if not set(saves) & parents.get(n, set())),
            load=tuple(sorted(outermost(CHECKPOINT_LOAD))),
            timeline=frozenset(n for c in set(category.values()) for n in outermost(c)) | set(startup_phase),
        )

    def names_in(self, category: str) -> tuple[str, ...]:
        return tuple(sorted(n for n, c in self.category.items() if c == category))
