"""The instrumentation scope every span and metric carries: name, version and the schema URL of
its semantic-convention registry (``generated/registry/`` of that version)."""

SCOPE = "megatron"
VERSION = "0.1.0"  # the generator's version (pyproject.toml); a test keeps them equal
REPOSITORY = "https://github.com/megatron-otel-codegen/megatron-otel-codegen"
SCHEMA_URL = f"{REPOSITORY}/tree/v{VERSION}/generated/registry"
# The distribution this package is as a dependency (``codegen package --runtime``) and the layouts
# of a tree's ``_taxonomy.py`` (its ``FORMAT``) it reads; the package refuses any other at import.
DISTRIBUTION = "megatron-otel-runtime"
TAXONOMY_FORMATS = (1,)
