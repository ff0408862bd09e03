"""``codegen verify``: a captured run checked against the taxonomy the specs give."""

from __future__ import annotations

import sys

from codegen.cli.exits import EXIT_OK, EXIT_SPEC, EXIT_STALE
from codegen.cli.options import VerifyOptions


def run(options: VerifyOptions) -> int:
    from codegen.capture import CapturedSpan, iter_records
    from codegen.pipeline import plan_only
    from codegen.verify import verify
    from codegen.verify_ranks import is_multi_rank, verify_ranks

    # the capture first: a malformed one fails (CaptureError) before the specs are resolved
    records = list(iter_records(list(options.capture)))
    project, plan = plan_only(options.specs, options.source, options.release)
    groups = None
    if options.groups is not None:
        try:
            groups = project.select_groups(options.groups)
        except ValueError as exc:
            print(f"error: --groups: {exc}", file=sys.stderr)
            return EXIT_SPEC
    captured = [r for r in records if isinstance(r, CapturedSpan)]
    metrics = [r for r in records if not isinstance(r, CapturedSpan)]
    if is_multi_rank(captured):  # several ranks: per rank, and across them (verify_ranks)
        report = verify_ranks(project, plan, captured, groups, metrics)
    else:
        report = verify(project, plan, captured, groups, metrics)
    print(report.render())
    return EXIT_OK if report.clean else EXIT_STALE
