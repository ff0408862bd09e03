"""`spans:` entries: name, group, place, covered statements, attributes, form."""

from __future__ import annotations

import ast
from typing import Any

from codegen.diagnostics import Pos
from codegen.spec import fields
from codegen.spec.model import SPAN_FORMS, Region, Selector, Span, SpanForm
from codegen.spec.reader import DOTTED, SPAN_NAME
from codegen.spec.releases import ReleasesReader
from codegen.spec.selectors import SelectorReader
from codegen.spec.yaml_nodes import YMap, YNode, YSeq


class SpanReader(SelectorReader, ReleasesReader):
    span_nodes: list[tuple[YMap, tuple[str, Pos] | None]]
    default_forms: dict[int, SpanForm]

    def _overlap(self, one: Span, other: Span) -> bool:
        """Whether ``one`` and ``other`` apply to a release in common (supported or development)."""
        if one.releases is None or other.releases is None:
            return True
        versions = (*(self.supported_versions or ()), *filter(None, [self.development_version]))
        return not versions or any(one.releases.contains(v) and other.releases.contains(v) for v in versions)

    def _spans(self, group_names: set[str]) -> tuple[Span, ...]:
        spans: list[Span] = []
        seen: dict[tuple[str, str, str, str], list[Span]] = {}
        name_groups: dict[str, tuple[str, Pos]] = {}
        for node, default_file in self.span_nodes:
            span = self._span(node, default_file, group_names)
            if span is None:
                continue
            key = (span.file, span.function, span.name, span.region.describe())
            # the same place twice is a duplicate unless their `releases:` share no release
            same = next((s for s in seen.get(key, ()) if self._overlap(s, span)), None)
            if same is not None:
                self.diags.error(
                    span.pos,
                    f"duplicate span '{span.name}': the same place is already instrumented at {same.pos.ref(span.pos)}",
                )
                continue
            seen.setdefault(key, []).append(span)
            previous = name_groups.setdefault(span.name, (span.group, span.pos))
            if previous[0] != span.group:
                self.diags.error(
                    span.pos,
                    f"span '{span.name}' is in group '{span.group}' here but in '{previous[0]}' at {previous[1].ref(span.pos)}",
                )
                continue
            spans.append(span)
        return tuple(spans)

    def _span(self, node: YMap, default_file: tuple[str, Pos] | None, group_names: set[str]) -> Span | None:
        values = self._fields(node, fields.SPAN_FIELDS, "span")
        ok = True
        name = values.get("name")
        if name is not None and not SPAN_NAME.match(name):
            self.diags.error(node.value_pos("name"), f"span name '{name}' must be dotted identifiers")
            ok = False
        group = values.get("group")
        if group is not None and group not in group_names:
            self._unknown(node.value_pos("group"), "group", group, sorted(group_names), "groups")
            ok = False
        file, file_pos = self._entry_file(node, default_file, "span")
        if file is None:
            ok = False
        function = values.get("function")
        if function is not None and not DOTTED.match(function):
            self.diags.error(
                node.value_pos("function"), f"function '{function}' must be 'name' or 'Class.method'"
            )
            ok = False
        region = values.get("around", Region("function", node.pos))
        attributes = values.get("attributes", ())
        end_attributes = values.get("end_attributes", ())
        goodput = values.get("goodput", False)
        note = values.get("note") or ""
        when = values.get("when")
        parents_ok, parents, name_parents = self._parents(node, name)
        form_ok, form = self._span_form(node, values)
        names_ok, names, name_expr = self._names_choice(node, name, values)
        stream_ok, stream = self._stream(node, form)
        ok = ok and parents_ok and form_ok and names_ok and stream_ok
        releases = values.get("releases")
        # a key that is there but read as None was invalid (and reported)
        ok = ok and all(values[key] is not None for key in ("releases", "when", "name_expr") if key in values)
        if (
            not ok
            or name is None
            or group is None
            or file is None
            or function is None
            or region is None
            or attributes is None
            or end_attributes is None
            or goodput is None
            or form is None
        ):
            return None
        return Span(
            name=name,
            group=group,
            file=file,
            function=function,
            region=region,
            pos=node.pos,
            attributes=attributes,
            end_attributes=end_attributes,
            goodput=bool(goodput),
            note=note,
            file_pos=file_pos,
            function_pos=node.value_pos("function"),
            when=when,
            name_expr=name_expr,
            when_pos=node.value_pos("when") if "when" in node.entries else None,
            name_expr_pos=node.value_pos("name_expr") if "name_expr" in node.entries else None,
            names=names,
            form=form,
            parents=parents,
            name_parents=tuple(name_parents),
            releases=releases,
            stream=stream,
        )

    def _parents(
        self, node: YMap, name: str | None
    ) -> tuple[bool, tuple[str, ...], list[tuple[str, tuple[str, ...]]]]:
        """(valid, ``parents:`` as a list, per-name ``parents:`` as ``{name: [parents]}``)."""
        ok = True
        parents: tuple[str, ...] = ()
        name_parents: list[tuple[str, tuple[str, ...]]] = []
        parents_node = node.get("parents")
        if isinstance(parents_node, YMap):  # {name: [parents]} for a span with several names
            for key, (key_pos, value) in parents_node.entries.items():
                if key != name and key not in [
                    self._str(n, "name") for n in self._seq(node.get("names") or YSeq((), node.pos), "names")
                ]:
                    self.diags.error(key_pos, f"'{key}' is not one of this span's names")
                    ok = False
                    continue
                name_parents.append((key, self._names(value, "parents")))
        elif parents_node is not None:
            parents = self._names(parents_node, "parents")
        return ok, parents, name_parents

    def _span_form(self, node: YMap, values: dict[str, Any]) -> tuple[bool, SpanForm | None]:
        """(valid, the span's form: its own ``form:`` or its file's default)."""
        form = values["form"] if "form" in values else self.default_forms.get(id(node), "try")
        if form is None:
            return False, None
        if form == "decorator":
            reason = None
            if node.get("around") is not None:
                reason = "a decorator covers the whole function: drop 'around'"
            elif "end_attributes" in node.entries or "when" in node.entries or "names" in node.entries:
                reason = "a decorator span takes no end_attributes, when or names"
            if reason:
                self.diags.error(node.value_pos("form") if "form" in node.entries else node.pos, reason)
                return False, form
        return True, form

    def _stream(self, node: YMap, form: SpanForm | None) -> tuple[bool, Selector | None]:
        """(valid, the ``stream:`` call selector: call, within and occurrence)."""
        if "stream" not in node.entries:
            return True, None
        spec = self._map(node.value("stream"), "stream")
        if spec is None:
            return False, None
        self._fields(spec, fields.STREAM_FIELDS, "stream")
        if "call" not in spec.entries:  # reported by _fields
            return False, None
        if form == "flat":
            self.diags.error(
                node.value_pos("stream"),
                "a stream span needs form: try (or decorator, on a coroutine): the flat form has "
                "no finally: to hand the span over from",
            )
            return False, None
        selector = self._selector(
            YMap({k: v for k, v in spec.entries.items() if k in ("call", "within", "occurrence")}, spec.pos)
        )
        return selector is not None, selector

    def _names_choice(
        self, node: YMap, name: str | None, values: dict[str, Any]
    ) -> tuple[bool, tuple[str, ...], str | None]:
        """(valid, every name of a span with several, the ``name_expr`` choosing among them)."""
        names: tuple[str, ...] = ()
        name_expr = None
        if ("names" in node.entries) != ("name_expr" in node.entries):
            self.diags.error(node.pos, "'names' (the other names) and 'name_expr' (the choice) go together")
            return False, names, name_expr
        if "names" in node.entries and name is not None:
            names = (name, *values["names"])
            name_expr = values["name_expr"]
            if name_expr is not None:
                literals = {
                    n.value
                    for n in ast.walk(ast.parse(name_expr, mode="eval"))
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                }
                stray = sorted(str(x) for x in literals - set(names))
                if stray:
                    self.diags.error(
                        node.value_pos("name_expr"),
                        f"name_expr names {', '.join(stray)}, not in the span's names",
                    )
                    return False, names, name_expr
        return True, names, name_expr

    def _form(self, node: YNode | None, what: str = "form") -> SpanForm | None:
        form = self._str(node, what)
        if form is None or node is None:
            return None
        for known in SPAN_FORMS:
            if form == known:
                return known
        self._unknown(node.pos, "form", form, list(SPAN_FORMS))
        return None
