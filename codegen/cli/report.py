"""``codegen report``: where a run's time went, from its captured spans (``codegen/report/``)."""

from __future__ import annotations

import sys

from codegen.cli.exits import EXIT_OK, EXIT_USAGE
from codegen.cli.options import ReportOptions


def run(options: ReportOptions) -> int:
    from codegen.diagnostics import Diagnostics
    from codegen.report import Selection, build, build_from_store, build_with_chdb, write_outputs
    from codegen.report.parse import located
    from codegen.spec.load import load_project

    if bool(options.captures) == (options.store is not None):
        print("error: codegen report takes capture files or --store ADDRESS (one of them)", file=sys.stderr)
        return EXIT_USAGE
    selection = Selection(options.table, options.service, options.run_id, options.since, options.until)
    chdb = options.engine == "chdb" or options.save_store is not None
    if options.store is not None and options.save_store is not None:
        print("error: --save-store loads capture files into a new chdb store, not --store", file=sys.stderr)
        return EXIT_USAGE
    if options.captures and not chdb and selection.options():
        print(
            f"error: {', '.join(selection.options())}: capture files are read whole; to select among "
            "their spans add --engine chdb (the report-store extra), or name only the run's files",
            file=sys.stderr,
        )
        return EXIT_USAGE  # never ignored: the report would not be the selection's
    project = load_project(options.specs, Diagnostics())
    if options.store is not None:
        outputs = build_from_store(project, options.store, selection)
    elif chdb:
        outputs = build_with_chdb(project, list(options.captures), selection, options.save_store)
    else:
        outputs = build(project, list(options.captures), options.jobs)
    try:
        written, window = (
            write_outputs(outputs, options.out, options.title, options.trace_ranks, options.trace_iterations)
            if options.out is not None
            else ([], "")
        )
    finally:
        outputs.close()
    for name, (count, where) in sorted(outputs.report.unknown.items()):
        message = f"span '{name}' ({count}x) is not in the specs' taxonomy"
        print(located(where, message, "warning"), file=sys.stderr)
    print(outputs.text, end="")
    for path in written:
        print(f"wrote {path}" + (f" ({window})" if path.name == "trace.perfetto.json" else ""))
    return EXIT_OK
