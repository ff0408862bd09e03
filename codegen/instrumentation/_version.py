"""Written by `codegen package`: the distribution's version and what it supports."""

__version__ = "0.0.0"
RELEASES = ("0.19.2",)
MEGATRON_CORE_REQUIREMENT = "megatron-core>=0.19.2,<=0.19.2"
SCHEMA_URL = ""
