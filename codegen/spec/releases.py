"""Version-aware specs: `releases:` on a span or hook, and the supported releases of `upstream:`."""

from __future__ import annotations

import re

from codegen.spec import fields
from codegen.spec.model import RELEASE_OPERATORS, VERSION, Releases, version_key
from codegen.spec.reader import Reader
from codegen.spec.yaml_nodes import YMap, YNode, YScalar, YSeq
from codegen.upstream import UpstreamPin

_CLAUSE = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*")


def parse_releases(text: str) -> tuple[tuple[str, tuple[int, ...], int], ...] | None:
    """``">=0.17, <0.19"`` -> its clauses, or None when it is not such a specifier."""
    clauses = []
    for part in text.split(","):
        match = _CLAUSE.fullmatch(part)
        if match is None:
            return None
        op, version = match.groups()
        key = version_key(version)
        release = VERSION.fullmatch(version)
        if key is None or release is None or op not in RELEASE_OPERATORS:
            return None
        clauses.append((op, key, 3 if release.group(3) is not None else 2))
    return tuple(clauses)


class ReleasesReader(Reader):
    # the versions of every supported release, once `upstream:` is read (None: unknown)
    supported_versions: tuple[str, ...] | None = None
    # `upstream: development:`, the version a development tree names (Megatron-LM main), if declared
    development_version: str | None = None

    def _releases(self, value: YNode | None, what: str = "releases") -> Releases | None:
        """An entry's `releases:` (a specifier string, or {versions: SPEC, reason: TEXT})."""
        if value is None:
            return None
        reason = ""
        spec_node: YNode | None = value
        if isinstance(value, YMap):
            # `versions` is read below, with the string form, as "releases"
            reason = self._fields(value, fields.RELEASES_FIELDS, what).get("reason") or ""
            spec_node = value.get("versions")
            if spec_node is None:
                return None
        elif not isinstance(value, YScalar):
            self.diags.error(
                value.pos, "releases must be a specifier such as '>=0.19', or {versions: ..., reason: ...}"
            )
            return None
        text = self._str(spec_node, "releases")
        if text is None or spec_node is None:
            return None
        clauses = parse_releases(text)
        if not clauses:
            self.diags.error(
                spec_node.pos,
                f"releases '{text}' is not a version specifier: comma-separated clauses of "
                f"{', '.join(RELEASE_OPERATORS)} and a version, such as '>=0.18' or '>=0.17, <0.19'",
            )
            return None
        releases = Releases(" ".join(text.split()), clauses, spec_node.pos, reason)
        applies_to = (*(self.supported_versions or ()), *filter(None, [self.development_version]))
        if self.supported_versions and not any(releases.contains(v) for v in applies_to):
            self.diags.error(
                spec_node.pos,
                f"releases '{releases.text}' includes none of the supported releases "
                f"({', '.join(self.supported_versions)}): the entry would never apply",
            )
            return None
        return releases

    def _development(self, node: YNode, released: set[str]) -> str | None:
        """`upstream: development:`: a version X.Y.Z newer than every supported release."""
        version = self._str(node, "development")
        if version is None:
            return None
        key = version_key(version)
        if key is None or not re.fullmatch(r"\d+\.\d+\.\d+", version):
            self.diags.error(node.pos, f"development '{version}' must be a version X.Y.Z")
            return None
        if any(key <= (version_key(v) or ()) for v in released):
            self.diags.error(node.pos, f"development {version} must be newer than every supported release")
            return None
        return version

    def _supported(self, node: YNode, pinned: UpstreamPin | None) -> tuple[UpstreamPin, ...]:
        """`upstream: supported:` — the other releases the specs serve, each with its wheel's sha256."""
        pins: list[UpstreamPin] = []
        seen = {pinned.version: "the pinned release"} if pinned else {}
        for item in self._seq(node, "supported"):
            entry = self._map(item, "each of 'supported'")
            if entry is None:
                continue
            values = self._fields(entry, fields.SUPPORTED_FIELDS, "supported release")
            version, filename, sha = (values.get(key) for key in ("version", "filename", "sha256"))
            if version is None or filename is None or sha is None:
                continue
            where = entry.value_pos("version")
            if version_key(version) is None or not re.fullmatch(r"\d+\.\d+\.\d+", version):
                self.diags.error(where, f"supported release '{version}' must be a version X.Y.Z")
                continue
            if version in seen:
                self.diags.error(where, f"release {version} is already declared ({seen[version]})")
                continue
            if not re.fullmatch(r"[0-9a-f]{64}", sha):
                self.diags.error(entry.value_pos("sha256"), "sha256 must be 64 lowercase hex digits")
                continue
            seen[version] = f"at line {where.line}"
            distribution = pinned.distribution if pinned else "megatron-core"
            pins.append(UpstreamPin(distribution, version, filename, sha))
        if isinstance(node, YSeq) and not node.items:
            self.diags.error(node.pos, "supported must list at least one release (or be left out)")
        return tuple(pins)
