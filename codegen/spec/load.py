"""Turn a directory of YAML spec files into a validated :class:`Project`.

Everything that can be checked without the Megatron sources is checked here: keys, types, group
and preset names, attribute expressions, duplicate spans. Problems are collected, never raised one
at a time, so a run reports all of them.
"""

from __future__ import annotations

from pathlib import Path

from codegen.diagnostics import Diagnostics, Pos, SpecError
from codegen.spec import fields
from codegen.spec.attributes import AttributeReader
from codegen.spec.hooks import HookReader
from codegen.spec.model import LifecycleSpan, Project, Span, SpanForm, version_key
from codegen.spec.releases import ReleasesReader
from codegen.spec.settings import SettingsReader
from codegen.spec.spans import SpanReader
from codegen.spec.yaml_nodes import YMap, YNode, YScalar, YSeq, load_yaml
from codegen.upstream import UpstreamPin

# Top-level keys of a spec file that are the file's own; every other one only one spec file of a
# project may declare.
PER_FILE_KEYS = ("file", "form", "spans", "hooks")


def singleton_keys() -> tuple[str, ...]:
    return tuple(key for key in fields.keys(fields.TOP_FIELDS) if key not in PER_FILE_KEYS)


SPEC_SUFFIXES = (".yaml", ".yml")


def spec_files(spec_dir: Path) -> list[Path]:
    if spec_dir.is_file():
        return [spec_dir]
    return sorted(p for p in spec_dir.iterdir() if p.suffix in SPEC_SUFFIXES and p.is_file())


def load_project(spec_dir: Path, diags: Diagnostics | None = None) -> Project:
    """Load and validate every spec file of ``spec_dir``.

    Without ``diags``, any problem raises :class:`SpecError`. With it, problems are added there and
    the spans that are valid are still returned, so that later stages can report theirs too; only
    a project missing its declarations raises.

    A file that does not load (invalid YAML, not UTF-8, not a mapping), or that has an unknown
    top-level key (a misspelt ``spans:``), is reported once: references to names it may declare (groups, metrics, variables when their declaration is missing; parent
    spans always) are not checked until it loads, so its error is not buried under follow-on ones.
    """
    collect = diags is not None
    diags = diags if diags is not None else Diagnostics()
    if spec_dir.is_file() and spec_dir.suffix not in SPEC_SUFFIXES:
        diags.error(
            Pos(display_path(spec_dir), 1, 1),
            "not a spec file: SPECS is a directory of *.yaml spec files or one *.yaml file",
        )
        raise SpecError(diags)
    files = spec_files(spec_dir)
    if not files:
        diags.error(Pos(display_path(spec_dir), 1, 1), "no spec files (*.yaml) found")
        raise SpecError(diags)
    builder = _Builder(diags)
    for path in files:
        display = display_path(path)
        text = _read_spec_text(path, display, diags)
        root = load_yaml(display, text, diags) if text is not None else None
        if root is None:
            builder.broken.append(display)
        else:
            builder.add_file(display, root)
    project = builder.finish(tuple(display_path(p) for p in files))
    if project is None or (diags and not collect):
        raise SpecError(diags)
    return project


MAX_SPEC_BYTES = 16 * 1024 * 1024


def _read_spec_text(path: Path, display: str, diags: Diagnostics) -> str | None:
    """The text of a spec file, or None with the reason reported (unreadable, too big, not UTF-8)."""
    try:
        size = path.stat().st_size
        if size > MAX_SPEC_BYTES:
            diags.error(
                Pos(display, 1, 1), f"{size} bytes, more than {MAX_SPEC_BYTES // 2**20} MiB: not a spec file"
            )
            return None
        data = path.read_bytes()
    except OSError as exc:
        diags.error(Pos(display, 1, 1), f"cannot read: {exc.strerror or exc}")
        return None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        diags.error(Pos(display, 1, 1), "UTF-16 text (a byte order mark): save the spec as UTF-8")
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        diags.error(Pos(display, line, col), f"not UTF-8 text (byte 0x{data[exc.start]:02x})")
        return None


def display_path(path: Path) -> str:
    """How messages name ``path``: relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


class _Builder(SpanReader, HookReader, SettingsReader, ReleasesReader, AttributeReader):
    def __init__(self, diags: Diagnostics) -> None:
        super().__init__(diags)
        self.singletons: dict[str, tuple[str, YNode]] = {}
        self.span_nodes: list[tuple[YMap, tuple[str, Pos] | None]] = []
        self.default_forms: dict[int, SpanForm] = {}  # id(span node) -> the file's default form
        self.hook_nodes: list[tuple[YMap, tuple[str, Pos] | None]] = []
        # files that did not load, or with an unknown top-level key: what they declare is unknown
        self.broken: list[str] = []
        self.ambiguous: set[str] = set()  # declarations made twice

    def add_file(self, path: str, root: YNode) -> None:
        if not isinstance(root, YMap):
            self.diags.error(root.pos, "a spec file must be a mapping")
            self.broken.append(path)
            return
        if not root.entries:
            self.diags.error(
                root.pos, "empty spec file: it declares nothing (spans, hooks or the project settings)"
            )
            return
        values = self._fields(root, fields.TOP_FIELDS, "spec file")
        if any(key not in fields.keys(fields.TOP_FIELDS) for key in root.entries):
            # a misspelt top-level key ('spnas:') may hold what the file meant to declare: what
            # it declares is unknown, as for a file that did not load, so the references to it
            # are not reported before the key (the cause) is fixed
            self.broken.append(path)
        for key in singleton_keys():
            node = root.get(key)
            if node is None:
                continue
            if key in self.singletons:
                first = self.singletons[key][1].pos
                self.diags.error(
                    root.key_pos(key), f"'{key}' is already declared at {first.ref(root.key_pos(key))}"
                )
                self.ambiguous.add(key)  # which one is meant is unknown: no follow-on errors
                continue
            self.singletons[key] = (path, node)
        name = values.get("file")
        default_file = (name, root.value_pos("file")) if name is not None else None
        default_form: SpanForm = values.get("form") or "try"
        spans_node = root.get("spans")
        if isinstance(spans_node, YSeq):
            for item in spans_node.items:
                self.default_forms[id(item)] = default_form
        for key, target in (("spans", self.span_nodes), ("hooks", self.hook_nodes)):
            entries = root.get(key)
            if entries is None:
                continue
            for item in self._seq(entries, key):
                if isinstance(item, YMap):
                    target.append((item, default_file))
                else:
                    self.diags.error(item.pos, f"each of '{key}' must be a mapping")

    def finish(self, files: tuple[str, ...]) -> Project | None:
        if self.broken:
            missing = {key for key in singleton_keys() if key not in self.singletons}
            self.incomplete = frozenset({"spans", *missing})
        self.incomplete |= self.ambiguous
        for key in fields.required(fields.TOP_FIELDS, fields.PROJECT):
            if key not in self.singletons and not self.broken:
                self.diags.error(Pos(files[0], 1, 1), f"missing '{key}': declare it in one spec file")
        runtime = self._runtime()
        upstream = self._upstream()
        supported = self._supported_releases(upstream)
        groups = self._groups()
        presets = self._presets({g.name for g in groups})
        group_names = {g.name for g in groups}
        spans = self._spans(group_names)
        lifecycle = self._lifecycle(group_names)
        metrics = self._metrics()
        env = self._env()
        flags, flag_hooks = self._flags(env, presets, groups)
        hooks = self._hooks(group_names, {m.name for m in metrics}) + flag_hooks
        self._check_unique_names(spans, lifecycle)
        # every name a span declares, valid or not: an invalid span has its own error already
        known = {n for s in spans for n in (s.names or (s.name,))} | {s.name for s in lifecycle}
        known |= self._declared_names()
        for span in spans:
            for parent in {*span.parents, *(p for _, ps in span.name_parents for p in ps)}:
                if parent not in known:
                    self._unknown(span.pos, "parent span", parent, sorted(known), "spans")
        if runtime is None or upstream is None:
            return None
        return Project(
            runtime,
            upstream,
            groups,
            presets,
            spans,
            lifecycle,
            metrics,
            env,
            flags,
            hooks,
            supported,
            attributes=self._attribute_decls(),
        )

    def _supported_releases(self, upstream: UpstreamPin | None) -> tuple[UpstreamPin, ...]:
        """`upstream: supported:`; afterwards `releases:` of spans and hooks are checked against them."""
        entry = self.singletons.get("upstream")
        node = entry[1] if entry is not None else None
        supported: tuple[UpstreamPin, ...] = ()
        if upstream is not None and isinstance(node, YMap) and "supported" in node.entries:
            supported = self._supported(node.value("supported"), upstream)
        if upstream is not None:
            versions = {upstream.version, *(p.version for p in supported)}
            self.supported_versions = tuple(sorted(versions, key=lambda v: version_key(v) or ()))
            development = node.get("development") if isinstance(node, YMap) else None
            if development is not None:
                self.development_version = self._development(development, versions)
        return supported

    def _declared_names(self) -> set[str]:
        names: set[str] = set()
        for node, _ in self.span_nodes:
            for item in (node.get("name"), *_items(node.get("names"))):
                if isinstance(item, YScalar) and isinstance(item.value, str):
                    names.add(item.value)
        return names

    def _check_unique_names(self, spans: tuple[Span, ...], lifecycle: tuple[LifecycleSpan, ...]) -> None:
        code_names = {n for s in spans for n in (s.names or (s.name,))}
        seen: set[str] = set()
        for span in lifecycle:
            if span.name in code_names or span.name in seen:
                self.diags.error(span.pos, f"lifecycle span '{span.name}' is declared twice")
            seen.add(span.name)


def _items(node: YNode | None) -> tuple[YNode, ...]:
    return node.items if isinstance(node, YSeq) else ()
