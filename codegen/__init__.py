"""megatron-otel-codegen: OpenTelemetry instrumentation for Megatron-LM generated from YAML specs."""

from pathlib import Path

# The one templates path: the docs pages and runtime files (codegen.emit), the report's page
# (codegen.report) and the cache key (codegen/cache.py). Package data (codegen/templates/), so an
# installed generator (wheel, pre-commit, pipx) finds them. Here, not in codegen.emit, so that the
# report need not import the emitter (emit imports report, never the other way: pyproject.toml).
TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
