"""The ``codegen`` command line: ``parser`` turns the arguments into one frozen options object per
command (``options``), ``main`` sends it to the command's module (``apply``, ``in_place``,
``validate``, ``verify``, ``package``, ``report``) and turns what it raised into a message and an
exit code (``exits``); ``generation`` runs the pipeline through the result cache. Nothing outside
this package reads the command line."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from codegen.cli.apply import FORK_REPORT
from codegen.cli.exits import EXIT_INTERNAL, EXIT_OK, EXIT_SOURCE, EXIT_SPEC, EXIT_STALE, exit_code
from codegen.cli.options import (
    ApplyOptions,
    Options,
    PackageOptions,
    ReportOptions,
    ValidateOptions,
    VerifyOptions,
)
from codegen.cli.parser import build_parser, parse

__all__ = [
    "EXIT_INTERNAL",
    "EXIT_OK",
    "EXIT_SOURCE",
    "EXIT_SPEC",
    "EXIT_STALE",
    "FORK_REPORT",
    "build_parser",
    "main",
]


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(argv)
    if not options.specs.exists():
        print(f"{options.specs}: error: no such spec directory or file", file=sys.stderr)
        return EXIT_SPEC
    try:
        return _dispatch(options)
    except Exception as exc:  # noqa: BLE001  # exits.exit_code says what each means, bugs included
        return exit_code(exc, options)


def _dispatch(options: Options) -> int:
    """The one place a command's options meet its module (imported only when it runs)."""
    if isinstance(options, ReportOptions):
        from codegen.cli import report

        return report.run(options)
    if isinstance(options, VerifyOptions):
        from codegen.cli import verify

        return verify.run(options)
    if isinstance(options, PackageOptions):
        from codegen.cli import package

        return package.run(options)
    from codegen.cli.generation import spec_warnings_pass

    assert isinstance(options, ValidateOptions)  # apply's options are validate's and more
    if not spec_warnings_pass(options.specs, options.strict):
        return EXIT_SPEC
    if isinstance(options, ApplyOptions):
        if options.in_tree:
            from codegen.cli import in_place

            return in_place.run(options)
        from codegen.cli import apply

        return apply.run(options)
    from codegen.cli import validate

    return validate.run(options)
