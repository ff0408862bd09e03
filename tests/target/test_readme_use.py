"""README "Review and carry the patches", the parts without torch: the patch set on a Megatron-LM
checkout of tag core_v0.19.2, the fork, the install command's pins.

The clone runs as written: git's ``url.<base>.insteadOf`` (through ``GIT_CONFIG_*``) sends
``https://github.com/NVIDIA/Megatron-LM.git`` to a local repository holding the pristine
megatron-core 0.19.2 tree, tagged ``core_v0.19.2``.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from codegen.diagnostics import Diagnostics
from codegen.pipeline import Generation
from codegen.spec.load import load_project
from codegen.upstream import source_root
from tests.support.doc_blocks import (
    PATCHES,
    REPO,
    UPSTREAM_URL,
    blocks,
    env_redirecting_clone,
    run_block,
    workspace,
)
from tests.support.git_repo import git, tagged_repository

TAG = "core_v0.19.2"


def test_readme_names_the_tag_of_the_pinned_release() -> None:
    """Megatron-LM tags megatron-core X.Y.Z as core_vX.Y.Z: the tag follows the pinned version."""
    pinned = re.search(r"^  version: (\S+)$", (REPO / "specs" / "telemetry.yaml").read_text(), re.MULTILINE)
    assert pinned and f"core_v{pinned[1]}" == TAG
    assert f"--branch {TAG} {UPSTREAM_URL}" in blocks()["patch"]


def test_patch_block_applies_the_patch_set_to_a_checkout_of_the_tag(
    generation: Generation, tmp_path: Path
) -> None:
    upstream = tagged_repository(generation.source_root, tmp_path / "upstream" / "Megatron-LM", TAG)
    git(upstream, "commit", "-q", "--allow-empty", "-m", "later")  # the clone takes the tag, not main
    root = workspace(tmp_path / "work")
    run_block("patch", root, env=env_redirecting_clone(upstream))
    checkout = root / "Megatron-LM"
    assert git(checkout, "describe", "--tags").strip() == TAG
    for path, (old, new) in generation.changes.items():
        assert (checkout / path).read_text(encoding="utf-8") == new, path
    changed = {line[3:].rstrip("/") for line in git(checkout, "status", "--porcelain").splitlines()}
    assert "megatron/core/otel" in changed and "megatron/core/transformer/transformer_layer.py" in changed


def test_fork_block_writes_the_instrumented_release(generation: Generation, tmp_path: Path) -> None:
    root = workspace(tmp_path)
    run_block("fork", root)
    fork = root / "megatron-otel"
    assert (fork / "otel-codegen-report.md").is_file()
    for path, (_old, new) in generation.changes.items():
        assert (fork / path).read_text(encoding="utf-8") == new, path
    # the committed patch set was rewritten in the workspace copy, unchanged
    assert (root / "megatron-otel-codegen/generated/patches/series").read_text() == (
        REPO / "generated/patches/series"
    ).read_text()


def test_install_block_pins_every_package_it_names() -> None:
    words = shlex.split(blocks()["install"])
    assert words[:4] == ["pip", "install", "-c", "megatron-otel-codegen/constraints.txt"]
    pins = dict(
        line.split("==", 1)
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    packages = words[4:]
    assert set(packages) == {"opentelemetry-api", "opentelemetry-sdk", "opentelemetry-exporter-otlp"}
    for package in packages:
        assert package in pins, f"{package} is not pinned in constraints.txt"
    # the API, SDK and exporter are released together: one version
    assert len({pins[p] for p in packages}) == 1
    for sibling in ("proto-grpc", "proto-http", "proto-common"):
        assert pins[f"opentelemetry-exporter-otlp-{sibling}"] == pins["opentelemetry-exporter-otlp"]


def test_section_documents_each_flag_and_links_the_generated_pages() -> None:
    section = PATCHES.read_text(encoding="utf-8")
    for option in ("--otel-enabled", "--otel-span-groups", "--otel-service-name"):
        assert option in section and option in (REPO / "generated/docs/configuration.md").read_text()
    for page in ("groups.md", "configuration.md"):  # the site's copy of generated/docs/
        assert f"](../taxonomy/{page})" in section and (REPO / "generated" / "docs" / page).is_file()
    runtime = "".join(p.read_text() for p in sorted((REPO / "codegen/otel_runtime").glob("*.py")))
    assert '"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"' in runtime  # the default the section states
    assert set(blocks()) == {
        "job-env",
        "job-env-cuda",
        "patch",
        "fork",
        "install",
        "flags",
        "otlp",
        "file layer_example.py",
        "console",
    }


def test_patch_block_on_a_tree_it_does_not_fit_changes_nothing(tmp_path: Path) -> None:
    """The same block on a checkout of megatron-core 0.18.2 (tagged as the README clones it): the
    check fails, the block stops, and the checkout is exactly as cloned. (0.19.0 no longer serves:
    since the runtime import became a line of its own, no hunk touches an import line that differs
    there, and the patch set applies to it.)"""
    pins = {pin.version: pin for pin in load_project(REPO / "specs", Diagnostics()).releases()}
    upstream = tagged_repository(source_root(pins["0.18.2"]), tmp_path / "upstream" / "Megatron-LM", TAG)
    root = workspace(tmp_path / "work")
    block = blocks()["patch"]
    result = subprocess.run(
        ["bash", "-e", "-c", block],
        cwd=root,
        env=env_redirecting_clone(upstream),
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "patch does not apply" in result.stderr or "does not match index" in result.stderr, result.stderr
    assert git(root / "Megatron-LM", "status", "--porcelain") == ""
