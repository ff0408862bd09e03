"""Fixtures of the generator tests: the runtime fixture's demo module, pristine and instrumented."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from codegen.atomic import write_tree
from codegen.pipeline import generate
from tests.generator.support import FIXTURES, make_project
from tests.support.modules import forget, import_fresh


@pytest.fixture
def modules(tmp_path: Path) -> Iterator[tuple[ModuleType, ModuleType, ModuleType]]:
    """(pristine demo, instrumented demo, runtime) imported from fresh trees."""
    source = (FIXTURES / "runtime_src/megatron/demo.py").read_text(encoding="utf-8")
    specs, root = make_project(
        tmp_path, (FIXTURES / "runtime_specs.yaml").read_text(encoding="utf-8"), source
    )
    generation = generate(specs, root)
    fork = tmp_path / "fork"
    write_tree(fork, {p: new for p, (_, new) in generation.changes.items()}, base=root)
    pristine, _ = import_fresh(root)
    demo, otel = import_fresh(fork)
    yield pristine, demo, otel
    forget("megatron")
