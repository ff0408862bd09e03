"""Safe YAML loading that keeps the line and column of every node."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from codegen.diagnostics import Diagnostics, Pos

Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class YScalar:
    value: Scalar
    pos: Pos


@dataclass(frozen=True)
class YSeq:
    items: tuple[YNode, ...]
    pos: Pos


@dataclass(frozen=True)
class YMap:
    # key text -> (key position, value); insertion order is the file order
    entries: dict[str, tuple[Pos, YNode]]
    pos: Pos

    def get(self, key: str) -> YNode | None:
        entry = self.entries.get(key)
        return entry[1] if entry else None

    def key_pos(self, key: str) -> Pos:
        return self.entries[key][0]

    def value(self, key: str) -> YNode:
        """The value of ``key`` (present: the caller has checked ``key in entries``)."""
        return self.entries[key][1]

    def value_pos(self, key: str) -> Pos:
        """Where the value of ``key`` (present: the caller has read it) starts."""
        return self.entries[key][1].pos


YNode = YScalar | YSeq | YMap


def _pos(path: str, node: yaml.Node) -> Pos:
    return Pos(path, node.start_mark.line + 1, node.start_mark.column + 1)


def load_yaml(path: str, text: str, diags: Diagnostics) -> YNode | None:
    """Parse one YAML document; syntax errors and duplicate keys are reported, not raised."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        diags.error(Pos(path, line, col), f"invalid YAML: {exc.problem or exc.context}")
        return None
    finally:
        loader.dispose()
    if root is None:
        return YMap({}, Pos(path, 1, 1))
    return _convert(path, root, loader, diags, set())


def _convert(
    path: str, node: yaml.Node, loader: yaml.SafeLoader, diags: Diagnostics, open_: set[int]
) -> YNode:
    if id(node) in open_:
        diags.error(_pos(path, node), "an alias refers to a node that contains it (a recursive structure)")
        return YScalar(None, _pos(path, node))
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        open_ = open_ | {id(node)}
    if isinstance(node, yaml.MappingNode):
        entries: dict[str, tuple[Pos, YNode]] = {}
        for key_node, value_node in node.value:
            key_pos = _pos(path, key_node)
            if not isinstance(key_node, yaml.ScalarNode):
                diags.error(key_pos, "mapping keys must be plain strings")
                continue
            key = str(key_node.value)
            if key in entries:
                diags.error(key_pos, f"duplicate key '{key}' (first at line {entries[key][0].line})")
                continue
            entries[key] = (key_pos, _convert(path, value_node, loader, diags, open_))
        return YMap(entries, _pos(path, node))
    if isinstance(node, yaml.SequenceNode):
        return YSeq(
            tuple(_convert(path, item, loader, diags, open_) for item in node.value), _pos(path, node)
        )
    assert isinstance(node, yaml.ScalarNode)
    try:
        value = loader.construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        diags.error(_pos(path, node), f"invalid scalar: {exc}")
        value = None
    if not isinstance(value, (str, int, float, bool, type(None))):
        value = str(node.value)  # timestamps and other implicit types stay text
    return YScalar(value, _pos(path, node))
