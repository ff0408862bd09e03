"""An instrumented module must not gain a public name: ``from module import *`` in a module that
has its own ``otel`` must keep it (issue 16, item 5)."""

from __future__ import annotations

from pathlib import Path

from codegen.atomic import write_tree
from codegen.pipeline import generate
from tests.generator.support import WORK_SPEC, make_project
from tests.support.modules import forget, mount

SPEC = WORK_SPEC
SOURCE = "def work(x):\n    return x + 1\n"


def _star_import(tmp_path: Path, all_: str | None) -> dict[str, object]:
    """What ``from megatron.demo import *`` leaves in a namespace that had its own ``otel``."""
    source = SOURCE if all_ is None else f"__all__ = {all_}\n\n\n{SOURCE}"
    specs, root = make_project(tmp_path, SPEC, source)
    generation = generate(specs, root)
    fork = tmp_path / "fork"
    write_tree(fork, {p: new for p, (_, new) in generation.changes.items()}, base=root)
    namespace: dict[str, object] = {"otel": "the importer's own"}
    mount(fork, "megatron")
    try:
        exec("from megatron.demo import *", namespace)
    finally:
        forget("megatron")
    del namespace["__builtins__"]
    return namespace


def test_a_module_with_all_exports_only_what_it_lists(tmp_path: Path) -> None:
    namespace = _star_import(tmp_path, "['work']")
    assert set(namespace) == {"otel", "work"} and namespace["otel"] == "the importer's own"


def test_a_module_without_all_gains_no_public_name(tmp_path: Path) -> None:
    namespace = _star_import(tmp_path, None)
    assert set(namespace) == {"otel", "work"} and namespace["otel"] == "the importer's own"
