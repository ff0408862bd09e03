"""Span groups and spans: enable() and disable(), start_span(), the traced decorator (``resolve``
is configuration: ``_config``)."""

from __future__ import annotations

import contextvars
import functools
import sys
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ._config import resolve
from ._lean_install import tracer as _tracer_for
from ._lean_span import LeanSpan
from ._lean_tracer import LeanTracer
from ._ranks import P2P, start_shared
from ._state import LOG, NAMESPACE, PROCESS, PUBLISHED, log_once, set_flag, task_stack, warn_once
from ._taxonomy import DEFAULT_SPEC, FLAGS, SPANS
from ._version import SCHEMA_URL, SCOPE, VERSION

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from ._state import Run

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # opentelemetry is optional: without it no tracer is set, nothing below runs
    OTEL_INSTALLED = False
else:
    OTEL_INSTALLED = True

# Attributes every span of a given name starts with.
SPAN_ATTRIBUTES: dict[str, dict[str, Any]] = {
    name: {"megatron.span_group": span.group, **({"is_goodput_span": True} if span.goodput else {})}
    for name, span in SPANS.items()
}
NO_ATTRIBUTES: dict[str, Any] = {}
_exc_info = sys.exc_info
# The exception being handled (sys.exception, Python >= 3.11: no tuple built per call).
_exception: Callable[[], BaseException | None] = getattr(sys, "exception", lambda: _exc_info()[1])
_is_finalizing = sys.is_finalizing
_F = TypeVar("_F", bound=Callable[..., Any])
_Parameters = tuple[tuple[str, str, "int | None", Any], ...]


def enable(
    groups: str | Iterable[str] = DEFAULT_SPEC, tracer_provider: TracerProvider | None = None
) -> frozenset[str]:
    """Record exactly the groups ``groups`` resolves to; return them.

    Spans come from ``tracer_provider``, or from the global provider when it is None. Without
    ``opentelemetry`` installed this logs a warning, leaves every group off and returns nothing.
    A program that calls this itself keeps its groups through a later ``configure()`` (which then
    applies no settings) until it calls ``disable()`` (or ``shutdown()``/``reset()``).
    """
    selected = select(groups, tracer_provider)
    PROCESS.run.programmatic = bool(selected)
    return selected


def select(
    groups: str | Iterable[str], tracer_provider: TracerProvider | None = None
) -> frozenset[str]:
    """``enable()`` as ``configure()`` calls it: the groups the settings name."""
    selected = resolve(groups if isinstance(groups, str) else ",".join(groups))
    disable()
    if not OTEL_INSTALLED:
        LOG.warning("opentelemetry is not installed: Megatron telemetry stays disabled")
        return frozenset()
    sdk_tracer = otel_trace.get_tracer(
        SCOPE, VERSION, tracer_provider=tracer_provider, schema_url=SCHEMA_URL
    )
    tracer = PROCESS.run.tracer = _tracer_for(tracer_provider, sdk_tracer)  # lean when ours
    if type(tracer) is LeanTracer:
        tracer.fallback, tracer.transfers = start_sdk, P2P
    # the call sites reach a lean tracer's open() directly (one call less per span)
    NAMESPACE["start_span"] = tracer.open if type(tracer) is LeanTracer else start_span
    for group in selected:
        set_flag(FLAGS[group], True)
    return selected


def disable() -> None:
    """Turn every group off; spans already started still end normally."""
    PROCESS.run.programmatic = False
    for name in FLAGS.values():
        set_flag(name, False)


def enabled_groups() -> frozenset[str]:
    """The groups recording now."""
    return frozenset(group for group, name in FLAGS.items() if NAMESPACE[name])


def start_span(
    name: str, attributes: Callable[[], Mapping[str, Any]] | None = None
) -> StartedSpan | LeanSpan | None:
    """Start span ``name`` as the current span, or return None when it cannot. Never raises.

    The caller has already checked the span's group flag; ``attributes`` is evaluated here only.
    While the run records on the lean path the package's ``start_span`` is its tracer's
    ``open`` (one call less per span); this function then hands over to it.
    """
    run = PROCESS.run
    tracer = run.tracer
    if tracer is None:
        return None
    if type(tracer) is LeanTracer:
        return tracer.open(name, attributes)
    return start_sdk(tracer, run, name, attributes)


def start_sdk(
    tracer: Tracer, run: Run, name: str, attributes: Callable[[], Mapping[str, Any]] | None
) -> StartedSpan | None:
    """``start_span`` through ``tracer``'s own ``start_span`` (the SDK path), the span group
    attributes added; ids chosen for a root of the run's shared trace and a pipeline transfer."""
    span: Span | None = None
    token: Token[Context] | None = None
    called = False  # the tracer was called: it may have started a span before failing
    try:
        extra = None
        if attributes is not None:
            try:
                extra = attributes()
            except Exception:
                warn_once(name, "evaluating attributes")
        base = SPAN_ATTRIBUTES.get(name, NO_ATTRIBUTES)
        values = {**base, **extra} if extra else base
        called = True
        in_task = task_stack(run)
        stack = run.open_spans.stack if in_task is None else in_task
        # A root (no taxonomy span open on this thread, as on the lean path; in an asyncio task,
        # no span current either) joins the shared trace, a pipeline transfer gets its id; any
        # other span takes its parent's trace.
        root = not stack and (
            in_task is None or not otel_trace.get_current_span().get_span_context().is_valid
        )
        if run.ids is not None and (root or name in P2P):
            span = start_shared(tracer, run, name, values)
        else:
            span = tracer.start_span(name, attributes=values)
        token = otel_context.attach(otel_trace.set_span_in_context(span))
        started = StartedSpan(span, token, name, _exception())
        stack.append(started)
        return started
    except Exception as error:  # RecursionError and MemoryError included: whatever started is
        # ended, the context restored; a span the tracer started before failing is found in the
        # traceback
        try:
            if span is None and called:
                span = _started_in(error)
            if span is not None or token is not None:
                _abandon(span, token)
            warn_once(name, "starting the span")
        except Exception:  # at the recursion limit: calling the tracer failed, nothing started
            pass
        return None
    except BaseException as error:  # the program's own interrupt (KeyboardInterrupt): the span
        # it interrupted is ended, and the interrupt goes on to the program
        try:
            if span is None and called:
                span = _started_in(error)
            if span is not None or token is not None:
                _abandon(span, token)
        except Exception:
            pass
        raise


PUBLISHED["start_span"] = start_span  # what a new run's package attribute is again


def _started_in(error: BaseException) -> Span | None:
    """The span a tracer's ``start_span`` had started when ``error`` left it (a RecursionError in
    a span processor's ``on_start`` after an earlier processor saw the span start): the recording
    ``span`` of the innermost ``start_span`` frame of the traceback. Never raises."""
    found = None
    try:
        tb = error.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if frame.f_code.co_name == "start_span":
                candidate = frame.f_locals.get("span")
                if isinstance(candidate, otel_trace.Span) and candidate.is_recording():
                    found = candidate
            tb = tb.tb_next
    except Exception:
        pass
    return found


def _abandon(span: Span | None, token: Token[Context] | None) -> None:
    """Undo a start_span that failed half-way: detach ``token``, end ``span``. Never raises."""
    try:
        if token is not None:
            otel_context.detach(token)
    except Exception:
        pass
    try:
        if span is not None:
            span.end()
    except Exception:
        pass


def traced(name: str, attributes: Mapping[str, str] | None = None) -> Callable[[_F], _F]:
    """Decorator for cold functions: run the function inside span ``name`` while its group records.

    ``attributes`` maps attribute keys to parameter names; the call's arguments are read only when
    the span records. A name missing from ``SPANS`` leaves the function undecorated.
    """

    def decorate(fn: _F) -> _F:
        entry = SPANS.get(name)
        if entry is None:
            log_once(f"traced:{name}", "no span named %r: %s is not traced", name, fn)
            return fn
        flag = FLAGS[entry.group]
        namespace = NAMESPACE
        parameters = _parameters(name, fn, attributes or {})
        if _is_coroutine_function(fn):
            return cast("_F", _coroutine_wrapper(fn, name, flag, parameters))

        exact = _exact_wrapper(fn, name, flag, parameters)
        if exact is not None:
            return cast("_F", exact)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not namespace[flag]:
                return fn(*args, **kwargs)
            span = start_span(
                name, (lambda: _arguments(parameters, args, kwargs)) if parameters else None
            )
            try:
                return fn(*args, **kwargs)
            finally:
                if span is not None:
                    span.end()

        return cast("_F", wrapper)  # functools.wraps keeps fn's name, docs and signature

    return decorate


# The span of the ``traced`` coroutine running now in this task (while its group records): what
# ``stream(iterable)`` hands over (a stream call site in a decorated coroutine).
TRACED: contextvars.ContextVar[Any] = contextvars.ContextVar("megatron_otel_traced", default=None)


def _is_coroutine_function(fn: Callable[..., Any]) -> bool:
    import asyncio.coroutines
    import inspect  # only when a function is decorated

    marker = getattr(asyncio.coroutines, "_is_coroutine", None)  # a traced coroutine (3.11)
    return inspect.iscoroutinefunction(fn) or (
        marker is not None and getattr(fn, "_is_coroutine", None) is marker
    )


def _coroutine_wrapper(
    fn: Callable[..., Any], name: str, flag: str, parameters: _Parameters
) -> Callable[..., Any]:
    """``traced`` for a coroutine function (``async def``): a function marked as a coroutine
    function (a server awaits what it returns as it would ``fn``'s coroutine), whose span covers
    ``fn``'s run to its return, exception or cancellation, not the call that makes the coroutine.
    While the group is off it returns ``fn``'s own coroutine: no coroutine frame of its own."""
    namespace = NAMESPACE

    async def run(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        span = start_span(
            name, (lambda: _arguments(parameters, args, kwargs)) if parameters else None
        )
        token = TRACED.set(span)
        try:
            return await fn(*args, **kwargs)
        finally:
            TRACED.reset(token)
            if span is not None:
                span.end()

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not namespace[flag]:
            return fn(*args, **kwargs)
        return run(args, kwargs)

    return _mark_coroutine_function(wrapper)


def _mark_coroutine_function(wrapper: Callable[..., Any]) -> Callable[..., Any]:
    """``wrapper`` as ``inspect.iscoroutinefunction`` (Python 3.12+) and
    ``asyncio.iscoroutinefunction`` (what Quart asks on Python 3.11 to 3.13) see a coroutine
    function: a server awaits its result rather than running it in a thread."""
    import asyncio.coroutines
    import inspect

    mark = getattr(inspect, "markcoroutinefunction", None)
    if mark is not None:
        wrapper = mark(wrapper)
    marker = getattr(asyncio.coroutines, "_is_coroutine", None)
    if marker is not None:
        wrapper._is_coroutine = marker  # type: ignore[attr-defined]
    return wrapper


# The wrapper ``traced`` writes for a function whose parameters are all positional-or-keyword:
# the same parameters, so that a call packs no tuple and no dictionary (a disabled span costs
# one flag read and one call more than the function). Names start with _otel_ (a function with
# such a parameter gets the generic wrapper).
_EXACT = """\
def wrapper(PARAMS):
    if not _otel_namespace[_otel_flag]:
        return _otel_fn(PARAMS)
    _otel_span = _otel_start(
        _otel_name,
        (lambda: _otel_arguments(_otel_parameters, (PARAMSCOMMA), _otel_no_keywords))
        if _otel_parameters
        else None,
    )
    try:
        return _otel_fn(PARAMS)
    finally:
        if _otel_span is not None:
            _otel_span.end()
"""
_SIMPLE_FLAGS = 0x04 | 0x08  # CO_VARARGS, CO_VARKEYWORDS
_NO_KEYWORDS: Mapping[str, Any] = MappingProxyType({})  # the exact wrapper's keyword arguments


def _exact_wrapper(
    fn: Callable[..., Any], name: str, flag: str, parameters: _Parameters
) -> Callable[..., Any] | None:
    """``fn``'s wrapper with ``fn``'s own parameters (defaults shared), or None when ``fn`` has
    ``*args``, ``**kwargs``, keyword-only or positional-only parameters, or is no plain function
    (the generic wrapper then)."""
    code = getattr(fn, "__code__", None)
    if (
        code is None
        or code.co_flags & _SIMPLE_FLAGS
        or code.co_kwonlyargcount
        or code.co_posonlyargcount
        or getattr(fn, "__kwdefaults__", None)
    ):
        return None
    names = code.co_varnames[: code.co_argcount]
    if any(n.startswith("_otel_") or not n.isidentifier() for n in names):
        return None
    params = ", ".join(names)
    scope: dict[str, Any] = {
        "_otel_namespace": NAMESPACE,
        "_otel_flag": flag,
        "_otel_fn": fn,
        "_otel_start": start_span,
        "_otel_name": name,
        "_otel_arguments": _arguments,
        "_otel_parameters": parameters,
        "_otel_no_keywords": _NO_KEYWORDS,
    }
    try:
        source = _EXACT.replace("PARAMSCOMMA", params + ("," if len(names) == 1 else ""))
        exec(source.replace("PARAMS", params), scope)  # noqa: S102
        wrapper: Any = scope["wrapper"]
        # errors in a call name the function, as they would without the wrapper
        wrapper.__code__ = wrapper.__code__.replace(
            co_name=code.co_name, co_qualname=getattr(code, "co_qualname", code.co_name)
        )
        wrapper.__defaults__ = getattr(fn, "__defaults__", None)
        functools.update_wrapper(wrapper, fn)
    except Exception:  # an unusual function: the generic wrapper serves it as well
        return None
    return cast("Callable[..., Any]", wrapper)


def abort_open_spans(description: str) -> None:
    """End every open span of every thread with an ERROR status (SIGTERM). Never raises.

    This thread's spans are closed innermost first, restoring its context; another thread's are
    only ended (its context is its own).
    """
    run = PROCESS.run
    current = run.open_spans.stack
    for ident, stack in list(run.stacks.items()):
        try:
            while stack:
                stack.pop().abort(description, restore=stack is current)
            if stack is not current:
                del run.stacks[ident]  # recreated by OpenSpans if that thread starts a span again
        except Exception:
            log_once("abort", "ending the open spans failed", exc_info=True)
    for stack in list(run.task_stacks):  # asyncio tasks' (their contexts are their own)
        try:
            while stack:
                stack.pop().abort(description, restore=False)
        except Exception:
            log_once("abort", "ending the open spans failed", exc_info=True)


def end_open_spans() -> None:
    """End every span this thread left open, innermost first (lifecycle ends, shutdown)."""
    stack = PROCESS.run.open_spans.stack
    while stack:
        stack[-1].close()
        stack.pop()


class StartedSpan:
    """A started span, current until ``end()``."""

    __slots__ = ("_handled", "_name", "_span", "_token")

    def __init__(
        self, span: Span, token: Token[Context], name: str, handled: BaseException | None
    ) -> None:
        self._span: Span | None = span
        self._token: Token[Context] | None = token
        self._name = name
        # The exception the caller was already handling at start: its end is not an error.
        self._handled = handled

    def set_attributes(self, attributes: Callable[[], Mapping[str, Any]]) -> None:
        """Evaluate ``attributes`` and set them on the span. Never raises."""
        span = self._span
        if span is None:
            return
        try:
            span.set_attributes(attributes())
        except Exception:
            warn_once(self._name, "evaluating attributes")

    def end(self) -> None:
        """Restore the previous context and end the span, recording an escaping exception.

        Spans started after this one and still open were left by an exception (the "flat" form
        has no ``finally``) or could not end at the recursion limit: they are ended first,
        innermost first. A span leaves the open-span stack only once it has ended, so one that
        finds no stack left to end in (instrumented code recursing to the limit) is ended by the
        next span that ends further up. Never raises; a second call does nothing.
        """
        if self._span is None:
            return
        run = PROCESS.run
        in_task = task_stack(run)  # this task's or this thread's, in the current run
        stack: list[Any] = run.open_spans.stack if in_task is None else in_task
        try:
            if stack and stack[-1] is self:  # the usual case: the innermost span ends
                self.close()
                stack.pop()
                return
            if any(s is self for s in stack):
                while stack[-1] is not self:
                    stack[-1].close()
                    stack.pop()
                self.close()
                stack.pop()
                return
        except IndexError:  # emptied meanwhile by abort_open_spans() (SIGTERM)
            pass
        except RecursionError:  # no stack left to end it here: it stays on the open-span stack
            return
        try:
            self.close()
        except RecursionError:
            pass

    def leave(self) -> None:
        """Stop being current and leave the open-span stack without ending: the span was handed
        over to a stream (``_streams.stream``), which ends it. Never raises."""
        if self._span is None:
            return
        try:
            run = PROCESS.run
            in_task = task_stack(run)
            stack: list[Any] = run.open_spans.stack if in_task is None else in_task
            if any(s is self for s in stack):
                while stack[-1] is not self:  # left open by an exception: ended as end() does
                    stack[-1].close()
                    stack.pop()
                stack.pop()
            token, self._token = self._token, None
            if token is not None:
                otel_context.detach(token)
        except Exception:
            warn_once(self._name, "handing the span over")

    def abort(self, description: str, restore: bool) -> None:
        """End this span with an ERROR status ``description``; restore the context only when
        ``restore`` (the span's own thread). Never raises."""
        span = self._span
        if span is None:
            return
        self._span = None
        try:
            if restore and self._token is not None:
                otel_context.detach(self._token)
        except Exception:
            pass
        try:
            span.set_status(Status(StatusCode.ERROR, description))
            span.end()
        except Exception:
            warn_once(self._name, "ending the span")

    def close(self) -> None:
        """End this span only, leaving the open-span stack alone.

        After interpreter shutdown began (a ``__del__`` at exit) the span is dropped: the
        providers are shut down, and the context and SDK would only log warnings. Raises only
        ``RecursionError`` (no stack left to end the span): what was done stays done, and a later
        call ends the span.
        """
        span = self._span
        if span is None:
            return
        if _is_finalizing():
            self._span = None
            return
        token = self._token
        if token is not None:
            try:
                otel_context.detach(token)
            except RecursionError:
                raise
            except Exception:
                warn_once(self._name, "restoring the context")
            self._token = None
        try:
            error = _exception()
            if error is not None and error is not self._handled:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                self._handled = error
        except RecursionError:
            raise
        except Exception:
            warn_once(self._name, "recording the exception")
        try:
            span.end()
        except RecursionError:
            raise
        except Exception:
            warn_once(self._name, "ending the span")
        self._span = None


def _parameters(name: str, fn: Callable[..., Any], attributes: Mapping[str, str]) -> _Parameters:
    """(attribute, parameter, position or None, default) for each attribute of ``traced``."""
    import inspect  # only when a function is decorated: it costs a few ms to import

    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    found = {p.name: (i, p) for i, p in enumerate(parameters)}
    out = []
    for key, parameter in attributes.items():
        if parameter not in found:
            log_once(f"traced:{name}:{key}", "span %r: no parameter %r", name, parameter)
            continue
        index, info = found[parameter]
        positional = info.kind in (info.POSITIONAL_ONLY, info.POSITIONAL_OR_KEYWORD)
        out.append((key, parameter, index if positional else None, info.default))
    return tuple(out)


def _arguments(
    parameters: _Parameters, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    values = {}
    for key, parameter, index, default in parameters:
        if parameter in kwargs:
            value = kwargs[parameter]
        elif index is not None and index < len(args):
            value = args[index]
        else:
            value = default
        if isinstance(value, (bool, int, float, str)):
            values[key] = value
    return values
