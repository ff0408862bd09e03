"""Remove Megatron-LM's hand-written OpenTelemetry instrumentation (PR #6438) from a module,
recognised by its structure (never by a stored diff of upstream), so that the specs can instrument
the tree afresh (``codegen apply --replace-upstream``).

What it recognises (an *otel name* is an identifier with ``otel_`` at its start or after an
underscore, other than this generator's own ``_otel``/``_otel_span[_N]``, or one of the names in
``TELEMETRY_NAMES``; a *tainted* name is a private local bound from an otel expression: the ``as``
of a span context manager, ``_fb_cm = span_cm(...) if ... else nullcontext()``, a name imported from
``opentelemetry``/``nemo.lens``/the no-op fallbacks):

- ``with`` items that are otel context managers: removed, and a ``with`` left without items
  unwrapped (its body takes its place);
- decorators calling otel names (``@_otel_trace_fn(...)``);
- functions named by otel names (the ``_otel_*`` lifecycle helpers, SIGTERM/flush/drain/exit-hook
  helpers, ``_set_telemetry`` & friends of ``global_vars.py``);
- statements: imports from ``nemo.lens``/``opentelemetry``/``megatron.core.telemetry.fallbacks``
  and imported otel names; ``global`` otel names; assignments to otel or tainted names (module
  globals included) or to a subscript keyed by an otel string; calls of otel or tainted names;
  ``if`` statements gated on them (``_otel_sg_enabled(...)``); ``try`` statements left with an
  empty body, an empty ``finally`` or an ``except`` that only re-raises;
- #6438's additions to public functions (``PARAMETERS``): their parameters, the keyword arguments
  passing them, the ``_STARTUP_TIMESTAMPS`` keys and docstring entries naming them;
- the thread-context propagation (``X = contextvars.copy_context()`` and ``executor.submit(X.run,
  ...)``), and per entry script (``ENTRY_SCRIPTS``) the startup-timestamp registration;
- what the removals leave dead: a private variable (or local helper) that only removed code
  read, an import only removed code used, a public variable whose call result only removed code
  read (the call stays as a statement).

Anything else that names an otel name is an error located in the original file
(``path:line:col: error: ...``): an edited or unknown hand-written site is never left behind
silently, and never instrumented twice.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from codegen.layout import LINE_LENGTH, code_of
from codegen.runtime_calls import SPAN_VARIABLE_PATTERN
from codegen.strip.dead import names_in, remove_dead, statements_of
from codegen.upstream import UnrecognisedInstrumentation, candidate_files

_OTEL_NAME = re.compile(r"(?:^|_)otel_")
GENERATOR_NAMES = frozenset({"_otel", "otel"})
# #6438's names that do not say "otel": the telemetry handle and its set-up, the resource
# attributes, the span-tagging helper, nemo-lens's span context manager.
TELEMETRY_NAMES = frozenset(
    {
        "get_telemetry",
        "_set_telemetry",
        "_GLOBAL_TELEMETRY_HANDLE",
        "build_telemetry_resource_attrs",
        "_detect_gpu_identity",
        "_tag_current_span_call_idx",
        "span_cm",
    }
)
OTEL_MODULES = ("nemo.lens", "opentelemetry", "megatron.core.telemetry.fallbacks")
# Parameters #6438 added to existing public functions (and the dict keys naming them).
PARAMETERS: dict[str, frozenset[str]] = {
    "set_startup_timestamps": frozenset(
        {"launch_script_start", "launch_script_presrun", "slurm_job_start_time"}
    ),
    "_run_gpu_sniff_test": frozenset({"span_name"}),
}
DICT_KEYS: dict[str, frozenset[str]] = {"_STARTUP_TIMESTAMPS": PARAMETERS["set_startup_timestamps"]}
# Entry scripts where #6438 added the startup-timestamp registration the others already had.
ENTRY_SCRIPTS: dict[str, frozenset[str]] = {
    "pretrain_vlm.py": frozenset({"set_startup_timestamps", "_PROGRAM_START_TIME", "_MAIN_ENTRY_TIME"})
}
_DOC_BULLET = re.compile(r"^\s*-\s.*\btelemetry\b", re.IGNORECASE)


StripError = UnrecognisedInstrumentation  # one located line per site it does not recognise


def mentions_upstream(text: str) -> bool:
    """Whether ``text`` may hold something the strip removes (a quick test before parsing)."""
    return bool(
        re.search(r"otel_|nemo\.lens|opentelemetry|get_telemetry|contextvars\.copy_context", text)
        or any(name in text for name in TELEMETRY_NAMES)
        or any(re.search(rf"\b{p}\s*=", text) for params in PARAMETERS.values() for p in params)
    )


def is_otel_name(name: str, extra: Iterable[str] = ()) -> bool:
    if name in GENERATOR_NAMES or SPAN_VARIABLE_PATTERN.match(name):
        return False
    return bool(_OTEL_NAME.search(name)) or name in TELEMETRY_NAMES or name in extra


def _dotted(node: cst.BaseExpression | None) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def _otel_module(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in OTEL_MODULES)


def _root_name(node: cst.BaseExpression) -> str:
    while isinstance(node, (cst.Attribute, cst.Call, cst.Subscript)):
        node = node.func if isinstance(node, cst.Call) else node.value
    return node.value if isinstance(node, cst.Name) else ""


def _visible(scopes: dict[str, _Scope], stack: list[str]) -> set[str]:
    """The tainted names seen from the innermost scope of ``stack``: its own and its enclosing
    scopes' (a module-level import from nemo.lens is used inside functions)."""
    found: set[str] = set()
    for key in stack:
        scope = scopes.get(key)
        if scope is not None:
            found |= scope.tainted
    return found


@dataclass
class _Scope:
    name: str
    tainted: set[str] = field(default_factory=set)
    contexts: set[str] = field(default_factory=set)  # bound from contextvars.copy_context()


class _Scoped:
    """What the otel and tainted names are, seen from the innermost scope of ``stack``."""

    extra: frozenset[str]
    scopes: dict[str, _Scope]
    stack: list[str]

    def _scope(self) -> _Scope:
        return self.scopes.setdefault(self.stack[-1], _Scope(self.stack[-1]))

    def otel(self, node: cst.CSTNode) -> bool:
        return bool(self._otel_names(node))

    def _otel_names(self, node: cst.CSTNode) -> list[str]:
        tainted = _visible(self.scopes, self.stack)
        return sorted(n for n in names_in(node) if is_otel_name(n, self.extra) or n in tainted)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.stack.append(f"{self.stack[-1]}.{node.name.value}")


class _Taint(_Scoped, cst.CSTVisitor):
    """Private names bound from otel expressions, per function (run to a fixed point)."""

    def __init__(self, extra: frozenset[str], scopes: dict[str, _Scope]) -> None:
        self.extra = extra
        self.scopes = scopes
        self.stack = ["<module>"]
        self.grew = False

    def _add(self, name: str, contexts: bool = False) -> None:
        scope = self._scope()
        target = scope.contexts if contexts else scope.tainted
        if name not in target:
            target.add(name)
            self.grew = True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.stack.append(f"{self.stack[-1]}.{node.name.value}")
        params = PARAMETERS.get(node.name.value, frozenset())
        for param in params:
            self._add(param)

    def _leave(self, original_node: cst.FunctionDef | cst.ClassDef) -> None:
        self.stack.pop()

    leave_FunctionDef = leave_ClassDef = _leave

    def visit_Assign(self, node: cst.Assign) -> None:
        if (
            _dotted(node.value.func if isinstance(node.value, cst.Call) else None)
            == "contextvars.copy_context"
        ):
            for t in node.targets:
                if isinstance(t.target, cst.Name):
                    self._add(t.target.value, contexts=True)
                    self._add(t.target.value)
            return
        if self.otel(node.value):
            for t in node.targets:
                if isinstance(t.target, cst.Name) and t.target.value.startswith("_"):
                    self._add(t.target.value)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if self.otel(node.item) and node.asname is not None and isinstance(node.asname.name, cst.Name):
            self._add(node.asname.name.value)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        # what an import from nemo.lens/opentelemetry binds goes with the import, public or not
        module = _dotted(node.module) if node.module is not None else ""
        if _otel_module(module) and not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                bound = alias.asname.name if alias.asname is not None else alias.name
                if isinstance(bound, cst.Name):
                    self._add(bound.value)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            if _otel_module(_dotted(alias.name)):
                bound = alias.asname.name if alias.asname is not None else alias.name
                self._add(_dotted(bound).split(".")[0])


class _Stripper(_Scoped, cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(
        self, path: str, scopes: dict[str, _Scope], extra: frozenset[str], keep_signatures: bool
    ) -> None:
        super().__init__()
        self.path = path
        self.scopes = scopes
        self.extra = extra
        self.keep_signatures = keep_signatures
        self.stack = ["<module>"]
        self.errors: list[tuple[cst.CSTNode, str]] = []
        self.marks: dict[int, int] = {}  # statement (by id) -> how many errors when it was entered
        self.removed_reads: dict[str, set[str]] = {}  # scope -> names that removed code read
        self.changed: set[str] = set()  # scopes whose code changed
        self.assign_target: list[str] = []
        self.depth = 0  # indented blocks around the node at hand (4 columns each)
        self.args_removed: set[int] = set()  # calls that lost arguments (by id of the new node)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self.depth += 1

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        self.depth -= 1
        return updated_node

    def _fits(self, node: cst.CSTNode, extra: int = 0) -> bool:
        """Whether ``node`` is one line within black's 100 columns where it stands."""
        code = code_of(node).rstrip("\n")
        return "\n" not in code and 4 * self.depth + len(code) + extra <= LINE_LENGTH

    # -- helpers ---------------------------------------------------------------------------

    def removed(self, node: cst.CSTNode) -> None:
        self.removed_reads.setdefault(self.stack[-1], set()).update(names_in(node))
        self.changed.add(self.stack[-1])
        mark = self.marks.get(id(node))
        if mark is not None:  # errors inside code that goes as a whole are no errors
            del self.errors[mark:]

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.BaseStatement, cst.BaseSmallStatement)):
            self.marks[id(node)] = len(self.errors)
        return super().on_visit(node)

    def located_errors(self, module: cst.Module) -> list[str]:
        """``path:line:col: error: ...``, positions read only now (they cost a pass)."""
        positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        found = []
        for node, message in self.errors:
            start = positions[node].start
            found.append(
                ((start.line, start.column), f"{self.path}:{start.line}:{start.column + 1}: error: {message}")
            )
        return [m for _, m in sorted(found)]

    def unknown(self, original: cst.CSTNode, what: str) -> None:
        names = ", ".join(f"'{n}'" for n in self._otel_names(original))
        code = code_of(original).strip().splitlines()[0][:80]
        message = (
            f"hand-written OpenTelemetry code the --replace-upstream strip does not recognise "
            f"({what} using {names}): `{code}`; restore upstream's form of it, or remove it by hand"
        )
        self.errors.append((original, message))

    # -- scopes ----------------------------------------------------------------------------

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.stack.append(f"{self.stack[-1]}.{node.name.value}")

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        self.stack.pop()
        if any(self.otel(b) for b in (*original_node.bases, *original_node.keywords)):
            self.unknown(original_node, "a class statement")
        return updated_node

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef | cst.RemovalSentinel:
        inner = self.stack.pop()
        name = original_node.name.value
        if is_otel_name(name, self.extra):
            self.removed(original_node)
            return cst.RemovalSentinel.REMOVE
        decorators = [d for d in updated_node.decorators if not self.otel(d.decorator)]
        if len(decorators) != len(updated_node.decorators):
            self.changed.add(self.stack[-1])
            updated_node = updated_node.with_changes(decorators=decorators)
        params = PARAMETERS.get(name)
        if params and self.keep_signatures and not name.startswith("_"):
            params = None  # accepted as before, no longer read
        if params:
            kept = [p for p in updated_node.params.params if p.name.value not in params]
            if len(kept) != len(updated_node.params.params):
                if kept:
                    kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                updated_node = updated_node.with_changes(params=updated_node.params.with_changes(params=kept))
                joined = updated_node.with_changes(
                    params=updated_node.params.with_changes(params=_one_line(kept)),
                    whitespace_before_params=cst.SimpleWhitespace(""),
                )
                header = joined.with_changes(
                    body=cst.SimpleStatementSuite([cst.Pass()]), decorators=[], leading_lines=[]
                )
                if updated_node.returns is None and self._fits(header, extra=-len(" pass")):
                    updated_node = joined  # black joins what fits on one line
                self.changed.add(inner)
        if inner in self.changed:
            updated_node = _clean_docstring(updated_node, params or frozenset())
        return updated_node

    # -- compound statements ---------------------------------------------------------------

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        if self.otel(original_node.iter) or self.otel(original_node.target):
            self.unknown(original_node, "a for statement")
        return updated_node

    def leave_While(self, original_node: cst.While, updated_node: cst.While) -> cst.While:
        if self.otel(original_node.test):
            self.unknown(original_node, "a while statement")
        return updated_node

    def leave_ExceptHandler(
        self, original_node: cst.ExceptHandler, updated_node: cst.ExceptHandler
    ) -> cst.ExceptHandler:
        if original_node.type is not None and self.otel(original_node.type):
            self.unknown(original_node, "an except clause")
        return updated_node

    def leave_Param(self, original_node: cst.Param, updated_node: cst.Param) -> cst.Param:
        for part in (original_node.default, original_node.annotation):
            if part is not None and self.otel(part):
                self.unknown(original_node, "a parameter")
        return updated_node

    def leave_With(
        self, original_node: cst.With, updated_node: cst.With
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        items = [i for i in updated_node.items if not self.otel(i.item)]
        if len(items) == len(updated_node.items):
            if any(self.otel(i) for i in updated_node.items):
                self.unknown(original_node, "a with statement")
            return updated_node
        self.changed.add(self.stack[-1])
        for item in updated_node.items:
            if item not in items:
                self.removed(item)
        if items:
            items[-1] = items[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated_node.with_changes(items=items)
        body = list(statements_of(updated_node.body))
        if not body:
            return cst.RemovalSentinel.REMOVE
        return cst.FlattenSentinel(body)

    def leave_If(
        self, original_node: cst.If, updated_node: cst.If
    ) -> cst.BaseStatement | cst.RemovalSentinel:
        if self.otel(original_node.test):
            if updated_node.orelse is not None:
                self.unknown(original_node, "an if statement with an else branch gated")
                return updated_node
            self.removed(original_node)
            return cst.RemovalSentinel.REMOVE
        if not list(statements_of(updated_node.body)) and list(statements_of(original_node.body)):
            if updated_node.orelse is None:
                self.removed(original_node.test)
                return cst.RemovalSentinel.REMOVE
            self.unknown(original_node, "an if statement whose body was all telemetry")
        return updated_node

    def leave_Try(
        self, original_node: cst.Try, updated_node: cst.Try
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        body = list(statements_of(updated_node.body))
        if not body and list(statements_of(original_node.body)):
            trivial = (
                all(all(_is_pass(s) for s in statements_of(h.body)) for h in updated_node.handlers)
                and updated_node.finalbody is None
                and updated_node.orelse is None
            )
            if trivial:
                self.removed(original_node)
                return cst.RemovalSentinel.REMOVE
            self.unknown(original_node, "a try statement whose body was all telemetry")
            return updated_node
        changed = False
        finalbody = updated_node.finalbody
        if (
            finalbody is not None
            and original_node.finalbody is not None
            and not list(statements_of(finalbody.body))
            and list(statements_of(original_node.finalbody.body))
        ):
            finalbody = None
            changed = True
        handlers = []
        for new, old in zip(updated_node.handlers, original_node.handlers, strict=True):
            stmts = list(statements_of(new.body))
            if len(stmts) < len(list(statements_of(old.body))) and len(stmts) == 1 and _is_reraise(stmts[0]):
                changed = True
                continue
            handlers.append(new)
        if not changed:
            return updated_node
        self.changed.add(self.stack[-1])
        if not handlers and finalbody is None:
            if updated_node.orelse is not None:
                self.unknown(original_node, "a try statement with an else branch")
                return updated_node
            return cst.FlattenSentinel(body)
        return updated_node.with_changes(handlers=handlers, finalbody=finalbody)

    # -- simple statements -----------------------------------------------------------------

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target if len(node.targets) == 1 else None
        self.assign_target.append(target.value if isinstance(target, cst.Name) else "")

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        self.assign_target.pop()
        return updated_node

    def leave_Dict(self, original_node: cst.Dict, updated_node: cst.Dict) -> cst.Dict:
        keys = DICT_KEYS.get(self.assign_target[-1] if self.assign_target else "")
        if not keys:
            return updated_node
        elements = [
            e
            for e in updated_node.elements
            if not (
                isinstance(e, cst.DictElement)
                and isinstance(e.key, cst.SimpleString)
                and ast.literal_eval(e.key.value) in keys
            )
        ]
        if len(elements) != len(updated_node.elements):
            self.changed.add(self.stack[-1])
            return updated_node.with_changes(elements=elements)
        return updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        callee = updated_node.func
        name = (
            callee.value
            if isinstance(callee, cst.Name)
            else callee.attr.value
            if isinstance(callee, cst.Attribute)
            else ""
        )
        params = PARAMETERS.get(name, frozenset())
        contexts = self._scope().contexts
        args = []
        for arg in updated_node.args:
            if arg.keyword is not None and arg.keyword.value in params:
                self.removed(arg)
                continue
            if (
                arg.keyword is None
                and isinstance(arg.value, cst.Attribute)
                and isinstance(arg.value.value, cst.Name)
                and arg.value.value.value in contexts
                and arg.value.attr.value == "run"
            ):
                self.removed(arg)
                continue
            args.append(arg)
        if len(args) == len(updated_node.args):
            return updated_node
        if args:
            last = args[-1]
            if updated_node.args[-1].comma == cst.MaybeSentinel.DEFAULT or not isinstance(
                updated_node.args[-1].comma, cst.Comma
            ):
                args[-1] = last.with_changes(comma=cst.MaybeSentinel.DEFAULT)
        new = updated_node.with_changes(args=args)
        self.args_removed.add(id(new))
        return new

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        kept: list[cst.BaseSmallStatement] = []
        for old, new in zip(original_node.body, updated_node.body, strict=True):
            result = self._small(old, new)
            if result is not None:
                kept.append(result)
        if not kept:
            return cst.RemovalSentinel.REMOVE
        if len(kept) != len(updated_node.body):
            kept[-1] = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        if len(kept) == 1 and isinstance(kept[0], cst.Expr) and id(kept[0].value) in self.args_removed:
            call = kept[0].value
            assert isinstance(call, cst.Call)
            joined = call.with_changes(
                args=_one_line(list(call.args)), whitespace_before_args=cst.SimpleWhitespace("")
            )
            candidate = cst.SimpleStatementLine([kept[0].with_changes(value=joined)])
            if self._fits(candidate):
                kept = [kept[0].with_changes(value=joined)]
        return updated_node.with_changes(body=kept)

    def _small(
        self, old: cst.BaseSmallStatement, new: cst.BaseSmallStatement
    ) -> cst.BaseSmallStatement | None:
        if isinstance(new, cst.ImportFrom):
            module = _dotted(new.module) if new.module is not None else ""
            if _otel_module(module):
                self.removed(old)
                return None
            return self._aliases(new)
        if isinstance(new, cst.Import):
            if all(_otel_module(_dotted(a.name)) for a in new.names):
                self.removed(old)
                return None
            return self._aliases(new)
        if isinstance(new, (cst.Global, cst.Nonlocal)):
            names = [n for n in new.names if not self.otel(n.name)]
            if len(names) == len(new.names):
                return new
            self.removed(old)
            if not names:
                return None
            names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return new.with_changes(names=names)
        if not self.otel(new):
            return new
        if isinstance(new, cst.Assign):
            targets = [t.target for t in new.targets]
            if all(isinstance(t, cst.Name) and self.otel(t) for t in targets):
                self.removed(old)
                return None
            if all(
                isinstance(t, cst.Subscript)
                and any(isinstance(e.slice, cst.Index) and _otel_string(e.slice.value) for e in t.slice)
                for t in targets
            ):
                self.removed(old)
                return None
        if isinstance(new, (cst.AugAssign, cst.AnnAssign)) and self.otel(new.target):
            self.removed(old)
            return None
        if isinstance(new, cst.Expr) and isinstance(new.value, cst.Call):
            root = _root_name(new.value.func)
            if root and (is_otel_name(root, self.extra) or root in _visible(self.scopes, self.stack)):
                self.removed(old)
                return None
        self.unknown(old, "a statement")
        return new

    def _aliases(self, node: cst.Import | cst.ImportFrom) -> cst.Import | cst.ImportFrom | None:
        if isinstance(node.names, cst.ImportStar):
            return node
        kept = []
        for alias in node.names:
            bound = alias.asname.name if alias.asname is not None else alias.name
            if isinstance(bound, cst.Name) and is_otel_name(bound.value, self.extra):
                self.removed(alias)
                continue
            kept.append(alias)
        if len(kept) == len(node.names):
            return node
        if not kept:
            return None
        if not (isinstance(node, cst.ImportFrom) and node.lpar is not None):
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return node.with_changes(names=kept)
        joined = node.with_changes(names=_one_line(kept), lpar=None, rpar=None)
        if self._fits(cst.SimpleStatementLine([joined])):
            return joined  # black joins what fits on one line
        return node.with_changes(names=kept)


def _one_line(items: list[Any]) -> list[Any]:
    """Parameters, arguments or import names laid out on one line: ``a, b, c``."""
    out = []
    for k, item in enumerate(items):
        comma = (
            cst.MaybeSentinel.DEFAULT
            if k == len(items) - 1
            else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        )
        changes: dict[str, Any] = {"comma": comma}
        if isinstance(item, cst.Param):
            changes["whitespace_after_param"] = cst.SimpleWhitespace("")
        if isinstance(item, cst.Arg):
            changes["whitespace_after_arg"] = cst.SimpleWhitespace("")
        out.append(item.with_changes(**changes))
    return out


def _otel_string(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.SimpleString) and "otel" in node.value


def _is_pass(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, cst.Pass) for s in stmt.body)


def _is_reraise(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Raise)
        and stmt.body[0].exc is None
    )


def _clean_docstring(func: cst.FunctionDef, params: frozenset[str]) -> cst.FunctionDef:
    """Drop docstring bullets about telemetry and ``Args:`` entries of removed parameters."""
    body = func.body
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return func
    first = body.body[0]
    if not (
        isinstance(first, cst.SimpleStatementLine)
        and len(first.body) == 1
        and isinstance(first.body[0], cst.Expr)
        and isinstance(first.body[0].value, cst.SimpleString)
    ):
        return func
    string = first.body[0].value
    lines = string.value.split("\n")
    out: list[str] = []
    skipping: int | None = None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if skipping is not None:
            if line.strip() and indent > skipping:
                continue
            skipping = None
        match = re.match(r"\s*(\w+):", line)
        if match and match.group(1) in params:
            skipping = indent
            continue
        if _DOC_BULLET.match(line):
            continue
        out.append(line)
    if out == lines:
        return func
    new_string = string.with_changes(value="\n".join(out))
    new_first = first.with_changes(body=[first.body[0].with_changes(value=new_string)])
    return func.with_changes(body=body.with_changes(body=[new_first, *body.body[1:]]))


def strip_upstream(module: cst.Module, path: str, keep_signatures: bool = False) -> cst.Module:
    """``module`` (the file at ``path`` relative to the tree's root) without #6438's hand-written
    instrumentation; :class:`StripError` listing every site it does not recognise. With
    ``keep_signatures`` the public functions keep the parameters #6438 added (``PARAMETERS``),
    accepted and no longer read: for the import-time package, whose served modules are called by
    the tree's entry scripts as #6438 wrote them (``pretrain_hybrid.py`` passes them)."""
    extra = ENTRY_SCRIPTS.get(path, frozenset())
    scopes: dict[str, _Scope] = {}
    while True:
        taint = _Taint(extra, scopes)
        module.visit(taint)
        if not taint.grew:
            break
    stripper = _Stripper(path, scopes, extra, keep_signatures)
    result = module.visit(stripper)
    if stripper.errors:
        raise StripError(stripper.located_errors(module))
    if not stripper.changed:
        return module
    return remove_dead(result, stripper.removed_reads)


def strip_tree(root: Path, runtime_package: str, keep_signatures: bool = False) -> dict[str, tuple[str, str]]:
    """Every file of the tree at ``root`` that the strip changes: relative path -> (its text, the
    text stripped). :class:`StripError` lists every site not recognised, in every file.
    ``keep_signatures``: as :func:`strip_upstream`."""
    changed: dict[str, tuple[str, str]] = {}
    errors: list[str] = []
    runtime = (root / runtime_package).resolve()
    for path in candidate_files(root):
        if path.resolve().is_relative_to(runtime):
            continue
        rel = path.relative_to(root).as_posix()
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if rel not in ENTRY_SCRIPTS and not mentions_upstream(text):
            continue
        try:
            module = cst.parse_module(text)
        except cst.ParserSyntaxError as exc:
            errors.append(f"{rel}:{exc.raw_line}:{exc.raw_column + 1}: error: cannot parse it: {exc.message}")
            continue
        try:
            stripped = strip_upstream(module, rel, keep_signatures).code
        except UnrecognisedInstrumentation as exc:
            errors.extend(exc.lines)
            continue
        stripped = without_telemetry_comments(stripped) if stripped != text else stripped
        if stripped != text:
            changed[rel] = (text, stripped)
    if errors:
        raise UnrecognisedInstrumentation(errors)
    return changed


# A comment about the hand-written telemetry: it names OpenTelemetry, a span group, a span of its
# own, what is left unspanned, or a span name of #6438's (megatron.startup/train/checkpoint). On
# Megatron-LM main d98e8a64dd no comment outside #6438's matches (tests/upstream/test_main_size.py).
TELEMETRY_COMMENT = re.compile(
    r"\botel\b|opentelemetry|unspanned|span group|own span|save spans?\b"
    r"|\bmegatron\.(?:startup|train|checkpoint)\b",
    re.IGNORECASE,
)


def without_telemetry_comments(text: str) -> str:
    """``text`` without the blocks of whole-line comments (consecutive ``#`` lines) of which one
    line is about the telemetry (``TELEMETRY_COMMENT``), in a file whose hand-written telemetry
    was stripped: what is left explains code that is gone. A blank line the block sat between
    two of goes with it."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not lines[i].lstrip().startswith("#"):
            out.append(lines[i])
            i += 1
            continue
        end = i
        while end < len(lines) and lines[end].lstrip().startswith("#"):
            end += 1
        if not any(TELEMETRY_COMMENT.search(line) for line in lines[i:end]):
            out.extend(lines[i:end])
        elif end < len(lines) and not lines[end].strip() and (not out or not out[-1].strip()):
            end += 1
        i = end
    return "".join(out)
