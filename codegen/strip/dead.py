"""What removing #6438's instrumentation leaves dead (``strip/upstream.py``): private functions,
assignments and conditions that only the removed code read, and module imports nothing reads any
more; removed in rounds until nothing changes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import libcst as cst


def remove_dead(module: cst.Module, removed_reads: Mapping[str, set[str]]) -> cst.Module:
    """``module`` without what only removed code read (``removed_reads``: per scope, the names the
    removed code read)."""
    seeds = {k: set(v) for k, v in removed_reads.items()}
    every = {n for names in seeds.values() for n in names}
    for _ in range(20):
        reads = _Reads()
        module.visit(reads)
        dead = _Dead(reads.reads, seeds, every)
        module = module.visit(dead)
        if not dead.changed:
            break
    return module


def names_in(node: cst.CSTNode) -> set[str]:
    """Every identifier read or written in ``node`` (attribute names and keywords excluded)."""
    found: set[str] = set()

    class _V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)
            return False

        def visit_Arg(self, n: cst.Arg) -> bool:
            n.value.visit(self)
            return False

    node.visit(_V())
    return found


def statements_of(block: cst.BaseSuite) -> Iterable[cst.BaseStatement]:
    if isinstance(block, cst.IndentedBlock):
        return block.body
    if isinstance(block, cst.SimpleStatementSuite) and block.body:
        return [cst.SimpleStatementLine(block.body)]
    return []


class _Reads(cst.CSTVisitor):
    """Per scope, every name read anywhere inside it (nested scopes included)."""

    def __init__(self) -> None:
        self.stack = ["<module>"]
        self.reads: dict[str, set[str]] = {}

    def _note(self, name: str) -> None:
        for k in range(1, len(self.stack) + 1):
            self.reads.setdefault(".".join(self.stack[:k]), set()).add(name)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.stack.append(node.name.value)  # its own name is not a read
        for part in (*node.decorators, node.params, node.body, node.returns):
            if part is not None:
                part.visit(self)
        self.stack.pop()
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.stack.append(node.name.value)
        for part in (*node.decorators, *node.bases, *node.keywords, node.body):
            part.visit(self)
        self.stack.pop()
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        return not isinstance(node.target, cst.Name)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        if node.default is not None:
            node.default.visit(self)
        return False

    def visit_ImportAlias(self, node: cst.ImportAlias) -> bool:
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self._note(node.value)


class _Dead(cst.CSTTransformer):
    """Remove what only removed code read (one round; run until nothing changes)."""

    def __init__(self, reads: dict[str, set[str]], seeds: dict[str, set[str]], every_seed: set[str]) -> None:
        super().__init__()
        self.reads = reads
        self.seeds = seeds
        self.every_seed = every_seed
        self.stack = ["<module>"]
        self.changed = False

    def _key(self) -> str:
        return ".".join(self.stack)

    def _dead(self, name: str) -> bool:
        key = self._key()
        seeds = self.seeds.get(key, set())
        reads = self.reads.get(self._key(), set())
        return name in seeds and name not in reads

    def _seed(self, node: cst.CSTNode) -> None:
        names = names_in(node)
        self.seeds.setdefault(self._key(), set()).update(names)
        self.every_seed.update(names)
        self.changed = True

    def _seeded_within(self) -> bool:
        key = self._key()
        return any(k == key or k.startswith(key + ".") for k, names in self.seeds.items() if names)

    def _enter(self, node: cst.FunctionDef | cst.ClassDef) -> bool:
        self.stack.append(node.name.value)
        return self._seeded_within()  # nothing can die where nothing was removed

    visit_FunctionDef = visit_ClassDef = _enter

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        self.stack.pop()
        return updated_node

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef | cst.RemovalSentinel:
        self.stack.pop()
        name = original_node.name.value
        if name.startswith("_") and self._dead(name):
            self._seed(original_node)
            return cst.RemovalSentinel.REMOVE
        return updated_node

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If | cst.RemovalSentinel:
        if updated_node.orelse is None and not list(statements_of(updated_node.body)):
            self._seed(original_node.test)
            return cst.RemovalSentinel.REMOVE
        return updated_node

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        if len(updated_node.body) != 1:
            return updated_node
        small = updated_node.body[0]
        if isinstance(small, cst.Assign) and all(isinstance(t.target, cst.Name) for t in small.targets):
            names = [t.target.value for t in small.targets if isinstance(t.target, cst.Name)]
            if all(self._dead(n) for n in names):
                self._seed(small.value)
                if all(n.startswith("_") for n in names) or not isinstance(small.value, cst.Call):
                    return cst.RemovalSentinel.REMOVE
                return updated_node.with_changes(body=[cst.Expr(small.value)])
        if isinstance(small, cst.Import) and len(self.stack) == 1:
            kept = [
                a
                for a in small.names
                if not (
                    (a.evaluated_alias or a.evaluated_name).split(".")[0] in self.every_seed
                    and (a.evaluated_alias or a.evaluated_name).split(".")[0]
                    not in self.reads.get("<module>", set())
                )
            ]
            if not kept:
                self.changed = True
                return cst.RemovalSentinel.REMOVE
        return updated_node
