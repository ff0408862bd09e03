"""``codegen package``: the instrumentation as an installable, pure-Python wheel.

The distribution ``megatron-otel-instrumentation`` (module ``megatron_otel_instrumentation``)
carries the modules of ``codegen/instrumentation/`` verbatim (the import hook and the
``BaseInstrumentor``), and for every supported release: the instrumented text of each file the
specs change, stored once per content (``woven/<sha256>.pysrc``), the runtime package the fork
would hold as ``megatron/core/otel/`` (``runtime/<key>/``), and ``_table.json`` naming, per file,
the sha256 of the release's pristine bytes and of its instrumented text.

The wheel is written directly (a zip with its ``.dist-info``), byte for byte the same for the same
inputs: no build backend is needed, and ``pip install`` takes it offline.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from codegen.atomic import staged
from codegen.layout import literal

DISTRIBUTION = "megatron-otel-instrumentation"
MODULE = "megatron_otel_instrumentation"
# the opentelemetry_instrumentor entry point's name (OTEL_PYTHON_DISABLED_INSTRUMENTATIONS)
ENTRY_POINT = "megatron"
SOURCE = Path(__file__).resolve().parents[1] / "instrumentation"
RUNTIME_PREFIX = "megatron/core/otel/"
# What the distribution needs at run time; the lower bounds are the oldest releases the runtime
# tests run against (README "Instrument an installed Megatron").
REQUIRES = (
    "opentelemetry-api>=1.27",
    "opentelemetry-sdk>=1.27",
    "opentelemetry-instrumentation>=0.48b0",
)
_DATE = (2020, 1, 1, 0, 0, 0)  # every member's timestamp: the same inputs give the same bytes


@dataclass(frozen=True)
class ReleaseRun:
    """One supported release as generated: where its pristine tree is and what the specs change."""

    release: str
    source_root: Path
    changes: Mapping[str, str]  # path under the source root -> instrumented (or added) text
    # a tree carrying Megatron-LM's hand-written instrumentation (PR #6438), generated in replace
    # mode: not a published release (RELEASES, the requirement), served only on a tree whose every
    # file it changes matches (the finder's #6438 check)
    replaced: bool = False


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def package_files(
    runs: list[ReleaseRun], version: str, schema_url: str, built_from: Mapping[str, str] | None = None
) -> dict[str, bytes]:
    """Every file of the distribution's module, by path under the wheel's root. ``built_from``:
    the absolute paths of the codegen and the specs that built it (``codegen``, ``specs``), which
    the import hook's warnings name in their commands where they exist on the machine that runs."""
    files: dict[str, bytes] = {}
    for module in sorted(SOURCE.glob("*.py")):
        files[f"{MODULE}/{module.name}"] = module.read_bytes()
    table: dict[str, object] = {}
    file_table: dict[str, list[dict[str, str]]] = {}
    runtimes: dict[str, str] = {}
    for run in runs:
        runtime = {p: t for p, t in run.changes.items() if p.startswith(RUNTIME_PREFIX)}
        key = "r" + sha256(json.dumps(sorted(runtime.items())).encode())[:16]
        runtimes[run.release] = key
        for path, text in runtime.items():
            files[f"{MODULE}/runtime/{key}/{path.removeprefix(RUNTIME_PREFIX)}"] = text.encode("utf-8")
        for path, text in sorted(run.changes.items()):
            if path.startswith(RUNTIME_PREFIX):
                continue
            pristine = (run.source_root / path).read_bytes()
            woven = text.encode("utf-8")
            woven_sha = sha256(woven)
            files[f"{MODULE}/woven/{woven_sha}.pysrc"] = woven
            entry = {"release": run.release, "pristine": sha256(pristine), "woven": woven_sha}
            file_table.setdefault(path, []).append(entry)
    releases = [run.release for run in runs if not run.replaced]
    table["releases"] = releases
    table["newest"] = releases[-1]
    table["replaced"] = [run.release for run in runs if run.replaced]
    table["runtime"] = runtimes
    table["files"] = dict(sorted(file_table.items()))
    if built_from:
        table["built_from"] = dict(sorted(built_from.items()))
    files[f"{MODULE}/_table.json"] = (json.dumps(table, indent=1, sort_keys=True) + "\n").encode()
    files[f"{MODULE}/_version.py"] = render_version(version, releases, schema_url).encode()
    return dict(sorted(files.items()))


def requirement(releases: list[str]) -> str:
    return f"megatron-core>={releases[0]},<={releases[-1]}"


def render_version(version: str, releases: list[str], schema_url: str) -> str:
    """The package's ``_version.py``, laid out as black writes it."""
    constants = {
        "__version__": version,
        "RELEASES": tuple(releases),
        "MEGATRON_CORE_REQUIREMENT": requirement(releases),
        "SCHEMA_URL": schema_url,
    }
    return (
        '"""Written by `codegen package`: the distribution\'s version and what it supports."""\n\n'
        + "".join(f"{name} = {literal(value, 0, '', len(name) + 3)}\n" for name, value in constants.items())
    )


def _metadata(version: str, releases: list[str]) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {DISTRIBUTION}",
        f"Version: {version}",
        (
            "Summary: OpenTelemetry instrumentation for Megatron (megatron-core "
            f"{', '.join(releases)}), woven at import; generated by megatron-otel-codegen"
        ),
        "License: Apache-2.0",
        "Requires-Python: >=3.11",
        *(f"Requires-Dist: {r}" for r in REQUIRES),
    ]
    return "\n".join(lines) + "\n"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def wheel_name(version: str) -> str:
    return f"{MODULE}-{version}-py3-none-any.whl"


def write_wheel(
    out_dir: Path,
    runs: list[ReleaseRun],
    version: str,
    schema_url: str,
    built_from: Mapping[str, str] | None = None,
) -> Path:
    """Write the wheel into ``out_dir`` (created); returns its path. Written beside and renamed
    into place, so a failure leaves no partial wheel."""
    releases = [run.release for run in runs if not run.replaced]
    files = package_files(runs, version, schema_url, built_from)
    info = f"{MODULE}-{version}.dist-info"
    files[f"{info}/METADATA"] = _metadata(version, releases).encode()
    files[f"{info}/entry_points.txt"] = (
        f"[opentelemetry_instrumentor]\n{ENTRY_POINT} = {MODULE}.instrumentor:MegatronInstrumentor\n"
    ).encode()
    return _write(out_dir, wheel_name(version), MODULE, info, files)


# The runtime as a dependency (``codegen package --runtime``): the same modules the fork vendors.
RUNTIME_DISTRIBUTION = "megatron-otel-runtime"
RUNTIME_MODULE = "megatron_otel_runtime"
RUNTIME_REQUIRES = ("opentelemetry-api>=1.27", "opentelemetry-sdk>=1.27")


def runtime_wheel_name(version: str) -> str:
    return f"{RUNTIME_MODULE}-{version}-py3-none-any.whl"


def write_runtime_wheel(out_dir: Path, modules: Mapping[str, str], version: str) -> Path:
    """Write the ``megatron-otel-runtime`` wheel into ``out_dir``: ``modules`` (file name -> text,
    the runtime's modules and the specs' taxonomy, as ``codegen.emit.runtime`` renders them) as
    the package ``megatron_otel_runtime``. A tree in dependency mode imports it through its shim,
    with the tree's own ``_taxonomy.py`` in place of this one."""
    files = {f"{RUNTIME_MODULE}/{name}": text.encode("utf-8") for name, text in sorted(modules.items())}
    info = f"{RUNTIME_MODULE}-{version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {RUNTIME_DISTRIBUTION}",
        f"Version: {version}",
        "Summary: The OpenTelemetry runtime of Megatron's generated instrumentation (megatron-otel-codegen)",
        "License: Apache-2.0",
        "Requires-Python: >=3.11",
        *(f"Requires-Dist: {r}" for r in RUNTIME_REQUIRES),
    ]
    files[f"{info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    return _write(out_dir, runtime_wheel_name(version), RUNTIME_MODULE, info, files)


def _write(out_dir: Path, name: str, module: str, info: str, files: dict[str, bytes]) -> Path:
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: megatron-otel-codegen\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files[f"{info}/top_level.txt"] = f"{module}\n".encode()
    record = [_record_line(member, data) for member, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    with (
        staged(out_dir) as staging,
        staging.open(name) as raw,
        zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as archive,
    ):
        for path, data in files.items():
            member = zipfile.ZipInfo(path, _DATE)
            member.external_attr = 0o644 << 16
            member.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(member, data)
    return out_dir / name
