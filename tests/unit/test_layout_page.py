"""docs/layout.md is the layout: rendered (docs/_ext/layout_page.py) from every module's own
docstring and from the import-linter contracts `lint-imports` enforces, never typed by hand."""

from __future__ import annotations

import re
import tomllib

from tests.support.doc_blocks import REPO
from tests.support.modules import load_file

page = load_file(REPO / "docs" / "_ext" / "layout_page.py", "layout_page")
LAYOUT = REPO / "docs" / "layout.md"
MODULES = sorted(p for p in (REPO / "codegen").rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_under_codegen_has_a_docstring_saying_its_idea() -> None:
    assert len(MODULES) > 100  # the runtime's, the shim's and the instrumentation's included
    missing = [p.relative_to(REPO).as_posix() for p in MODULES if not page.summary(p).strip()]
    assert not missing, f"modules without a docstring: {missing}"


def test_the_page_names_every_module_with_its_docstring() -> None:
    rendered = page.render_modules()
    for path in MODULES:
        package = path.parent.relative_to(REPO).as_posix()
        assert f"### `{package}/`" in rendered
        if path.name != "__init__.py":
            first = " ".join(page.summary(path).split())[:40]
            section = rendered.split(f"### `{package}/`", 1)[1].split("\n### ", 1)[0]
            assert f"| `{path.name}` | " in section, path
            assert first.replace("|", "\\|").replace("<", "&lt;")[:20] in section, path


def test_the_layers_are_the_import_linter_contracts() -> None:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    rendered = page.render_layers()
    assert len(contracts) >= 4
    for contract in contracts:
        assert contract["name"] in rendered
        if contract["type"] == "layers":
            container = "".join(f"{c}." for c in contract.get("containers", []))
            block = rendered.split(contract["name"], 1)[1].split("\n- **", 1)[0]
            numbered = re.findall(r"^  (\d+)\. (.+)$", block, re.MULTILINE)
            assert [int(n) for n, _ in numbered] == list(range(1, len(contract["layers"]) + 1))
            for (_, names), layer in zip(numbered, contract["layers"], strict=True):
                assert names == ", ".join(f"`{container}{m.strip()}`" for m in layer.split("|"))
        else:
            for module in contract["source_modules"] + contract["forbidden_modules"]:
                assert f"`{module}`" in rendered


def test_the_page_holds_both_markers_and_names_no_module_that_is_gone() -> None:
    text = LAYOUT.read_text()
    assert page.MODULES in text and page.LAYERS in text
    # what the page still says by hand names only paths that exist
    for named in re.findall(r"\b(codegen/[\w/]*\w(?:\.py)?)", text):
        assert (REPO / named).exists(), f"docs/layout.md names {named}, which does not exist"
    assert "layout_page" in (REPO / "docs" / "conf.py").read_text()
