"""The instrumentation scope every span and metric carries: name, version and the schema URL of
its semantic-convention registry (``generated/registry/`` of that version)."""

SCOPE = "megatron"
VERSION = "0.1.0"  # the generator's version (pyproject.toml); a test keeps them equal
SCHEMA_URL = (
    "https://github.com/megatron-otel-codegen/megatron-otel-codegen"
    "/tree/v0.1.0/generated/registry"
)
