"""The generator's distribution layout (pyproject.toml): the packages it lists are every package
under codegen/ plus the top-level templates/ mapped in as ``codegen.templates``, and every template
or page asset the generator renders lies under templates/, none under codegen/."""

from __future__ import annotations

import tomllib
from pathlib import Path

import codegen

REPO = Path(__file__).resolve().parents[2]
RENDERED = (".j2", ".css", ".js", ".html")


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_listed_packages_are_every_package_under_codegen() -> None:
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "codegen").rglob("__init__.py")}
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    assert listed == found | {"codegen.templates"}


def test_templates_live_at_the_top_level_only() -> None:
    setuptools = _pyproject()["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"codegen.templates": "templates"}
    assert codegen.TEMPLATES_DIR == REPO / "templates"
    top = [p for p in (REPO / "templates").rglob("*") if p.is_file()]
    assert {p.parent.name for p in top} == {"docs", "goodput", "report"}
    assert all(p.suffix in RENDERED for p in top), top
    inside = [p for p in (REPO / "codegen").rglob("*") if p.suffix in RENDERED]
    assert inside == []
    # every kind the generator renders is carried as package data
    patterns = setuptools["package-data"]["codegen.templates"]
    assert {p.suffix for p in top} <= {pattern.rsplit("*", 1)[1] for pattern in patterns}
