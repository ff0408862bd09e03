"""A wrap hook's call rewrite: ``f(a)`` -> ``f(wrapper(a))`` or ``wrapper("key", f(a))``."""

from __future__ import annotations

from typing import assert_never

import libcst as cst

from codegen.resolve.hooks import argument_index
from codegen.resolve.sites import Rewrite
from codegen.runtime_calls import bind
from codegen.spec.model import Runtime, WrapArgument, WrapResult


class CallRewriter(cst.CSTTransformer):
    """``f(a, b)`` -> ``f(wrapper(a), b)`` (argument) or ``wrapper("key", f(a, b))`` (result)."""

    def __init__(self, rewrite: Rewrite, runtime: Runtime) -> None:
        super().__init__()
        self.rewrite = rewrite
        self.runtime = runtime

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if original_node is not self.rewrite.call:
            return updated_node
        hook = self.rewrite.hook
        wrapper = cst.parse_expression(bind(hook.wrapper, self.runtime.alias, self.runtime.binding))
        match hook.target:
            case WrapArgument(argument=argument):
                args = list(updated_node.args)
                index = argument_index(updated_node, argument)
                assert index is not None  # checked when resolving
                arg = args[index]
                args[index] = arg.with_changes(value=cst.Call(func=wrapper, args=[cst.Arg(arg.value)]))
                return updated_node.with_changes(args=args)
            case WrapResult(key=key):
                comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                return cst.Call(
                    func=wrapper,
                    args=[cst.Arg(cst.SimpleString('"' + key + '"'), comma=comma), cst.Arg(updated_node)],
                )
            case _:
                assert_never(hook.target)
