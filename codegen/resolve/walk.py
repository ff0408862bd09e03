"""A fast walk over a libcst tree, for the questions resolution asks of every node of a function
(the code of a node is ``codegen.layout.code_of``).

libcst's ``visit`` rebuilds every node it passes (its visitors are also transformers) and its
matchers add a dispatch per node: measured on megatron's ``training.py``, a no-op ``visit`` costs
about as much as parsing the file, this walk a fifth of it. It reads the dataclass fields that can
hold code (names, expressions, statements), not the ones that only hold layout (whitespace,
parentheses, commas), in declaration order (source order for everything resolution compares).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import libcst as cst

# Fields that only hold layout: whitespace, brackets, separators, comments, operators.
_LAYOUT = frozenset(
    {
        "asynchronous",
        "colon",
        "comma",
        "comment",
        "default_indent",
        "default_newline",
        "dot",
        "empty_lines",
        "encoding",
        "equal",
        "first_colon",
        "footer",
        "header",
        "indent",
        "lbrace",
        "lbracket",
        "leading_lines",
        "lines_after_decorators",
        "lpar",
        "newline",
        "operator",
        "posonly_ind",
        "rbrace",
        "rbracket",
        "relative",
        "rpar",
        "second_colon",
        "semicolon",
        "trailing_comma",
        "trailing_whitespace",
    }
)
_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(kind: type) -> tuple[str, ...]:
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(
            f.name
            for f in dataclasses.fields(kind)
            if f.name not in _LAYOUT and not f.name.startswith("whitespace")
        )
    return names


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The nodes directly inside ``node`` that can hold code, in source order."""
    out: list[cst.CSTNode] = []
    for name in _fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            out.append(value)
        elif type(value) is tuple or type(value) is list:
            out.extend(v for v in value if isinstance(v, cst.CSTNode))
    return out


def walk(node: cst.CSTNode, prune: Callable[[cst.CSTNode], bool] | None = None) -> Iterator[cst.CSTNode]:
    """``node`` and every node inside it, depth first; ``prune(n)`` true: ``n`` is yielded but
    not entered (``node`` itself is always entered)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if prune is not None and current is not node and prune(current):
            continue
        inner = children(current)
        inner.reverse()
        stack.extend(inner)


def bound_targets(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The targets an assigning node (=, +=, annotated, for, comprehension for, with, :=) binds,
    tuples unpacked."""
    if isinstance(node, cst.Assign):
        targets: list[cst.CSTNode] = [t.target for t in node.targets]
    elif isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.NamedExpr)):
        targets = [node.target]
    elif isinstance(node, cst.WithItem) and node.asname is not None:
        targets = [node.asname.name]
    else:
        return
    while targets:
        target = targets.pop()
        if isinstance(target, (cst.Tuple, cst.List)):
            targets.extend(e.value for e in target.elements)
        elif isinstance(target, cst.StarredElement):
            targets.append(target.value)
        else:
            yield target


def nested_scope(node: cst.CSTNode) -> bool:
    """A node whose body runs in its own scope, later or never: a def or a lambda."""
    return isinstance(node, (cst.FunctionDef, cst.Lambda))
