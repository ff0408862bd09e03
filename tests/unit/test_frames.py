"""frame_use: the first frame-sensitive construct of each kind, in source order."""

from __future__ import annotations

import textwrap

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from codegen.resolve.frames import FrameUse, frame_use


def _use(source: str, name: str = "f", qualified: str = "f") -> FrameUse:
    module = cst.parse_module(textwrap.dedent(source))
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    func = next(s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == name)
    where = (lambda n: positions[n].start.line, lambda n: positions[n].start.column)
    seen: dict[int, list[cst.Call]] = {}
    first = frame_use(func, qualified, *where, seen)
    assert frame_use(func, qualified, *where, seen) == first  # the cached walk gives the same answer
    return first


def test_nothing_found() -> None:
    assert _use("def f(x):\n    return g(x)\n") == FrameUse()


def test_first_in_source_order_not_tree_order() -> None:
    # IfExp's fields are test, body, orelse; the body comes first in the source
    use = _use(
        """\
        def f(c):
            return warnings.warn("b", stacklevel=2) if warnings.warn("a", stacklevel=3) else 0
        """
    )
    assert use.stacklevel == (2, "warnings.warn(..., stacklevel=2)")


def test_each_kind_and_nested_scopes_skipped() -> None:
    use = _use(
        """\
        def f(n):
            def inner():
                return locals()
            lam = lambda: sys._getframe(1)
            class C:
                x = vars()
            if n:
                print(vars())
            traceback.print_stack()
            return f(n - 1)
        """
    )
    assert use.locals_call == (8, "vars()")
    assert use.frames == (9, "traceback.print_stack(...)")
    assert use.recursion == (10, "f(...)")
    assert use.stacklevel is None


def test_outer_call_before_the_call_inside_it() -> None:
    use = _use("def f():\n    return warn(warn('x', Warning, 3), Warning, 2)\n")
    assert use.stacklevel == (2, "warn(..., stacklevel=2)")
