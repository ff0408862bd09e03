"""The static checks of spec expressions: what passes, what warns, and the message details the
bad-spec corpus does not pin down (the failing cases live in tests/bad_specs/expr_*.yaml)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from codegen.cli import main
from codegen.resolve.expressions import free_names
from tests.generator.support import make_project, pin_fixture_tree

SOURCE = """\
import os
from collections import OrderedDict

import torch

from megatron.base import Base

LIMIT = 3


def helper():
    return 1


class Local:
    size = 4

    def __init__(self):
        self.width = 2


class Layer(Local, torch.nn.Module):
    def __init__(self, number):
        super().__init__()
        self.layer_number = number
        self.first, (self.second, *self.rest) = 1, (2, 3)
        self.register_buffer("scale", None)
        setattr(self, "named", 1)

    @property
    def doubled(self):
        return self.layer_number * 2

    def forward(this, x, *args, flag=False, **kwargs):
        hidden = x * 2
        for item in args:
            hidden = hidden + item
        out = hidden + LIMIT
        return out


class Derived(Base):
    def forward(self, x):
        return x


class Mapping(OrderedDict):
    def lookup(self, key):
        def inner():
            return key

        return inner()
"""
BASE = """\
import torch


class Grand(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.from_grand = 1


class Base(Grand):
    def setup(self):
        self.from_base = 2
"""


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEGEN_CACHE_DIR", str(tmp_path / "cache"))


def _project(tmp_path: Path, spec: str) -> Path:
    """The spec directory; the source is the pinned release's tree, where a spec that does not
    resolve is a spec error (exit 2), not a mismatch with a tree of one's own (exit 3)."""
    specs, root = make_project(tmp_path, spec, SOURCE, {"megatron/base.py": BASE})
    tree = tmp_path / "cache" / "megatron-core-0.0.0-000000000000"
    if tree.exists():
        shutil.rmtree(tree)
    pin_fixture_tree(tmp_path / "cache", root)
    return specs


def _run(tmp_path: Path, spec: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["validate", str(_project(tmp_path, spec))])
    return code, capsys.readouterr().err


def _span(function: str, **keys: str) -> str:
    lines = [
        "file: megatron/demo.py",
        "spans:",
        "  - name: demo.span",
        "    group: layer",
        f"    function: {function}",
    ]
    lines += [f"    {key}: {value}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


BOUND = [
    # parameters of every kind, a module global, an import, a builtin, the runtime alias, a module
    # function, names the expression binds itself (comprehension, lambda)
    "{demo.a: 'this.layer_number + x + len(args) + int(flag) + len(kwargs)'}",
    "{demo.a: 'LIMIT + helper() + os.getpid() + otel.STEP'}",
    "{demo.a: '[v for v in args if v]', demo.b: '(lambda z: z)(x)', demo.c: 'sum(i for i in range(3))'}",
    # attributes of the class, its bases in the module (class body, __init__) and torch.nn.Module
    "{demo.a: this.first, demo.b: this.second, demo.c: this.rest, demo.d: this.scale, demo.e: this.named}",
    "{demo.a: this.doubled, demo.b: this.width, demo.c: this.size, demo.d: this.training, demo.e: this.__class__}",
]


@pytest.mark.parametrize("attributes", BOUND)
def test_bound_names_pass(attributes: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(tmp_path, _span("Layer.forward", attributes=attributes), capsys)
    assert code == 0, err
    # only the registry's reminder that these ad-hoc attributes have no declared type
    assert [line for line in err.splitlines() if "warning" in line and "has no type" not in line] == []


def test_end_attributes_see_the_covered_statements(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _span("Layer.forward", around="{for: item in args}", end_attributes="{demo.a: item + hidden}")
    code, err = _run(tmp_path, spec, capsys)
    assert code == 0, err
    spec = _span("Layer.forward", around="{for: item in args}", attributes="{demo.a: item}")
    code, err = _run(tmp_path, spec, capsys)
    assert code == 2
    assert "'item' is assigned in forward only after this point" in err


def test_after_hook_sees_what_its_statement_assigns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hook = "file: megatron/demo.py\nhooks:\n  - {function: Layer.forward, %s: {assign: out}, call: 'otel.mark(out)'}\n"
    code, err = _run(tmp_path, hook % "after", capsys)
    assert code == 0, err
    code, err = _run(tmp_path, hook % "before", capsys)
    assert code == 2
    assert "call: 'out' is assigned in forward only after this point" in err


def test_bases_are_followed_into_other_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _span("Derived.forward", attributes="{demo.a: self.from_base, demo.b: self.from_grand}")
    code, err = _run(tmp_path, spec, capsys)
    assert code == 0, err
    spec = _span("Derived.forward", attributes="{demo.a: self.from_bse}")
    code, err = _run(tmp_path, spec, capsys)
    assert code == 2
    assert "'self.from_bse' is not an attribute of Derived or its bases; did you mean 'from_base'?" in err


def test_enclosing_function_names_are_bound(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(tmp_path, _span("Mapping.lookup.inner", attributes="{demo.a: key}"), capsys)
    assert code == 0, err


def test_a_base_outside_the_tree_makes_an_attribute_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = _project(tmp_path, _span("Mapping.lookup", attributes="{demo.a: self.maxlen}"))
    expected = (
        "case.yaml:6:26: warning: attribute 'demo.a': cannot check 'self.maxlen': Mapping is not assigned "
        "'maxlen' in the source tree, but its base collections.OrderedDict is outside the source tree"
    )
    for _ in range(2):  # the second run answers from the result cache, and warns again
        assert main(["validate", str(specs)]) == 0
        assert expected in capsys.readouterr().err


def test_free_names_come_from_the_scope_analysis() -> None:
    found = free_names("{k: self.a.b + self.c for k in keys if (n := k)} | {'x': lambda y: y + z}")
    assert found is not None
    assert [(f.name, f.attributes) for f in found] == [("keys", ()), ("self", ("a", "c")), ("z", ())]
    assert free_names("len(x) + print") == [free_names("x")[0]]  # type: ignore[index]
