"""Property-based proof of the codemod: random functions and coroutines (`async def`, awaiting
coroutines that suspend; loops with break/continue,
try/except/finally, early returns, raised exceptions, nested defs, comprehensions) and random span
selections (the whole body, one statement, a run of statements; try, flat and decorator forms), and hooks
(entry, before, after, around, guarded, argument and result wraps) calling a stub runtime.

For each: the output compiles; removing the instrumentation gives the original AST; run against
a stub runtime with telemetry off and fully on, the function returns the same values, raises the
same exceptions and has the same side effects as the original, and (try and decorator forms)
leaves no span open.

Bounded for CI: one run with a fixed seed, one with a random seed (printed by hypothesis when it
fails), ``derandomize`` off; ``HYPOTHESIS_EXAMPLES`` raises the count for a longer local run.

An example the generator refuses tests nothing but the refusal: each example's outcome is recorded
with hypothesis ``event`` (``pytest --hypothesis-show-statistics`` lists them) and a run fails when
fewer than half of its examples instrument something.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, seed, settings
from hypothesis import strategies as st

from codegen.diagnostics import Diagnostics, SpecError
from codegen.resolve.plan import build_plan
from codegen.spec.load import load_project
from codegen.strip.equivalence import equivalent
from codegen.transforms.module import transform_file
from tests.generator.support import DEMO, make_project

EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "100"))
FLAGS = ("LAYER", "STEP", "IO")  # tests/fixtures/telemetry.yaml: groups layer, step, io
RAISE_AT = 7  # f_K(v) raises ValueError(K) when v == 7

# -- the generated programs --------------------------------------------------------------------


@dataclass
class _Program:
    lines: list[str] = field(default_factory=list)
    calls: int = 0
    # (name of the call, id of its block, index in the block) of each `v = f_K(v)` statement
    sites: list[tuple[str, int, int]] = field(default_factory=list)
    blocks: int = 0
    asynchronous: bool = False  # ``async def target``: each ``v = await f_K(v)`` calls a coroutine
    awaited: set[str] = field(default_factory=set)


def _block(draw: st.DrawFn, prog: _Program, indent: str, depth: int, in_loop: bool) -> None:
    block = prog.blocks
    prog.blocks += 1
    count = draw(st.integers(1, 4 if depth < 2 else 2))
    for index in range(count):
        kinds = ["call", "call", "effect", "comprehension"]
        if depth < 2:
            kinds += ["if", "for", "try", "nested_def"]
        kinds += ["return"] + (["break", "continue"] if in_loop else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "call":
            name = f"f_{prog.calls}"
            prog.calls += 1
            prog.sites.append((name, block, index))
            if prog.asynchronous:
                prog.awaited.add(name)
                prog.lines.append(f"{indent}v = await {name}(v)")
            else:
                prog.lines.append(f"{indent}v = {name}(v)")
        elif kind == "effect":
            prog.lines.append(f"{indent}log.append(('v', v))")
        elif kind == "comprehension":
            name = f"f_{prog.calls}"
            prog.calls += 1
            prog.lines.append(f"{indent}v = v + sum([{name}(j) for j in range(v % 3)])")
        elif kind == "if":
            prog.lines.append(f"{indent}if v % 2 == 0:")
            _block(draw, prog, indent + "    ", depth + 1, in_loop)
            if draw(st.booleans()):
                prog.lines.append(f"{indent}else:")
                _block(draw, prog, indent + "    ", depth + 1, in_loop)
        elif kind == "for":
            prog.lines.append(f"{indent}for i in range(n % 4):")
            prog.lines.append(f"{indent}    v = v + i")
            _block(draw, prog, indent + "    ", depth + 1, True)
        elif kind == "try":
            prog.lines.append(f"{indent}try:")
            _block(draw, prog, indent + "    ", depth + 1, in_loop)
            prog.lines.append(f"{indent}except ValueError as exc:")
            prog.lines.append(f"{indent}    log.append(('caught', exc.args))")
            prog.lines.append(f"{indent}    v = v + 2")
            if draw(st.booleans()):
                prog.lines.append(f"{indent}finally:")
                prog.lines.append(f"{indent}    log.append(('finally', v))")
        elif kind == "nested_def":
            prog.lines.append(f"{indent}def inner(y):")
            prog.lines.append(f"{indent}    return y * 2 + n")
            prog.lines.append(f"{indent}")
            prog.lines.append(f"{indent}v = inner(v) % 11")
        elif kind == "return":
            prog.lines.append(f"{indent}if v > {draw(st.integers(3, 12))}:")
            prog.lines.append(f"{indent}    return v, len(log)")
        else:
            prog.lines.append(f"{indent}if v % 3 == 1:")
            prog.lines.append(f"{indent}    {kind}")


@st.composite
def programs(draw: st.DrawFn) -> tuple[str, _Program]:
    prog = _Program(asynchronous=draw(st.booleans()))
    prog.lines.append(("async " if prog.asynchronous else "") + "def target(n, log):")
    prog.lines.append('    """A generated function."""')
    prog.lines.append("    v = n")
    _block(draw, prog, "    ", 0, False)
    prog.lines.append("    return v, len(log)")
    return "\n".join(prog.lines) + "\n", prog


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, _Program]:
    source, prog = draw(programs())
    spans = []
    for number in range(draw(st.integers(1, 3))):
        choices = ["function"] + (["statement", "range", "after"] if prog.sites else [])
        kind = draw(st.sampled_from(choices))
        form = draw(st.sampled_from(["try", "try", "flat"] + (["decorator"] if kind == "function" else [])))
        group = draw(st.sampled_from(["layer", "step", "io"]))
        lines = [
            f"  - name: demo.s{number}",
            f"    group: {group}",
            "    function: target",
            f"    form: {form}",
        ]
        if kind != "function":
            first = draw(st.sampled_from(prog.sites))
            if kind == "statement":
                lines.append(f"    around: {{call: {first[0]}}}")
            elif kind == "after":
                lines.append(f"    around: {{after: {{call: {first[0]}}}}}")
            else:
                later = [s for s in prog.sites if s[1] == first[1] and s[2] >= first[2]]
                last = draw(st.sampled_from(later))
                lines.append(f"    around: {{from: {{call: {first[0]}}}, to: {{call: {last[0]}}}}}")
        if form != "decorator":
            if draw(st.booleans()):
                lines.append("    attributes: {demo.n: n}")
            if form == "try" and draw(st.booleans()):
                lines.append("    end_attributes: {demo.v: v}")
        spans.append("\n".join(lines))
    hooks = []
    for _ in range(draw(st.integers(0, 2)) if prog.sites else 0):
        site = draw(st.sampled_from(prog.sites))[0]
        kind = draw(st.sampled_from(["entry", "before", "after", "around", "argument", "result"]))
        guard = draw(st.sampled_from(["", "    guard: step\n"]))
        body = {
            "entry": f"entry: true\n    call: otel.note(n)\n{guard}",
            "before": f"before: {{call: {site}}}\n    call: otel.note(v)\n{guard}",
            "after": f"after: {{call: {site}}}\n    call: otel.note(v)\n{guard}",
            "around": f"around: {{call: {site}}}\n    enter: otel.note(v)\n    exit: otel.note(-1)\n{guard}",
            "argument": f"wrap: {{call: {site}, argument: 0, with: otel.passthrough}}\n",
            "result": f"wrap: {{call: {site}, result: demo.r, with: otel.stamp}}\n",
        }[kind]
        hooks.append(f"  - function: target\n    {body}")
    spec = "file: megatron/demo.py\nspans:\n" + "\n".join(spans) + "\n"
    if hooks:
        spec += "hooks:\n" + "".join(hooks)
    return source, spec, prog


# -- a stub runtime ----------------------------------------------------------------------------


class _Span:
    def __init__(self, runtime: _Runtime, name: str, attributes: object) -> None:
        self.runtime, self.name = runtime, name
        self.attributes = runtime.evaluate(attributes)
        runtime.open.append(self)

    def set_attributes(self, attributes: object) -> None:
        self.runtime.evaluate(attributes)

    def end(self) -> None:
        self.runtime.open.remove(self)
        self.runtime.ended.append(self.name)


class _Runtime:
    """What the generated code calls: flags, ``start_span``, ``traced``; like the real runtime it
    never raises into the instrumented code (a failing attribute expression is swallowed)."""

    def __init__(self, enabled: bool) -> None:
        for flag in FLAGS:
            setattr(self, flag, enabled)
        self.open: list[_Span] = []
        self.ended: list[str] = []
        self.started = 0
        self.notes: list[object] = []  # what hooks passed to the runtime

    def evaluate(self, attributes: object) -> object:
        try:
            return attributes() if callable(attributes) else attributes
        except Exception:  # noqa: BLE001 - the real runtime logs it once
            return None

    def note(self, value: object) -> None:
        self.notes.append(value)

    def passthrough(self, value: object) -> object:
        return value

    def stamp(self, key: str, value: object) -> object:
        self.notes.append((key, value))
        return value

    def start_span(self, name: str, attributes: object = None) -> _Span:
        self.started += 1
        return _Span(self, name, attributes)

    def traced(self, name: str, attributes: object = None):
        runtime = self

        def decorate(func):
            if inspect.iscoroutinefunction(func):

                async def coroutine(*args, **kwargs):
                    if not runtime.LAYER and not runtime.STEP and not runtime.IO:
                        return await func(*args, **kwargs)
                    span = runtime.start_span(name)
                    try:
                        return await func(*args, **kwargs)
                    finally:
                        span.end()

                return coroutine

            def wrapper(*args, **kwargs):
                if not runtime.LAYER and not runtime.STEP and not runtime.IO:
                    return func(*args, **kwargs)
                span = runtime.start_span(name)
                try:
                    return func(*args, **kwargs)
                finally:
                    span.end()

            return wrapper

        return decorate


def _run(
    source: str, runtime: _Runtime | None, n: int, awaited: frozenset[str] = frozenset()
) -> tuple[object, list[object]]:
    """Run ``target(n, log)`` (``asyncio.run`` when it is a coroutine function, whose ``awaited``
    calls are coroutine functions suspending once)."""
    log: list[object] = []
    namespace: dict[str, object] = {}
    for k in range(256):

        def f(v: int, k: int = k) -> int:
            log.append((f"f_{k}", v))
            if v == RAISE_AT:
                raise ValueError(k)
            return v + 1 + k % 3

        async def coroutine(v: int, f: Callable[[int], int] = f) -> int:
            await asyncio.sleep(0)
            return f(v)

        namespace[f"f_{k}"] = coroutine if f"f_{k}" in awaited else f
    package = types.ModuleType("megatron")
    package.__path__ = []  # a package: the output imports `megatron.otel as _otel`
    package.otel = runtime  # type: ignore[attr-defined]
    saved = {name: sys.modules.get(name) for name in ("megatron", "megatron.otel")}
    sys.modules["megatron"] = package
    sys.modules["megatron.otel"] = runtime  # type: ignore[assignment]
    try:
        exec(compile(source, DEMO, "exec"), namespace)
        try:
            returned = namespace["target"](n, log)  # type: ignore[operator]
            if asyncio.iscoroutine(returned):
                returned = asyncio.run(returned)
            result: object = ("returned", returned)
        except Exception as exc:  # noqa: BLE001 - compared between the runs
            result = ("raised", type(exc).__name__, exc.args)
    finally:
        for name, module in saved.items():
            if module is None:
                del sys.modules[name]
            else:
                sys.modules[name] = module
    return result, log


# -- the property ------------------------------------------------------------------------------


_REFUSALS = ("a flat span cannot cover", "partially overlaps", "nothing follows", "one-line block")


def _instrument(tmp: Path, spec: str, source: str) -> tuple[str, str] | None:
    """The spec and the instrumented source. When the generator refuses the spans with a reason
    it documents (a flat span over an early exit, partially overlapping spans, nothing after an
    `after:` statement), every span in the try form, else the first span alone in the try form;
    None when that is refused too. The outcome is recorded as a hypothesis event."""
    output, refusal = _apply(tmp / "all", spec, source)
    if output is not None:
        event("instrumented as drawn")
        return spec, output
    event(f"refused as drawn: {refusal}")
    tried = spec.replace("form: flat", "form: try")  # the spans in the try form, hooks kept
    output, _ = _apply(tmp / "try", tried, source)
    if output is not None:
        event("instrumented in the try form")
        return tried, output
    first = spec.split("hooks:")[0].split("  - name:")[1].replace("form: flat", "form: try")
    single = "file: megatron/demo.py\nspans:\n  - name:" + first
    output, refusal = _apply(tmp / "first", single, source)
    event("instrumented: the first span alone" if output is not None else f"refused entirely: {refusal}")
    return None if output is None else (single, output)


def _apply(tmp: Path, spec: str, source: str) -> tuple[str | None, str]:
    """The instrumented source, or None and the kind of refusal (one the generator documents)."""
    specs, root = make_project(tmp, spec, source)
    diags = Diagnostics()
    project = load_project(specs, diags)
    try:
        plan = build_plan(project, root, diags)
    except SpecError as exc:
        messages = [d.message for d in exc.diagnostics.items]
        assert all(any(e in m for e in _REFUSALS) for m in messages), messages
        return None, next(e for e in _REFUSALS if e in messages[0])
    return transform_file(project, plan.files[DEMO]), ""


def check(case: tuple[str, str, _Program], tmp: Path) -> bool:
    """Whether the example instrumented something (and then, that the properties hold)."""
    source, spec, prog = case
    awaited = frozenset(prog.awaited)
    instrumented = _instrument(tmp, spec, source)
    if instrumented is None:
        return False
    event("a coroutine, instrumented" if prog.asynchronous else "a function, instrumented")
    spec, output = instrumented
    compile(output, DEMO, "exec")
    assert equivalent(source, output, "otel", "megatron"), output
    flat = "form: flat" in spec
    spans = spec.split("hooks:")[0].split("  - name:")[1:]
    whole = any("around:" not in s and "form: flat" not in s for s in spans)
    for n in (0, 1, 2, 5, 6, 9):
        expected = _run(source, None, n, awaited)
        for enabled in (False, True):
            runtime = _Runtime(enabled)
            assert _run(output, runtime, n, awaited) == expected, (n, enabled, output)
            if not enabled:
                assert runtime.started == 0
            elif whole:
                assert runtime.started >= 1  # a span over the whole body always starts
            if not flat:
                assert not runtime.open, ([s.name for s in runtime.open], output)
                assert len(runtime.ended) == runtime.started
    return True


_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _assert_mostly_instrumented(outcomes: list[bool]) -> None:
    instrumented = sum(outcomes)
    assert outcomes, "no example ran"
    assert instrumented * 2 >= len(outcomes), (
        f"only {instrumented} of {len(outcomes)} examples instrumented something: the strategy draws "
        "mostly specs the generator refuses (see the events with --hypothesis-show-statistics)"
    )


@pytest.fixture
def outcomes() -> Iterator[list[bool]]:
    """Whether each example of one property test instrumented something; checked after the last
    example (a function-scoped fixture lives as long as the whole hypothesis run)."""
    recorded: list[bool] = []
    yield recorded
    _assert_mostly_instrumented(recorded)


@pytest.mark.slow
@seed(20261203)
@_SETTINGS
@given(case=cases())
def test_codemod_properties_fixed_seed(
    case: tuple[str, str, _Program], tmp_path_factory: pytest.TempPathFactory, outcomes: list[bool]
) -> None:
    outcomes.append(check(case, tmp_path_factory.mktemp("case")))


@pytest.mark.slow
@_SETTINGS
@given(case=cases())
def test_codemod_properties_random_seed(
    case: tuple[str, str, _Program], tmp_path_factory: pytest.TempPathFactory, outcomes: list[bool]
) -> None:
    outcomes.append(check(case, tmp_path_factory.mktemp("case")))


def test_too_few_instrumented_examples_fail_the_property() -> None:
    """The guard itself: a run whose examples are mostly refused fails, one with half passes."""
    with pytest.raises(AssertionError, match="only 1 of 3 examples instrumented something"):
        _assert_mostly_instrumented([True, False, False])
    _assert_mostly_instrumented([True, False])
    with pytest.raises(AssertionError, match="no example ran"):
        _assert_mostly_instrumented([])
