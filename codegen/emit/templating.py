"""The Jinja2 environment every rendered output shares (runtime package files, docs pages)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2

# The one templates path: the docs pages and the report (and the cache key, codegen/cache.py).
# Package data (codegen/templates/), so an installed generator (wheel, pre-commit, pipx) finds them.
TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"


def environment(templates_dir: Path) -> jinja2.Environment:
    """Templates render Python and Markdown verbatim: no escaping, no silent undefined names.
    (Jinja2 is imported here, not with the module: the CLI's result cache reads TEMPLATES_DIR
    and an unchanged run never renders.)"""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir)),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
