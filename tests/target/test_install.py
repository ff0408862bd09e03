"""The generator as a user installs it: ``python -m build`` makes an sdist and a wheel, the wheel is
installed (not editable) into a fresh virtual environment, and ``codegen apply --check``,
``validate`` and ``verify`` run from it against a copy of specs/ and generated/ outside the
checkout, so nothing can be read from the source tree (templates, runtime sources) by accident.

pip resolves the wheel's dependencies as it does for every other install here (the configured
index or the local one, held to constraints.txt).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support.git_repo import copy_checkout
from tests.support.paths import REPO, SPECS

CONSTRAINTS = REPO / "constraints.txt"
TEMPLATES = REPO / "templates"


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True)


def build_distributions(out: Path) -> tuple[Path, Path]:
    """``python -m build`` over a copy of the checkout's files (tracked and new, not ignored):
    returns (sdist, wheel)."""
    pytest.importorskip("build", reason="build is in the test extra (tox -e test)")
    source = out / "src"
    copy_checkout(source)
    result = _run(sys.executable, "-m", "build", "--outdir", out / "dist", source)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    (sdist,) = (out / "dist").glob("*.tar.gz")
    (wheel,) = (out / "dist").glob("*.whl")
    return sdist, wheel


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_distributions(tmp_path_factory.mktemp("build"))


@pytest.fixture(scope="module")
def installed(dists: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed; returns its bin/ directory."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bindir = env_dir / "bin"
    result = _run(bindir / "python", "-m", "pip", "install", "-q", "-c", CONSTRAINTS, dists[1])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return bindir


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """specs/ and generated/ in a directory of their own (not the checkout)."""
    root = tmp_path_factory.mktemp("project")
    shutil.copytree(SPECS, root / "specs")
    shutil.copytree(REPO / "generated", root / "generated")
    return root


def test_distributions_carry_the_templates(dists: tuple[Path, Path]) -> None:
    """The top-level templates/ ships in the sdist as it lies and in the wheel as codegen/templates/
    (pyproject.toml's package-dir), every file of it."""
    sdist, wheel = dists
    templates = sorted(
        p.relative_to(REPO / "templates").as_posix() for p in TEMPLATES.rglob("*") if p.is_file()
    )
    assert templates and "docs/spans.md.j2" in templates and "goodput/page.js" in templates
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    assert {f"codegen/templates/{name}" for name in templates} <= in_wheel
    assert "codegen/otel_runtime/_lifecycle.py" in in_wheel
    with tarfile.open(sdist) as archive:
        root = archive.getnames()[0].split("/")[0]
        in_sdist = {name.removeprefix(root + "/") for name in archive.getnames()}
    assert {f"templates/{name}" for name in templates} <= in_sdist


def test_installed_generator_reads_the_installed_templates(installed: Path, project: Path) -> None:
    result = _run(installed / "python", "-c", "import codegen; print(codegen.TEMPLATES_DIR)", cwd=project)
    assert result.returncode == 0, result.stderr
    location = Path(result.stdout.strip())
    assert location.parts[-2:] == ("codegen", "templates") and "site-packages" in location.parts
    assert (location / "docs" / "spans.md.j2").is_file()


def test_installed_generator_is_not_the_checkout(installed: Path, project: Path) -> None:
    result = _run(installed / "python", "-c", "import codegen; print(codegen.__file__)", cwd=project)
    assert result.returncode == 0, result.stderr
    location = Path(result.stdout.strip()).resolve()
    assert "site-packages" in location.parts and not location.is_relative_to(REPO)


def test_apply_check_and_validate_from_the_wheel(installed: Path, project: Path) -> None:
    check = _run(installed / "codegen", "apply", "specs/", "--check", cwd=project)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    validate = _run(installed / "codegen", "validate", "specs/", cwd=project)
    assert validate.returncode == 0, validate.stdout[-3000:] + validate.stderr[-3000:]
    # stale generated/: the installed check notices (exit 1, the diff shown)
    page = project / "generated" / "docs" / "spans.md"
    original = page.read_text()
    try:
        page.write_text(original.replace("megatron.layer.forward", "megatron.layer.fwd", 1))
        stale = _run(installed / "codegen", "apply", "specs/", "--check", cwd=project)
    finally:
        page.write_text(original)
    assert stale.returncode == 1 and "megatron.layer.fwd" in stale.stdout


def _capture(path: Path, *spans: tuple[str, str]) -> Path:
    def span(name: str, group: str, span_id: str) -> dict[str, object]:
        return {
            "traceId": "0" * 31 + "1",
            "spanId": span_id,
            "name": name,
            "kind": 1,
            "startTimeUnixNano": "1",
            "endTimeUnixNano": "2",
            "attributes": [{"key": "megatron.span_group", "value": {"stringValue": group}}],
        }

    scope = {
        "scope": {"name": "megatron"},
        "spans": [span(n, g, f"{i + 1:016x}") for i, (n, g) in enumerate(spans)],
    }
    path.write_text(
        json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [scope]}]}) + "\n"
    )
    return path


def test_verify_from_the_wheel(installed: Path, project: Path) -> None:
    clean = _capture(
        project / "clean.json",
        ("megatron.microbatch.forward", "microbatch"),
        ("megatron.microbatch.backward", "microbatch"),
    )
    result = _run(installed / "codegen", "verify", "specs/", clean, cwd=project)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "0 findings" in result.stdout
    bad = _capture(project / "bad.json", ("megatron.microbatch.fwd", "microbatch"))
    result = _run(installed / "codegen", "verify", "specs/", bad, cwd=project)
    assert result.returncode == 1 and "megatron.microbatch.fwd" in result.stdout
