"""``codegen validate``: the specs resolved against the sources, nothing written."""

from __future__ import annotations

from codegen.cli.exits import EXIT_OK
from codegen.cli.generation import cached_run
from codegen.cli.options import ValidateOptions


def run(options: ValidateOptions) -> int:
    result = cached_run(options.run)
    print(
        f"{options.specs}: {result.spans} spans in {result.files} files resolve against "
        f"{result.source_root} (megatron-core {result.release})"
    )
    return EXIT_OK
