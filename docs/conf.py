"""Sphinx configuration for the generated docs (generated/docs/), built by `tox -e docs`:

    sphinx-build -W -c docs generated/docs <output dir>

The pages are Markdown (MyST); -W turns every warning (a broken link or reference, a page left
out of the index's toctree, a missing picture) into an error.
"""

project = "megatron-otel-codegen"
author = "megatron-otel-codegen"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
myst_heading_anchors = 3
html_theme = "alabaster"
html_title = "Megatron-LM OpenTelemetry telemetry"
