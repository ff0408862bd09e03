"""Functions whose behaviour depends on their own frame, which a span form would change.

- The inline forms (``try``, ``flat``) add a local variable (``_otel_span``): a function that calls
  ``locals()`` or ``vars()`` would see it (and return it, log it, pickle it).
- The decorator form calls the function through the runtime's wrapper, one frame deeper: a
  ``warnings.warn(..., stacklevel=2)`` (or ``logging``'s ``stacklevel``) is attributed to the
  wrapper instead of the caller, ``sys._getframe(1)``/``inspect.stack()`` see the wrapper, and a
  recursive function reaches the recursion limit at a fraction of its depth.

:func:`frame_refusal` says why a span's form cannot be used on such a function, and what to do.
Nested functions, lambdas and classes have frames of their own and are not looked into.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst
from libcst.helpers import get_full_name_for_node

from codegen.layout import code_of
from codegen.resolve.walk import walk
from codegen.runtime_calls import SPAN_VARIABLE
from codegen.spec.model import Hook, Span

# Calls that look at the caller's frames (their results change one frame deeper).
_FRAME_CALLS = frozenset(
    {
        "sys._getframe",
        "_getframe",
        "inspect.currentframe",
        "currentframe",
        "inspect.stack",
        "inspect.getouterframes",
        "traceback.extract_stack",
        "traceback.print_stack",
        "traceback.format_stack",
    }
)
_WARN_CALLS = frozenset({"warnings.warn", "warn"})  # stacklevel is the third positional argument


@dataclass
class FrameUse:
    """The first line of each frame-sensitive construct in a function (None: there is none)."""

    locals_call: tuple[int, str] | None = None  # (line, "locals()")
    stacklevel: tuple[int, str] | None = None  # (line, "warnings.warn(..., stacklevel=2)")
    frames: tuple[int, str] | None = None  # (line, "sys._getframe(...)")
    recursion: tuple[int, str] | None = None  # (line, "name(...)")


class _Finder:
    def __init__(self, func: cst.FunctionDef, qualified: str, line_of: Callable[[cst.CSTNode], int]) -> None:
        self.func = func
        self.name = func.name.value
        self.method = "." in qualified
        self.line_of = line_of
        self.use = FrameUse()

    def visit_Call(self, node: cst.Call) -> None:
        name = get_full_name_for_node(node.func) or ""
        use = self.use
        if name in ("locals", "vars") and not node.args and use.locals_call is None:
            use.locals_call = (self.line_of(node), f"{name}()")
        if use.stacklevel is None:
            level = next((a.value for a in node.args if a.keyword and a.keyword.value == "stacklevel"), None)
            if level is None and name in _WARN_CALLS and len(node.args) >= 3 and node.args[2].keyword is None:
                level = node.args[2].value
            if level is not None and not (isinstance(level, cst.Integer) and level.evaluated_value <= 1):
                shown = code_of(level)
                use.stacklevel = (self.line_of(node), f"{name}(..., stacklevel={shown})")
        if name in _FRAME_CALLS and use.frames is None:
            use.frames = (self.line_of(node), f"{name}(...)")
        if use.recursion is None and self._calls_itself(node.func):
            use.recursion = (self.line_of(node), f"{name}(...)")

    def _calls_itself(self, callee: cst.BaseExpression) -> bool:
        if not self.method:
            return isinstance(callee, cst.Name) and callee.value == self.name
        return (
            isinstance(callee, cst.Attribute)
            and callee.attr.value == self.name
            and isinstance(callee.value, cst.Name)
            and callee.value.value in ("self", "cls")
        )


# Nodes with a frame of their own: not looked into (neither their defaults nor their decorators).
_OWN_FRAME = (cst.FunctionDef, cst.Lambda, cst.ClassDef)


def _calls(func: cst.FunctionDef, seen: dict[int, list[cst.Call]] | None) -> list[cst.Call]:
    """``_walk_calls``, once per function with a ``seen`` cache (several spans often name the same
    one; keyed by ``id``: the caller keeps the tree alive while it uses the cache)."""
    if seen is None:
        return _walk_calls(func)
    calls = seen.get(id(func))
    if calls is None:
        calls = seen[id(func)] = _walk_calls(func)
    return list(calls)


def _walk_calls(func: cst.FunctionDef) -> list[cst.Call]:
    """The calls in ``func``'s own frame, parents before their children (``walk``: libcst's
    ``visit`` rebuilds every node it passes, which made this check cost more than parsing)."""
    own_frame = walk(func, prune=lambda node: isinstance(node, _OWN_FRAME))
    return [node for node in own_frame if isinstance(node, cst.Call)]


def frame_use(
    func: cst.FunctionDef,
    qualified: str,
    line_of: Callable[[cst.CSTNode], int],
    column_of: Callable[[cst.CSTNode], int],
    seen: dict[int, list[cst.Call]] | None = None,
) -> FrameUse:
    """What ``func`` does with its frame; each construct the first in source order."""
    calls = _calls(func, seen)
    # A first pass without line numbers: most functions use none of it, and line numbers cost a
    # position pass over the whole file.
    finder = _Finder(func, qualified, lambda node: 0)
    for call in calls:
        finder.visit_Call(call)
    if finder.use == FrameUse():
        return finder.use
    finder = _Finder(func, qualified, line_of)
    # source order (a stable sort: a call before the calls inside it that start where it starts)
    calls.sort(key=lambda call: (line_of(call), column_of(call)))
    for call in calls:
        finder.visit_Call(call)
    return finder.use


_INLINE = "use form: try (the default) or form: flat, which call it in its own frame"


def frame_refusal(
    entry: Span | Hook,
    func: cst.FunctionDef,
    line_of: Callable[[cst.CSTNode], int],
    column_of: Callable[[cst.CSTNode], int],
    seen: dict[int, list[cst.Call]] | None = None,
) -> str | None:
    """Why ``entry``'s form would change what ``func`` does with its frame, and what to do; or None."""
    if not isinstance(entry, Span):
        return None  # hooks add neither a local variable nor a frame
    use = frame_use(func, entry.function, line_of, column_of, seen)
    if entry.form == "decorator":
        if use.stacklevel is not None:
            line, code = use.stacklevel
            return (
                f"its {code} (line {line}) names a caller by its depth, and the decorator form's "
                f"wrapper would be that caller: {_INLINE}"
            )
        if use.frames is not None:
            line, code = use.frames
            return (
                f"it inspects the call stack ({code}, line {line}), which the decorator form's wrapper "
                f"would change: {_INLINE}"
            )
        if use.recursion is not None:
            line, code = use.recursion
            return (
                f"it calls itself ({code}, line {line}): the decorator form's wrapper adds a frame to "
                f"every call, so it would reach the recursion limit sooner: {_INLINE}"
            )
        return None
    if use.locals_call is not None:
        line, code = use.locals_call
        decorator_fits = (
            (entry.region is None or entry.region.kind == "function")
            and use.stacklevel is None
            and use.frames is None
            and use.recursion is None
        )
        what = (
            "use form: decorator, which adds no local variable"
            if decorator_fits
            else "instrument a function that does not call it (its caller, or the calls it makes)"
        )
        return f"it calls {code} (line {line}), which would include the span's local variable {SPAN_VARIABLE}: {what}"
    return None
