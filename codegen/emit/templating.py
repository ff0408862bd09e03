"""The Jinja2 environment every rendered output shares (runtime package files, docs pages)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from codegen import TEMPLATES_DIR

if TYPE_CHECKING:
    from pathlib import Path

    import jinja2

__all__ = ["TEMPLATES_DIR", "environment"]


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
