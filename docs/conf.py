"""Sphinx configuration of the manual (docs/), built by `tox -e docs`:

    sphinx-build -W --keep-going -n -b html docs <output dir>

The pages are Markdown (MyST). The generated taxonomy pages (generated/docs/) are part of the site
as docs/taxonomy/, a copy made afresh here on every build (git ignores it; a symlink would not do:
MyST resolves links through it to generated/docs/, outside the site); the command-line reference is rendered from codegen's argument
parser when the site is built (docs/_ext/cli_page.py), the layout page from the modules' docstrings and
the import-linter contracts (docs/_ext/layout_page.py). -W turns every warning (a broken link or
heading anchor, a page left out of every toctree, a missing picture) into an error; -n (nitpicky)
also reports every reference whose target is missing.
"""

import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

shutil.rmtree(DOCS / "taxonomy", ignore_errors=True)
shutil.copytree(DOCS.parent / "generated" / "docs", DOCS / "taxonomy")

project = "megatron-otel-codegen"
author = "megatron-otel-codegen"
extensions = ["myst_parser", "cli_page", "layout_page"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "_static"]
myst_heading_anchors = 3
suppress_warnings: list[str] = []
html_theme = "alabaster"
# long commands wrap in code blocks (docs/_static/manual.css) instead of being cut at the edge
html_static_path = ["_static"]
html_css_files = ["manual.css"]
html_title = "megatron-otel-codegen"
# option names in prose (the parser's help: "with --source") stay as written, not en dashes
smartquotes = False
