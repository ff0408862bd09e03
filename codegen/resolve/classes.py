"""The instance attributes of a class, following its bases through imports into the source tree
(``codegen/resolve/expressions.py`` checks ``self.X`` in spec expressions against them): class
bodies, ``self.X = ...`` in methods, ``register_buffer``/``register_parameter``/``add_module``/
``setattr`` with a literal name; bases outside the tree are known (``torch_names``) or make an
unknown attribute a warning."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.helpers import get_full_name_for_node

from codegen.layout import code_of
from codegen.resolve.statements import assigned_names, child_blocks
from codegen.resolve.torch_names import KNOWN_BASES, REGISTERING
from codegen.resolve.walk import bound_targets, walk
from codegen.strip.hostile import parse_module

MAX_DEPTH = 12  # bases followed through the tree, at most


@dataclass
class ClassFacts:
    """What is known of a class's instance attributes."""

    attributes: set[str] = field(default_factory=set)
    unknown: list[str] = field(default_factory=list)  # why some may be missing (bases, setattr)


class Classes:
    """Instance attributes of classes, following bases through imports into the source tree."""

    def __init__(self, root: Path, trees: dict[str, cst.Module | None]) -> None:
        self.root = root
        self.trees = trees  # path relative to the root -> parsed module (None: not in the tree)
        self.memo: dict[tuple[str, str], ClassFacts] = {}

    def facts(self, path: str, module: cst.Module, classdef: cst.ClassDef, depth: int = 0) -> ClassFacts:
        key = (path, classdef.name.value)
        if key in self.memo:
            return self.memo[key]
        facts = ClassFacts()
        self.memo[key] = facts  # a cycle ends here
        facts.attributes |= _own_attributes(classdef, facts.unknown)
        for base in classdef.bases:
            if base.keyword is not None:
                continue
            value = base.value.value if isinstance(base.value, cst.Subscript) else base.value
            dotted = get_full_name_for_node(value)
            if dotted is None:
                facts.unknown.append(f"its base {code_of(base.value)} is not a name")
                continue
            self._base(path, module, dotted, facts, depth)
        return facts

    def _base(self, path: str, module: cst.Module, dotted: str, facts: ClassFacts, depth: int) -> None:
        resolved = self._resolve(path, module, dotted, depth)
        if isinstance(resolved, str):
            known = KNOWN_BASES.get(resolved)
            if known is None:
                facts.unknown.append(f"its base {resolved} is outside the source tree")
            else:
                facts.attributes |= known
            return
        if resolved is None:
            facts.unknown.append(f"its base {dotted} could not be found")
            return
        base_path, base_module, base_class = resolved
        base_facts = self.facts(base_path, base_module, base_class, depth + 1)
        facts.attributes |= base_facts.attributes
        facts.unknown.extend(u for u in base_facts.unknown if u not in facts.unknown)

    def _resolve(
        self, path: str, module: cst.Module, dotted: str, depth: int
    ) -> tuple[str, cst.Module, cst.ClassDef] | str | None:
        """The class ``dotted`` names in ``module``: in the tree, or the qualified name of one
        outside it; None when it cannot be found."""
        if depth > MAX_DEPTH:
            return None
        head, _, rest = dotted.partition(".")
        bindings = _top_level_bindings(module, _package(path))
        bound = bindings.get(head)
        if bound is None:
            if not rest and dotted in ("object",):
                return "builtins.object"
            return None
        if isinstance(bound, cst.ClassDef):
            return (path, module, bound) if not rest else None
        qualified = f"{bound}.{rest}" if rest else bound
        return self._qualified(qualified, depth + 1)

    def _qualified(self, qualified: str, depth: int) -> tuple[str, cst.Module, cst.ClassDef] | str | None:
        module_name, _, name = qualified.rpartition(".")
        if not module_name:
            return qualified
        loaded = self._module(module_name)
        if loaded is None:
            return qualified
        path, module = loaded
        return self._resolve(path, module, name, depth)

    def _module(self, dotted: str) -> tuple[str, cst.Module] | None:
        base = dotted.replace(".", "/")
        for rel in (f"{base}.py", f"{base}/__init__.py"):
            if rel not in self.trees:
                file = self.root / rel
                try:
                    self.trees[rel] = (
                        parse_module(file.read_text(encoding="utf-8")) if file.is_file() else None
                    )
                except (OSError, UnicodeDecodeError, cst.ParserSyntaxError):
                    self.trees[rel] = None
            tree = self.trees[rel]
            if tree is not None:
                return rel, tree
        return None


def _package(path: str) -> str:
    parts = path[: -len(".py")].split("/")
    return ".".join(parts[:-1])


def _top_level_bindings(module: cst.Module, package: str) -> dict[str, cst.ClassDef | str]:
    """Names bound at the top level (also under ``if``/``try``): a class defined here, or the
    qualified name an import binds. The first binding wins."""
    out: dict[str, cst.ClassDef | str] = {}

    def walk(body: Sequence[cst.BaseStatement]) -> None:
        for stmt in body:
            if isinstance(stmt, cst.ClassDef):
                out.setdefault(stmt.name.value, stmt)
            elif isinstance(stmt, (cst.If, cst.Try)):
                for child in _child_bodies(stmt):
                    walk(child)
            elif isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                        source = _import_source(small, package)
                        for alias in small.names:
                            name = get_full_name_for_node(alias.name) or ""
                            local = _asname(alias) or name
                            out.setdefault(local, f"{source}.{name}")
                    elif isinstance(small, cst.Import):
                        for alias in small.names:
                            name = get_full_name_for_node(alias.name) or ""
                            if _asname(alias):
                                out.setdefault(_asname(alias) or name, name)
                            else:
                                out.setdefault(name.partition(".")[0], name.partition(".")[0])

    walk(module.body)
    return out


def _child_bodies(stmt: cst.If | cst.Try) -> Iterator[Sequence[cst.BaseStatement]]:
    """The statements of each block of an ``if`` (elif/else) or ``try`` (handlers, else)."""
    for block in child_blocks(stmt):
        if isinstance(block, cst.IndentedBlock):
            yield block.body
        elif isinstance(block, cst.SimpleStatementSuite):  # `if X: import y` on one line
            yield [cst.SimpleStatementLine(block.body)]


def _import_source(node: cst.ImportFrom, package: str) -> str:
    module = get_full_name_for_node(node.module) if node.module is not None else ""
    dots = len(node.relative)
    if not dots:
        return module or ""
    parts = package.split(".") if package else []
    base = parts[: len(parts) - (dots - 1)] if dots > 1 else parts
    return ".".join([*base, module] if module else base)


def _own_attributes(classdef: cst.ClassDef, unknown: list[str]) -> set[str]:
    """Names the class body binds, and ``self.X`` its methods assign or register."""
    attrs: set[str] = set()
    name = classdef.name.value
    if not isinstance(classdef.body, cst.IndentedBlock):
        return attrs
    for stmt in classdef.body.body:
        attrs |= _bound_by(stmt)
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value in ("__getattr__", "__getattribute__"):
            unknown.append(f"{name} defines {stmt.name.value}")
    for func in _methods(classdef.body.body):
        params = func.params.posonly_params or func.params.params
        if not params or not _instance_method(func):
            continue
        self_name = params[0].name.value
        for node in walk(func):
            if not isinstance(node, _ASSIGNING_TYPES):
                continue
            if not isinstance(node, cst.Call):
                attrs |= {
                    t.attr.value
                    for t in bound_targets(node)
                    if isinstance(t, cst.Attribute)
                    and isinstance(t.value, cst.Name)
                    and t.value.value == self_name
                }
                continue
            callee = get_full_name_for_node(node.func) or ""
            literal = _first_string(node, 1 if callee == "setattr" else 0)
            if callee == "setattr" and node.args and get_full_name_for_node(node.args[0].value) == self_name:
                if literal is None:
                    unknown.append(f"{name} sets attributes with setattr()")
                else:
                    attrs.add(literal)
            elif (
                callee.startswith(f"{self_name}.")
                and callee.rpartition(".")[2] in REGISTERING
                and literal is not None
            ):
                attrs.add(literal)
    return attrs


def _methods(body: Sequence[cst.BaseStatement]) -> Iterator[cst.FunctionDef]:
    """The functions a class body defines (also under ``if``/``try``)."""
    for stmt in body:
        if isinstance(stmt, cst.FunctionDef):
            yield stmt
        elif isinstance(stmt, (cst.If, cst.Try)):
            for child in _child_bodies(stmt):
                yield from _methods(child)


_ASSIGNING_TYPES = (cst.Call, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For, cst.WithItem, cst.NamedExpr)


def _bound_by(stmt: cst.BaseStatement) -> set[str]:
    """Names a class-body statement binds (defs, classes, assignments, imports)."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return {stmt.name.value}
    names: set[str] = set()
    if isinstance(stmt, cst.SimpleStatementLine):
        names |= assigned_names(stmt)
        for small in stmt.body:
            if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(
                small.names, cst.ImportStar
            ):
                for alias in small.names:
                    full = get_full_name_for_node(alias.name) or ""
                    names.add(_asname(alias) or full.partition(".")[0])
    elif isinstance(stmt, (cst.If, cst.Try)):
        for body in _child_bodies(stmt):
            for child in body:
                names |= _bound_by(child)
    return names


def _asname(alias: cst.ImportAlias) -> str | None:
    return get_full_name_for_node(alias.asname.name) if alias.asname is not None else None


def _first_string(call: cst.Call, index: int) -> str | None:
    if len(call.args) <= index:
        return None
    value = call.args[index].value
    if isinstance(value, cst.SimpleString):
        evaluated = value.evaluated_value
        return evaluated if isinstance(evaluated, str) else None
    return None


def _instance_method(func: cst.FunctionDef) -> bool:
    names = {get_full_name_for_node(d.decorator) for d in func.decorators}
    return not names & {"staticmethod", "classmethod"}
