"""A span handed over to a streamed response: ``stream(span, iterable)``.

A stream span's call site reads ``Response(_otel.stream(_otel_span, openai_stream(...)))``: the
function returns while the response is still to be produced, and the span goes with it. From the
hand-over the span is the stream's: the function's ``finally:`` (``_otel_span.end()``) only takes
it off the current context and the open-span stack, and the iterable returned here ends it, exactly
once, when it is exhausted (the span as it is), when iterating it raises (an ERROR status and the
exception; ``asyncio.CancelledError`` too: the client went away), when it is closed before its end
(``aclose()``/``close()``: an ERROR status, ``stream closed before its end``), or when it is
garbage-collected unfinished (``stream abandoned``). While the stream produces an item the span is
the current one, so what records then (a foreign span, a stamp) is its child. A stream that answers
an inference server's request (``_genai``) records the request's time to first token at its first
item and the request's duration at its end.

In a coroutine instrumented in the decorator form (``traced``) the call site reads
``_otel.stream(openai_stream(...))``: the span handed over is the traced coroutine's.

If the function raises after the hand-over (the stream is never returned), its ``finally:`` ends
the span then, with that error. With the span's group off ``_otel_span`` is False and the
iterable itself is returned: the response is the uninstrumented one.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, cast

from . import _genai
from ._lean_span import LeanSpan
from ._spans import TRACED, StartedSpan
from ._state import warn_once

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # opentelemetry is optional: no span is ever handed over without it
    pass

_exc_info = sys.exc_info
_exception: Callable[[], BaseException | None] = getattr(sys, "exception", lambda: _exc_info()[1])
_is_finalizing = sys.is_finalizing
_Cancelled = asyncio.CancelledError
_TRACED: Any = object()  # stream()'s second argument absent: the traced coroutine's span


class _HandedLean(LeanSpan):
    """A ``LeanSpan`` handed over to a stream: its call site's ``end()`` only leaves."""

    __slots__ = ()

    def end(self, end_time: int | None = None) -> None:
        """Leave (the stream ends the span), or end now if the function raised after all."""
        self.__class__ = cast(Any, LeanSpan)  # no longer handed over
        error = _exception()
        # the function failed after all (a LeanSpan sets _handled only when its caller was
        # handling an exception at its start)
        if error is not None and error is not getattr(self, "_handled", None):
            self.end(end_time)
        else:
            self.leave()


class _HandedStarted(StartedSpan):
    """A ``StartedSpan`` (the SDK path) handed over to a stream: its ``end()`` only leaves."""

    __slots__ = ()

    def end(self) -> None:
        """Leave (the stream ends the span), or end now if the function raised after all."""
        self.__class__ = cast(Any, StartedSpan)
        error = _exception()
        if error is not None and error is not self._handled:
            self.end()
        else:
            self.leave()


def stream(span: Any, iterable: Any = _TRACED) -> Any:
    """``iterable`` (an async iterable, or an iterable) that ends ``span`` when it ends, or
    ``iterable`` itself when ``span`` is not a span (its group off: False; not started: None).
    ``stream(iterable)`` (a stream call site in a ``traced`` coroutine, the decorator form): the
    span of that coroutine. Never raises."""
    if iterable is _TRACED:
        span, iterable = TRACED.get(), span
    if not span:
        return iterable
    try:
        target: Any = span
        if type(span) is LeanSpan:
            span.hand_over()  # spans opened before it leaves do not go on top of it inline
            span.__class__ = _HandedLean
        elif type(span) is StartedSpan:
            span.__class__ = _HandedStarted
            target = span._span
        else:
            return iterable
        if hasattr(iterable, "__aiter__"):
            return _AsyncStream(span, target, iterable)
        return _Stream(span, target, iter(iterable))
    except Exception:
        warn_once(getattr(span, "_name", "?"), "handing the span over to a stream")
        return iterable


class _Ending:
    """What both kinds of stream share: the span, and its one end."""

    __slots__ = ("_first", "_open", "_request", "_span", "_target")

    def __init__(self, span: Any, target: Any) -> None:
        self._span = span  # what the call site holds: ended by end()
        self._target = target  # the API span: made current while an item is produced
        self._open = True
        self._request = _genai.stream_request()  # the inference request it answers, if any
        self._first = self._request is not None  # its time to first token still to record

    def _item(self) -> None:
        """An item produced: the request's first chunk is its time to first token."""
        request = self._request
        if self._first and request is not None:
            self._first = False
            _genai.stream_chunk(request)

    def _end(self, error: BaseException | None = None, description: str | None = None) -> None:
        """End the span once: with ``error`` (recorded) or an ERROR ``description``. Never
        raises."""
        if not self._open:
            return
        self._open = False
        request = self._request
        # closed, abandoned or cancelled before its end: the client went away, no response
        if request is not None and description is None and not isinstance(error, _Cancelled):
            _genai.stream_end(request, error)
        span = self._span
        try:
            if type(span) is not LeanSpan and type(span) is not StartedSpan:
                span.__class__ = span.__class__.__mro__[1]  # still handed: its function is running
                span.leave()
            target = self._target
            if error is not None:
                target.record_exception(error)
                target.set_status(Status(StatusCode.ERROR, type(error).__name__))
            elif description is not None:
                target.set_status(Status(StatusCode.ERROR, description))
            if type(span) is LeanSpan:
                span._handled = _exception()  # recorded above, or not an error of the stream
                span.end()
            else:
                span._handled = _exception()
                span.close()
        except Exception:
            if not _is_finalizing():
                warn_once(getattr(span, "_name", "?"), "ending the streamed span")

    def _enter(self) -> Any:
        try:
            return otel_context.attach(otel_trace.set_span_in_context(self._target))
        except Exception:
            return None

    @staticmethod
    def _exit(token: Any) -> None:
        if token is not None:
            try:
                otel_context.detach(token)
            except Exception:
                pass

    def __del__(self) -> None:
        if self._open:
            self._end(description="stream abandoned")


class _AsyncStream(_Ending):
    """An async iterable that ends its span when it ends."""

    __slots__ = ("_inner", "_iterator")

    def __init__(self, span: Any, target: Any, inner: Any) -> None:
        super().__init__(span, target)
        self._inner = inner
        self._iterator: AsyncIterator[Any] | None = None

    def __aiter__(self) -> _AsyncStream:
        return self

    async def __anext__(self) -> Any:
        if self._iterator is None:
            self._iterator = self._inner.__aiter__()
        token = self._enter()
        try:
            item = await self._iterator.__anext__()
        except StopAsyncIteration:
            self._end()
            raise
        except BaseException as error:  # CancelledError included: the client went away
            self._end(error)
            raise
        finally:
            self._exit(token)
        self._item()
        return item

    async def aclose(self) -> None:
        """Close the stream (and what it wraps, when it can be closed)."""
        try:
            close = getattr(self._iterator or self._inner, "aclose", None)
            if close is not None:
                await close()
        finally:
            self._end(description="stream closed before its end")


class _Stream(_Ending):
    """An iterator that ends its span when it ends."""

    __slots__ = ("_iterator",)

    def __init__(self, span: Any, target: Any, iterator: Iterator[Any]) -> None:
        super().__init__(span, target)
        self._iterator = iterator

    def __iter__(self) -> _Stream:
        return self

    def __next__(self) -> Any:
        token = self._enter()
        try:
            item = next(self._iterator)
        except StopIteration:
            self._end()
            raise
        except BaseException as error:
            self._end(error)
            raise
        finally:
            self._exit(token)
        self._item()
        return item

    def close(self) -> None:
        """Close the stream (and what it wraps, when it can be closed)."""
        try:
            close = getattr(self._iterator, "close", None)
            if close is not None:
                close()
        finally:
            self._end(description="stream closed before its end")
