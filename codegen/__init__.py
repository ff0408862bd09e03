"""megatron-otel-codegen: OpenTelemetry instrumentation for Megatron-LM generated from YAML specs."""

from pathlib import Path

# The one templates path: the docs pages and runtime files (codegen.emit), the report's page
# (codegen.report) and the cache key (codegen/cache.py). The top-level templates/ of a checkout;
# installed from the wheel, the same files as package data (codegen/templates/: pyproject.toml's
# package-dir). Here, not in codegen.emit, so that the report need not import the emitter (emit
# imports report, never the other way: pyproject.toml).
_PACKAGE = Path(__file__).resolve().parent
TEMPLATES_DIR = _PACKAGE / "templates"
if not TEMPLATES_DIR.is_dir():
    TEMPLATES_DIR = _PACKAGE.parent / "templates"
