"""The layout page, rendered from the code when the site is built: the modules from their own
docstrings, the layers from the import-linter contracts in pyproject.toml.

A page holding ``MODULES`` gets it replaced (Sphinx's ``source-read`` event, before MyST parses the
page) by one table per package of ``codegen/`` (the runtime's and the shim's included): each
module and the first paragraph of its docstring, read with ``ast`` (nothing is imported). A page
holding ``LAYERS`` gets every ``[[tool.importlinter.contracts]]`` of pyproject.toml, its layers top
to bottom or what it forbids. So the page cannot drift from the code or from what `lint-imports`
enforces; tests/unit/test_layout_page.py checks it names every module and every contract.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MODULES = "<!-- layout: the modules, rendered from their docstrings -->"
LAYERS = "<!-- layout: the layers, rendered from pyproject.toml's import-linter contracts -->"


def _cell(text: str) -> str:
    text = " ".join(text.split())
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")


def summary(path: Path) -> str:
    """The first paragraph of the module's docstring (empty when it has none)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return doc.strip().split("\n\n", 1)[0]


def packages(root: Path = REPO / "codegen") -> dict[Path, list[Path]]:
    """``{package directory: its modules}``, packages and modules in name order."""
    out: dict[Path, list[Path]] = {}
    for init in sorted(root.rglob("__init__.py")):
        if "__pycache__" not in init.parts:
            out[init.parent] = sorted(
                init.parent.glob("*.py"), key=lambda p: (p.name != "__init__.py", p.name)
            )
    return out


def render_modules(repo: Path = REPO) -> str:
    """The Markdown of every package under ``codegen/``: its docstring, then its modules' table."""
    lines: list[str] = []
    for package, modules in packages(repo / "codegen").items():
        name = package.relative_to(repo).as_posix()
        lines += [f"### `{name}/`", "", " ".join(summary(package / "__init__.py").split()), ""]
        lines += ["| module | its one idea |", "|---|---|"]
        for module in modules:
            if module.name != "__init__.py":
                lines.append(f"| `{module.name}` | {_cell(summary(module))} |")
        lines.append("")
    return "\n".join(lines)


def contracts(repo: Path = REPO) -> list[dict[str, Any]]:
    """pyproject.toml's import-linter contracts, in its order."""
    config = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))
    found: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return found


def _names(modules: list[str], container: str = "") -> str:
    return ", ".join(f"`{container}{m.strip()}`" for m in modules)


def render_layers(repo: Path = REPO) -> str:
    """The Markdown of every contract: a layers contract's layers top to bottom (a module imports
    only from the layers below its own; ``|`` joins modules of one layer that import nothing of
    each other), a forbidden contract's sources and what they may not import."""
    lines: list[str] = []
    for contract in contracts(repo):
        lines += [f"- **{_cell(contract['name'])}** ({contract['type']})", ""]
        if contract["type"] == "layers":
            container = "".join(f"{c}." for c in contract.get("containers", []))
            for number, layer in enumerate(contract["layers"], 1):
                lines.append(f"  {number}. {_names(layer.split('|'), container)}")
            if contract.get("ignore_imports"):
                lines += ["", f"  imports let through: {_names(contract['ignore_imports'])}"]
        elif contract["type"] == "forbidden":
            lines.append(f"  {_names(contract['source_modules'])} import none of")
            lines.append(f"  {_names(contract['forbidden_modules'])}")
        lines.append("")
    return "\n".join(lines)


def _source_read(app: Any, docname: str, source: list[str]) -> None:
    if MODULES in source[0]:
        source[0] = source[0].replace(MODULES, render_modules())
    if LAYERS in source[0]:
        source[0] = source[0].replace(LAYERS, render_layers())


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
