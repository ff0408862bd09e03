"""Every supported megatron-core release, end to end: `codegen apply specs/ --release X --out DIR`
exits 0, the specs resolve, the fork compiles file by file, re-applying changes nothing, and every
span documented for that release is emitted by its code and back.

The wheels come from the upstream cache (`CODEGEN_CACHE_DIR`, else ~/.cache/megatron-otel-codegen),
fetched with pip on first use; a release is skipped only when its wheel is not cached and the
network is unavailable. No torch is needed.
"""

from __future__ import annotations

import re
import socket
import types
from pathlib import Path

import pytest

from codegen.cli import FORK_REPORT, main
from codegen.pipeline import generate
from codegen.spec.load import load_project
from codegen.spec.model import Span
from codegen.upstream import UpstreamError, default_cache_dir, source_root
from tests.support.paths import SPECS
from tests.support.spans_in_code import documented_names, emitted_by_instrumented_code, emitted_by_runtime

PROJECT = load_project(SPECS)
RELEASES = [p.version for p in PROJECT.releases()]


def _network() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


def _tree(version: str) -> Path:
    pin = next(p for p in PROJECT.releases() if p.version == version)
    cache = default_cache_dir()
    cached = (cache / pin.tree_name / ".complete").is_file() or (cache / "wheels" / pin.filename).is_file()
    try:
        return source_root(pin)
    except UpstreamError:
        if not cached and not _network():
            pytest.skip(f"megatron-core {version} is not cached and the network is unavailable")
        raise


@pytest.fixture(scope="module", params=RELEASES)
def fork(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> types.SimpleNamespace:
    """The documented done-when command for one release, and what it wrote."""
    version: str = request.param
    pristine = _tree(version)
    out = tmp_path_factory.mktemp(f"release-{version}")
    fork, generated = out / "fork", out / "generated"
    options = ["--release", version, "--out", str(fork), "--generated", str(generated), "--no-cache"]
    assert main(["apply", str(SPECS), *options]) == 0
    patched = [
        re.sub(r"^\d{4}-", "", name) for name in (generated / "patches" / "series").read_text().split()
    ]
    changes = {}
    for path in (p for p in fork.rglob("*.py") if p.is_file()):
        rel = path.relative_to(fork).as_posix()
        original = pristine / rel
        new = path.read_text(encoding="utf-8")
        old = original.read_text(encoding="utf-8") if original.is_file() else None
        if new != old:
            changes[rel] = (old, new)
    return types.SimpleNamespace(
        version=version,
        pristine=pristine,
        fork=fork,
        patched=patched,
        changes=changes,
        docs={p.name: p.read_text(encoding="utf-8") for p in (generated / "docs").iterdir()},
        project=PROJECT,
    )


def test_fork_holds_exactly_the_patched_files_and_they_compile(fork: types.SimpleNamespace) -> None:
    assert len(fork.patched) == len(fork.changes) >= 13
    for path, (_, new) in sorted(fork.changes.items()):
        compile(new, path, "exec")


def test_reapplying_to_the_fork_changes_nothing(fork: types.SimpleNamespace) -> None:
    again = generate(SPECS, fork.fork)
    assert again.tree is not None and again.tree.release == fork.version
    assert again.changes == {}


def test_every_documented_span_is_emitted_and_back(fork: types.SimpleNamespace) -> None:
    documented = documented_names(fork)
    emitted = emitted_by_instrumented_code(fork) | emitted_by_runtime(fork)
    assert emitted - documented == set(), "emitted but undocumented"
    assert documented - emitted == set(), "documented but never emitted"


def test_coverage_page_says_what_the_fork_carries(fork: types.SimpleNamespace) -> None:
    """A span is "placed" for this release on the coverage page exactly when its code is in the fork."""
    page = fork.docs["releases.md"]
    header = next(line for line in page.splitlines() if line.startswith("| Span |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    column = next(i for i, c in enumerate(columns) if c.split()[0] == fork.version)
    placed: set[str] = set()
    absent: dict[str, str] = {}
    lines = page.splitlines()
    start = lines.index(header)
    # the span table only (the page's later tables list hooks limited to some releases)
    table = lines[
        start : next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    ]
    for line in table:
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            name = cells[0].strip("`")
            if cells[column] in ("placed", "runtime"):
                placed.add(name)
            else:
                absent[name] = cells[column]
    emitted = emitted_by_instrumented_code(fork) | emitted_by_runtime(fork)
    assert placed == emitted
    for name, cell in absent.items():
        assert cell.startswith("not in this release: ") and len(cell) > len("not in this release: ")
    report = (fork.fork / FORK_REPORT).read_text()
    assert f"megatron-core {fork.version}" in report and "Left out" in report


def test_older_releases_place_every_span_whose_code_exists(fork: types.SimpleNamespace) -> None:
    """Spans left out of a release are those whose function is not in its code at all, except the
    inference server's and the dynamic engine's (issue 40: written for 0.19.2 and main, the other
    releases kept as they are)."""
    left_out = [s for s in PROJECT.spans if s.releases is not None and not s.releases.contains(fork.version)]
    serving = [s for s in left_out if s.group in ("inference", "inference_steps")]
    # main's chat span, which follows its streamed answer: no release has that code
    (streamed,) = [s for s in serving if s.stream is not None]
    assert streamed.name == "chat" and "0.19.2's cannot" in streamed.releases.why_not()
    others = [s for s in serving if s is not streamed]
    assert len(others) == (0 if fork.version == "0.19.2" else 9) and all(
        "0.19.2 and Megatron-LM main" in (s.releases.why_not() or "") for s in others
    )
    excluded = [s for s in left_out if s not in serving]
    for span in excluded:
        assert isinstance(span, Span)
        source = (fork.pristine / span.file).read_text(encoding="utf-8")
        assert f"def {span.function.rpartition('.')[2]}(" not in source, f"{span.name}: its code exists"
    if fork.version == "0.17.1":
        assert [s.name for s in excluded] == ["megatron.startup.sniff_test"]
    else:
        assert excluded == []


def test_release_alone_writes_its_fork_to_build_and_leaves_generated_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`codegen apply specs/ --release X` (the issue's done-when command, no --out): the fork of a
    non-pinned release goes to build/megatron-core-X/ beside the specs, never to generated/."""
    version = next(v for v in RELEASES if v != PROJECT.upstream.version)
    _tree(version)
    specs = tmp_path / "specs"
    specs.mkdir()
    for path in SPECS.glob("*.yaml"):
        (specs / path.name).write_bytes(path.read_bytes())
    assert main(["apply", str(specs), "--release", version, "--no-cache"]) == 0
    fork = tmp_path / "build" / f"megatron-core-{version}"
    assert (fork / FORK_REPORT).is_file()
    assert (fork / "megatron" / "core" / "otel" / "__init__.py").is_file()
    assert not (tmp_path / "generated").exists()
    assert "is left alone" in capsys.readouterr().out
    # a second run replaces its own fork; --check still refuses the default generated/
    assert main(["apply", str(specs), "--release", version, "--no-cache"]) == 0
    assert main(["apply", str(specs), "--release", version, "--check"]) == 2
