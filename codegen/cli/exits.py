"""The exit codes, and the one table that turns what a command raised into a message and a code."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable

from codegen.cli.options import Options

EXIT_OK, EXIT_STALE, EXIT_SPEC, EXIT_SOURCE, EXIT_INTERNAL = 0, 1, 2, 3, 4
EXIT_USAGE = EXIT_SPEC  # a usage error, as argparse exits
EXIT_DIFFERS = EXIT_STALE  # --check: the output (generated/, the checkout) is not what the specs give
EXIT_REFUSED = EXIT_SOURCE  # --in-place: the checkout holds work the run would overwrite


Handler = Callable[[BaseException, Options], int]


def _say(code: int, prefix: str = "") -> Handler:
    def handle(exc: BaseException, options: Options) -> int:
        print(f"{prefix}{exc}", file=sys.stderr)
        return code

    return handle


def _mismatch(exc: BaseException, options: Options) -> int:
    from codegen.target import SourceMismatch, mismatch_advice

    assert isinstance(exc, SourceMismatch)
    print(exc, file=sys.stderr)
    print(mismatch_advice(exc.failures, options.specs, exc.tree), file=sys.stderr)
    return EXIT_SOURCE


def _unrecognised(exc: BaseException, options: Options) -> int:
    from codegen.upstream import REPLACE_FLAG, UnrecognisedInstrumentation

    assert isinstance(exc, UnrecognisedInstrumentation)
    print(exc, file=sys.stderr)
    count = len(exc.lines)
    print(
        f"{REPLACE_FLAG}: {count} hand-written site{'s' if count != 1 else ''} not recognised; "
        "nothing was written",
        file=sys.stderr,
    )
    return EXIT_SOURCE


def _already_instrumented(exc: BaseException, options: Options) -> int:
    """The tree carries #6438: the error, and when the run named where to write (--out,
    --in-place), the command with the flag that replaces it added."""
    from codegen.diagnostics import rerun
    from codegen.upstream import REPLACE_FLAG

    print(f"error: {exc}", file=sys.stderr)
    if {"--out", "--in-place"} & set(options.argv):
        print(f"    to replace it: run '{rerun(options.argv, add=[REPLACE_FLAG])}'", file=sys.stderr)
    return EXIT_SOURCE


def _spec_error(exc: BaseException, options: Options) -> int:
    from codegen.diagnostics import SpecError

    assert isinstance(exc, SpecError)
    for warning in exc.diagnostics.render_warnings():
        print(warning, file=sys.stderr)
    print(exc.diagnostics.render(), file=sys.stderr)
    count = len(set(exc.diagnostics.items))
    print(f"{count} error{'s' if count != 1 else ''}", file=sys.stderr)
    return EXIT_SPEC


def _taxonomy(exc: BaseException, options: Options) -> int:
    print(f"{options.specs}: error: {exc}", file=sys.stderr)
    return EXIT_SPEC


def _placement(exc: BaseException, options: Options) -> int:  # the post-condition failed: a bug
    print(exc, file=sys.stderr)
    print("internal error in codegen (a bug: please report it with the lines above)", file=sys.stderr)
    return EXIT_INTERNAL


def _bug(exc: BaseException, options: Options) -> int:  # a bug in the generator, not in the input
    traceback.print_exception(exc)
    print("internal error in codegen (a bug: please report it with the traceback above)", file=sys.stderr)
    return EXIT_INTERNAL


def _table() -> list[tuple[type[BaseException], Handler]]:
    """Most specific first; imported only once something was raised (the report package and the
    target are not imported by every command)."""
    from codegen.capture import CaptureError
    from codegen.diagnostics import PlacementError, SpecError
    from codegen.inplace import InPlaceError
    from codegen.report.taxonomy import TaxonomyError
    from codegen.target import AlreadyInstrumented, ReleaseError, SourceMismatch
    from codegen.upstream import UnrecognisedInstrumentation, UpstreamError

    return [
        (ReleaseError, _say(EXIT_SPEC, "error: ")),
        (SourceMismatch, _mismatch),
        (UnrecognisedInstrumentation, _unrecognised),
        (SpecError, _spec_error),
        (TaxonomyError, _taxonomy),
        (CaptureError, _say(EXIT_SOURCE)),
        (InPlaceError, _say(EXIT_REFUSED, "error: ")),
        (AlreadyInstrumented, _already_instrumented),
        (UpstreamError, _say(EXIT_SOURCE, "error: ")),
        (OSError, _say(EXIT_SOURCE, "error: ")),
        (PlacementError, _placement),
        (Exception, _bug),
    ]


def exit_code(exc: Exception, options: Options) -> int:
    """Print what ``exc`` means for the user; the exit code that says it."""
    handler = next(handle for kind, handle in _table() if isinstance(exc, kind))
    return handler(exc, options)
