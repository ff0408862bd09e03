"""``codegen apply --in-place``: the checkout instrumented where it is (``codegen.inplace`` works out
what changes and guards the checkout; this module says it and writes)."""

from __future__ import annotations

import sys

from codegen.atomic import write_files
from codegen.cli.exits import EXIT_DIFFERS, EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from codegen.cli.options import ApplyOptions
from codegen.diagnostics import rerun
from codegen.inplace import InPlace, prepare, unsafe_to_overwrite


def run(options: ApplyOptions) -> int:
    problem = _option_problem(options)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    plan = prepare(options.run, options.docs, options.check)  # InPlaceError: exit 3 (exits)
    for edit in plan.hand_edits:
        severity = "warning" if options.discard_hand_edits and not options.check else "error"
        print(edit.render(severity), file=sys.stderr)
    if options.check:
        diff = plan.diff()
        if diff:
            sys.stdout.write(diff)
        if diff or plan.hand_edits:
            print(_check_advice(options, plan), file=sys.stderr)
            return EXIT_DIFFERS
        print(f"{options.source} is up to date with {options.specs} ({_generated_count(plan)})")
        return EXIT_OK
    if plan.hand_edits and not options.discard_hand_edits:
        count = len(plan.hand_edits)
        print(
            f"refused: {count} hand edit{'s' if count != 1 else ''} inside generated lines would be "
            "overwritten; move the change into the specs (or outside the generated lines), or run "
            f"'{rerun(options.argv, add=['--discard-hand-edits'])}' to regenerate them",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    writes = plan.writes()
    unsafe = [] if options.allow_dirty else unsafe_to_overwrite(plan, writes)
    if unsafe:
        for line in unsafe:
            print(f"error: {line}", file=sys.stderr)
        print(
            f"refused: nothing was written (commit or stash them, or run '{rerun(options.argv, add=['--allow-dirty'])}' "
            "to overwrite them)",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    write_files(plan.root, writes)
    sizes = plan.sizes()
    if not sizes:
        note = " (only its manifest updated)" if writes else ""
        print(f"{options.source} is up to date with {options.specs}: nothing to write{note}")
        return EXIT_OK
    print(f"updated {len(sizes)} file{'s' if len(sizes) != 1 else ''} in {options.source}:")
    for path, added, removed in sizes:
        print(f"  +{added} -{removed}  {path}")
    ours = sum(1 for path, _, _ in sizes if path in plan.generated)
    others = len(sizes) - ours
    rest = f"; {others} other file{'s' if others != 1 else ''} with no generated code left" if others else ""
    print(f"of these, {ours} of the {_generated_count(plan)}{rest}")
    return EXIT_OK


def _generated_count(plan: InPlace) -> str:
    """The files that carry generated code, as both the run and ``--check`` count them."""
    count = len(plan.generated)
    return f"{count} file{'s' if count != 1 else ''} generated or instrumented"


def _check_advice(options: ApplyOptions, plan: InPlace) -> str:
    """What ``--check`` says when the checkout differs: the commands that bring it up to date and
    then succeed (the same command without --check; with hand edits inside generated lines, the
    two ways out; with uncommitted changes in the files it would write, what the run needs)."""
    dirty = [] if options.allow_dirty else unsafe_to_overwrite(plan, plan.writes())
    extra = ["--allow-dirty"] if dirty else []
    head = f"{options.source} differs from what {options.specs} give"
    if dirty:
        head += (
            f"; {len(dirty)} file{'s' if len(dirty) != 1 else ''} it would write ha{'ve' if len(dirty) != 1 else 's'} "
            "uncommitted changes (commit or stash them first, or add --allow-dirty as below)"
        )
    apply = rerun(options.argv, drop=["--check"], add=extra)
    if not plan.hand_edits:
        return f"{head}: run '{apply}'"
    count = len(plan.hand_edits)
    discard = rerun(options.argv, drop=["--check"], add=[*extra, "--discard-hand-edits"])
    return (
        f"{head}, with {count} hand edit{'s' if count != 1 else ''} inside generated lines (above): either move "
        f"{'them' if count != 1 else 'it'} into the specs (or outside the generated lines) and run '{apply}', "
        f"or run '{discard}' to regenerate {'them' if count != 1 else 'it'} as the specs give"
    )


def _option_problem(options: ApplyOptions) -> str | None:
    named = [
        flag
        for flag, given in (
            ("--docs", options.docs is not None),
            ("--allow-dirty", options.allow_dirty),
            ("--discard-hand-edits", options.discard_hand_edits),
        )
        if given
    ]
    if not options.in_place:
        return f"{', '.join(named)}: only with --in-place"
    if options.source is None:
        return "--in-place: name the checkout to instrument with --source CHECKOUT"
    for flag, given in (("--out", options.out is not None), ("--generated", options.generated is not None)):
        if given:
            return f"--in-place writes into --source {options.source}: {flag} does not go with it"
    if options.docs is not None:
        docs, root = options.docs.resolve(), options.source.resolve()
        if not docs.is_relative_to(root) or docs == root:
            return f"--docs {options.docs}: not a folder inside the checkout {options.source}"
        if docs.exists() and not docs.is_dir():
            return f"--docs {options.docs}: a file is in the way"
    return None
