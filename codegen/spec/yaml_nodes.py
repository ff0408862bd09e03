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


MAX_DEPTH = 64  # a spec needs about 8 levels
MAX_NODES = 50_000  # aliases of aliases can expand a small file exponentially


class _Refused(Exception):
    def __init__(self, pos: Pos, message: str) -> None:
        super().__init__(message)
        self.pos = pos
        self.message = message


def load_yaml(path: str, text: str, diags: Diagnostics) -> YNode | None:
    """Parse one YAML document; syntax errors and duplicate keys are reported, not raised.

    Hostile text is reported too: control characters (a binary file), nesting deeper than
    :data:`MAX_DEPTH`, aliases expanding to more than :data:`MAX_NODES` nodes.
    """
    try:
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:  # the reader checks the whole text first
        diags.error(_reader_pos(path, text, exc.position), _reader_message(exc))
        return None
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        diags.error(Pos(path, line, col), f"invalid YAML: {exc.problem or exc.context}")
        return None
    except yaml.reader.ReaderError as exc:
        diags.error(_reader_pos(path, text, exc.position), _reader_message(exc))
        return None
    except RecursionError:  # PyYAML composes recursively: find where the nesting gets too deep
        diags.error(_too_deep(path, text), f"nested deeper than {MAX_DEPTH} levels: not a spec file")
        return None
    finally:
        loader.dispose()
    if root is None:
        return YMap({}, Pos(path, 1, 1))
    try:
        return _convert(path, root, loader, diags, set(), [0])
    except _Refused as exc:
        diags.error(exc.pos, exc.message)
        return None


def _reader_pos(path: str, text: str, position: int) -> Pos:
    before = text[:position]
    return Pos(path, before.count("\n") + 1, position - (before.rfind("\n") + 1) + 1)


def _reader_message(exc: yaml.reader.ReaderError) -> str:
    what = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
    return f"a control character ({what}) is not allowed in YAML: not a spec file"


_OPEN = (
    yaml.BlockSequenceStartToken,
    yaml.BlockMappingStartToken,
    yaml.FlowSequenceStartToken,
    yaml.FlowMappingStartToken,
)
_CLOSE = (yaml.BlockEndToken, yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken)


def _too_deep(path: str, text: str) -> Pos:
    """Where the collections of ``text`` first nest deeper than MAX_DEPTH (the scanner is iterative)."""
    depth = 0
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, _OPEN):
            depth += 1
            if depth > MAX_DEPTH:
                return Pos(path, token.start_mark.line + 1, token.start_mark.column + 1)
        elif isinstance(token, _CLOSE):
            depth -= 1
    return Pos(path, 1, 1)


def _convert(
    path: str, node: yaml.Node, loader: yaml.SafeLoader, diags: Diagnostics, open_: set[int], count: list[int]
) -> YNode:
    if id(node) in open_:
        diags.error(_pos(path, node), "an alias refers to a node that contains it (a recursive structure)")
        return YScalar(None, _pos(path, node))
    count[0] += 1
    if count[0] > MAX_NODES:
        raise _Refused(_pos(path, node), f"aliases expand to more than {MAX_NODES} nodes: not a spec file")
    if len(open_) >= MAX_DEPTH:
        raise _Refused(_pos(path, node), f"nested deeper than {MAX_DEPTH} levels: not a spec file")
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
            try:
                entries[key] = (key_pos, _convert(path, value_node, loader, diags, open_, count))
            except _Refused as exc:
                if len(open_) > 1 or count[0] <= MAX_NODES:
                    raise
                raise _Refused(key_pos, f"'{key}': {exc.message}") from None  # the top-level entry
        return YMap(entries, _pos(path, node))
    if isinstance(node, yaml.SequenceNode):
        return YSeq(
            tuple(_convert(path, item, loader, diags, open_, count) for item in node.value), _pos(path, node)
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
