"""Static checks of the Python expressions a spec inserts into instrumented functions.

Span ``attributes``, ``when`` and ``name_expr`` run where the span starts, ``end_attributes`` where
its statements end; hook payloads (``call``, ``record``, ``stamp``, ``enter``, ``exit``, a wrap's
``with``) run where the hook is placed. Each free name of such an expression (found by libcst's
scope analysis of the expression itself) must be bound at that point of the function, by libcst's
scope analysis of the target module: a parameter or a local assigned before the point, a name of
an enclosing function, a module global or import, a builtin, or the runtime's alias. A local that
is only assigned after the point is an error too (it would be unbound when the expression runs).

``self.X`` (the first parameter of the method, however it is named) is checked against the
attributes the class and its bases assign or define: their class bodies, ``self.X = ...`` in their
methods, ``register_buffer``/``register_parameter``/``add_module``/``setattr`` with a literal name.
Bases are followed through the module and its imports into the source tree. When a base is
outside the tree (other than ``object``, ``abc.ABC``, ``typing.Generic``/``Protocol`` and
``torch.nn.Module``, whose attributes are known), or a class sets attributes dynamically, an unknown
attribute is a warning (it cannot be known), else an error. Errors name the close matches.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node
from libcst.metadata import (
    Assignment,
    BaseAssignment,
    ClassScope,
    FunctionScope,
    MetadataWrapper,
    Scope,
    ScopeProvider,
)

from codegen.diagnostics import Diagnostics, Pos
from codegen.resolve.hostile import parse_module
from codegen.resolve.sites import FilePlan
from codegen.resolve.statements import assigned_names, child_blocks
from codegen.spec.model import Hook, Span

# The attributes of torch.nn.Module (torch 2.13: ``dir(torch.nn.Module) | vars(torch.nn.Module())``,
# dunders left out: every dunder passes).
NN_MODULE_ATTRIBUTES = frozenset(
    [
        "T_destination",
        "_apply",
        "_backward_hooks",
        "_backward_pre_hooks",
        "_buffers",
        "_call_impl",
        "_compiled_call_impl",
        "_forward_hooks",
        "_forward_hooks_always_called",
        "_forward_hooks_with_kwargs",
        "_forward_pre_hooks",
        "_forward_pre_hooks_with_kwargs",
        "_get_backward_hooks",
        "_get_backward_pre_hooks",
        "_get_name",
        "_is_full_backward_hook",
        "_load_from_state_dict",
        "_load_state_dict_post_hooks",
        "_load_state_dict_pre_hooks",
        "_maybe_warn_non_full_backward_hook",
        "_modules",
        "_named_members",
        "_non_persistent_buffers_set",
        "_parameters",
        "_register_load_state_dict_pre_hook",
        "_register_state_dict_hook",
        "_replicate_for_data_parallel",
        "_save_to_state_dict",
        "_slow_forward",
        "_state_dict_hooks",
        "_state_dict_pre_hooks",
        "_version",
        "_wrapped_call_impl",
        "add_module",
        "apply",
        "bfloat16",
        "buffers",
        "call_super_init",
        "children",
        "compile",
        "cpu",
        "cuda",
        "double",
        "dump_patches",
        "eval",
        "extra_repr",
        "float",
        "forward",
        "get_buffer",
        "get_extra_state",
        "get_parameter",
        "get_submodule",
        "half",
        "ipu",
        "load_state_dict",
        "modules",
        "mtia",
        "named_buffers",
        "named_children",
        "named_modules",
        "named_parameters",
        "parameters",
        "register_backward_hook",
        "register_buffer",
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_full_backward_hook",
        "register_full_backward_pre_hook",
        "register_load_state_dict_post_hook",
        "register_load_state_dict_pre_hook",
        "register_module",
        "register_parameter",
        "register_state_dict_post_hook",
        "register_state_dict_pre_hook",
        "requires_grad_",
        "set_extra_state",
        "set_submodule",
        "share_memory",
        "state_dict",
        "to",
        "to_empty",
        "train",
        "training",
        "type",
        "xpu",
        "zero_grad",
    ]
)
# Bases outside the source tree whose attributes are known.
KNOWN_BASES: dict[str, frozenset[str]] = {
    "builtins.object": frozenset(),
    "abc.ABC": frozenset(),
    "typing.Generic": frozenset(),
    "typing.Protocol": frozenset(),
    "torch.nn.Module": NN_MODULE_ATTRIBUTES,
    "torch.nn.modules.module.Module": NN_MODULE_ATTRIBUTES,
}
# Calls on ``self`` that register an attribute under a literal name (the first argument).
REGISTERING = frozenset({"register_buffer", "register_parameter", "add_module", "register_module"})
MAX_DEPTH = 12  # bases followed through the tree, at most


@dataclass(frozen=True)
class Expression:
    """One spec expression and where it runs: before ``at``'s start or after its end."""

    text: str
    what: str
    pos: Pos
    function: cst.FunctionDef
    at: cst.CSTNode
    after: bool


@dataclass
class ClassFacts:
    """What is known of a class's instance attributes."""

    attributes: set[str] = field(default_factory=set)
    unknown: list[str] = field(default_factory=list)  # why some may be missing (bases, setattr)


def check_expressions(
    plan: FilePlan,
    alias: str,
    source_root: Path,
    diags: Diagnostics,
    trees: dict[str, cst.Module | None],
    lines: Callable[[cst.CSTNode, bool], int],
) -> None:
    """Report every free name of the plan's expressions that is not bound where it runs.

    ``trees`` caches the modules parsed to follow base classes (path -> module, None when not in
    the tree); ``lines(node, end)`` is the line a node of ``plan.module`` starts (or ends) on."""
    expressions = list(_expressions(plan, alias))
    if not expressions:
        return
    # Scope analysis costs about a parse per module: run it on the module with every top-level
    # def and class that holds no checked expression reduced to a stub (its name still bound).
    # Positions there only order statements of the checked functions; lines come from the plan.
    functions = {id(e.function): e.function for e in expressions}
    originals: dict[int, cst.ClassDef] = {}  # id(reduced class) -> the class in plan.module
    reduced = _reduced(plan.module, set(functions), originals)
    scopes = MetadataWrapper(reduced, unsafe_skip_copy=True).resolve(ScopeProvider)
    positions: dict[int, _Order] = {}
    for key, func in functions.items():
        positions[key] = _Order()
        func.visit(positions[key])
    classes = _Classes(source_root, trees)
    checker = _Checker(plan, alias, scopes, positions, classes, diags, lines, originals)
    for expression in expressions:
        checker.check(expression)


def _reduced(module: cst.Module, functions: set[int], originals: dict[int, cst.ClassDef]) -> cst.Module:
    """``module`` with the body of each def or class (at the top level or in a kept class) that
    contains none of ``functions`` and declares no ``global`` replaced by ``...``; the kept nodes
    are the original ones."""
    return module.with_changes(body=_reduced_body(module.body, functions, originals))


def _reduced_body(
    body: Sequence[cst.BaseStatement], functions: set[int], originals: dict[int, cst.ClassDef]
) -> list[cst.BaseStatement]:
    stub = cst.IndentedBlock([cst.SimpleStatementLine([cst.Expr(cst.Ellipsis())])])
    out: list[cst.BaseStatement] = []
    for stmt in body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and not _needed(stmt, functions):
            stmt = stmt.with_changes(body=stub)
        elif isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock):
            original = stmt
            block = stmt.body.with_changes(body=_reduced_body(stmt.body.body, functions, originals))
            stmt = stmt.with_changes(body=block)
            originals[id(stmt)] = original
        out.append(stmt)
    return out


def _needed(stmt: cst.BaseStatement, functions: set[int]) -> bool:
    """Whether ``stmt`` holds one of ``functions`` or a ``global`` declaration (statements only
    are walked, which is much cheaper than visiting every node)."""
    stack: list[cst.BaseStatement | cst.BaseSmallStatement] = [stmt]
    while stack:
        node = stack.pop()
        if id(node) in functions or isinstance(node, cst.Global):
            return True
        if isinstance(node, cst.SimpleStatementLine):
            stack.extend(node.body)
        elif isinstance(node, cst.BaseCompoundStatement):
            for block in child_blocks(node):
                stack.extend(block.body)
    return False


def _expressions(plan: FilePlan, alias: str) -> Iterator[Expression]:
    for wrap in plan.wraps:
        first, last, entry, func = (
            wrap.block.body[wrap.start],
            wrap.block.body[wrap.end - 1],
            wrap.entry,
            wrap.function,
        )
        if isinstance(entry, Span):
            for attr in entry.attributes:
                yield Expression(attr.expr, f"attribute '{attr.key}'", attr.pos, func, first, False)
            if entry.when:
                yield Expression(entry.when, "when", entry.when_pos or entry.pos, func, first, False)
            if entry.name_expr:
                yield Expression(
                    entry.name_expr, "name_expr", entry.name_expr_pos or entry.pos, func, first, False
                )
            for attr in entry.end_attributes:
                yield Expression(attr.expr, f"end attribute '{attr.key}'", attr.pos, func, last, True)
        else:
            if entry.enter:
                yield Expression(entry.enter, "enter", entry.enter_pos or entry.pos, func, first, False)
            if entry.exit:
                yield Expression(entry.exit, "exit", entry.exit_pos or entry.pos, func, last, True)
    for insert in plan.inserts:
        hook = insert.hook
        if hook.call is None:
            continue
        body = insert.block.body
        at, after = (body[insert.index], False) if insert.index < len(body) else (body[-1], True)
        yield Expression(hook.call, _payload(hook), hook.call_pos or hook.pos, insert.function, at, after)
    for rewrite in plan.rewrites:
        hook = rewrite.hook
        if hook.wrapper:
            yield Expression(
                hook.wrapper, "with", hook.call_pos or hook.pos, rewrite.function, rewrite.statement, False
            )


def _payload(hook: Hook) -> str:
    text = hook.call or ""
    if ".record_metrics(lambda" in text:
        return "record"
    if ".set_current_attributes(lambda" in text:
        return "stamp"
    return "call"


class _Order(cst.CSTVisitor):
    """Source order of a function's nodes: a node starts before everything it contains, and
    ends after it (cheaper than positions, which render the code)."""

    def __init__(self) -> None:
        super().__init__()
        self.start: dict[int, int] = {}
        self.end: dict[int, int] = {}
        self.count = 0

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.start[id(node)] = self.count
        self.count += 1
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.end[id(original_node)] = self.count


@dataclass(frozen=True)
class _Free:
    name: str
    attributes: tuple[str, ...]  # X of every ``name.X`` in the expression


def free_names(text: str) -> list[_Free] | None:
    """The names ``text`` reads without binding them itself (not builtins), with the attributes
    read from each; None when libcst cannot parse it."""
    try:
        module = cst.parse_module(text.strip() + "\n")
    except cst.ParserSyntaxError:
        return None
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    scopes = wrapper.resolve(ScopeProvider)
    free: dict[str, list[cst.CSTNode]] = {}
    for scope in {s for s in scopes.values() if s is not None}:
        for access in scope.accesses:
            if not access.referents and isinstance(access.node, cst.Name):
                free.setdefault(access.node.value, []).append(access.node)
    out = []
    for name, nodes in free.items():
        ids = {id(n) for n in nodes}
        attrs = tuple(
            dict.fromkeys(
                a.attr.value
                for a in m.findall(module, m.Attribute(value=m.Name(name)))
                if isinstance(a, cst.Attribute) and id(a.value) in ids
            )
        )
        out.append(_Free(name, attrs))
    return sorted(out, key=lambda f: f.name)


class _Checker:
    def __init__(
        self,
        plan: FilePlan,
        alias: str,
        scopes: Mapping[cst.CSTNode, Scope | None],
        positions: dict[int, _Order],
        classes: _Classes,
        diags: Diagnostics,
        lines: Callable[[cst.CSTNode, bool], int],
        originals: dict[int, cst.ClassDef],
    ) -> None:
        self.lines = lines
        self.originals = originals
        self.plan = plan
        self.alias = alias
        self.scopes = scopes
        self.positions = positions
        self.classes = classes
        self.diags = diags

    def _order(self, func: cst.FunctionDef, node: cst.CSTNode, after: bool = False) -> int:
        """Where ``node`` (inside ``func``) starts, or ends with ``after``, in source order."""
        order = self.positions[id(func)]
        return order.end[id(node)] if after else order.start[id(node)]

    def check(self, expr: Expression) -> None:
        free = free_names(expr.text)
        if free is None:
            return
        body = expr.function.body
        assert isinstance(body, cst.IndentedBlock)
        scope = self.scopes[body.body[0]]
        assert isinstance(scope, Scope)
        point = self._order(expr.function, expr.at, expr.after)
        func = expr.function.name.value
        for item in free:
            if item.name == self.alias:
                continue
            assignments = scope[item.name]
            local = [a for a in assignments if a.scope is scope]
            if not assignments:
                hint = self._hint(item.name, expr.function, scope, point)
                self.diags.error(
                    expr.pos,
                    f"{expr.what}: '{item.name}' is not defined in {func} "
                    f"({self.plan.path} line {self.lines(expr.at, expr.after)}){hint}",
                )
                continue
            if local and not any(self._before(expr.function, a, point) for a in local):
                first = min(self.lines(a.node, False) for a in local if isinstance(a, Assignment))
                self.diags.error(
                    expr.pos,
                    f"{expr.what}: '{item.name}' is assigned in {func} only after this point "
                    f"({self.plan.path} line {self.lines(expr.at, expr.after)}; first assigned at line {first}): "
                    "it would be unbound",
                )
                continue
            if item.attributes:
                self._check_self(expr, item, assignments)

    def _before(self, func: cst.FunctionDef, assignment: object, point: int) -> bool:
        if not isinstance(assignment, Assignment):
            return True
        return self._order(func, assignment.node) < point

    def _hint(self, name: str, func: cst.FunctionDef, scope: Scope, point: int) -> str:
        """Close matches among the names visible at ``point`` (class bodies are not)."""
        visible = {self.alias}
        visible |= {a.name for a in scope.assignments if self._before(func, a, point)}
        current = scope.parent
        while current is not None:
            if not isinstance(current, ClassScope):
                visible |= {a.name for a in current.assignments}
            if current is current.parent:
                break
            current = current.parent
        hint = _did_you_mean(name, visible)
        if hint:
            return hint
        local = sorted({a.name for a in scope.assignments if self._before(func, a, point)})
        if not local:
            return ""
        shown = ", ".join(local[:12]) + (", ..." if len(local) > 12 else "")
        return f"; bound there: {shown} (and the module's names)"

    def _check_self(self, expr: Expression, item: _Free, assignments: Collection[BaseAssignment]) -> None:
        """``name.X`` where ``name`` is the first parameter of a method: X must be an attribute."""
        found = list(assignments)
        if (
            len(found) != 1
            or not isinstance(found[0], Assignment)
            or not isinstance(found[0].node, cst.Param)
        ):
            return
        method_scope = found[0].scope
        if not isinstance(method_scope, FunctionScope) or not isinstance(method_scope.parent, ClassScope):
            return
        method = method_scope.node
        if not isinstance(method, cst.FunctionDef) or not _is_instance_method(method):
            return
        params = method.params.posonly_params or method.params.params
        if not params or params[0] is not found[0].node:
            return
        classdef = self.originals.get(id(method_scope.parent.node), method_scope.parent.node)
        assert isinstance(classdef, cst.ClassDef)
        facts = self.classes.facts(self.plan.path, self.plan.module, classdef)
        for attr in item.attributes:
            if attr in facts.attributes or (attr.startswith("__") and attr.endswith("__")):
                continue
            where = f"{item.name}.{attr}"
            if facts.unknown:
                self.diags.warning(
                    expr.pos,
                    f"{expr.what}: cannot check '{where}': {classdef.name.value} is not assigned '{attr}' "
                    f"in the source tree, but {'; '.join(facts.unknown)}",
                )
            else:
                self.diags.error(
                    expr.pos,
                    f"{expr.what}: '{where}' is not an attribute of {classdef.name.value} or its bases"
                    f"{_did_you_mean(attr, facts.attributes)}",
                )


def _is_instance_method(func: cst.FunctionDef) -> bool:
    names = {get_full_name_for_node(d.decorator) for d in func.decorators}
    return not names & {"staticmethod", "classmethod"}


def _did_you_mean(name: str, candidates: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(candidates), n=3, cutoff=0.7)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


class _Classes:
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
                facts.unknown.append(f"its base {cst.Module([]).code_for_node(base.value)} is not a name")
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
        if not params or not _is_instance_method(func):
            continue
        self_name = params[0].name.value
        for node in m.findall(func, m.Call() | _ASSIGNING):
            if not isinstance(node, cst.Call):
                attrs |= {
                    t.attr.value
                    for t in _targets(node)
                    if isinstance(t, cst.Attribute) and m.matches(t.value, m.Name(self_name))
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


_ASSIGNING = m.Assign() | m.AnnAssign() | m.AugAssign() | m.For() | m.WithItem() | m.NamedExpr()


def _targets(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The targets an assigning node (=, +=, annotated, for, with, :=) binds, tuples unpacked."""
    if isinstance(node, cst.Assign):
        targets: list[cst.CSTNode] = [t.target for t in node.targets]
    elif isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.For, cst.NamedExpr)):
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
