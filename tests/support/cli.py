"""The ``codegen`` command in the test process: arguments as paths or strings, the exit code back.

``codegen("validate", specs)`` is ``codegen validate SPECS``; ``apply(specs, source=root,
out=fork)`` is ``codegen apply SPECS --source ROOT --out FORK`` (the options a test names, in
that order, then any others as given: ``apply(specs, "--check", source=root)``). What the
command prints goes where pytest's ``capsys`` reads it.
"""

from __future__ import annotations

from pathlib import Path


def codegen(*args: str | Path) -> int:
    """``codegen ARGS...``'s exit code (``codegen.cli.main``, in this process)."""
    from codegen.cli import main

    return main([str(arg) for arg in args])


def apply(
    specs: str | Path,
    *options: str | Path,
    source: str | Path | None = None,
    generated: str | Path | None = None,
    out: str | Path | None = None,
) -> int:
    """``codegen apply SPECS [--source SOURCE] [--generated GENERATED] [--out OUT] OPTIONS...``'s
    exit code."""
    named = {"--source": source, "--generated": generated, "--out": out}
    words = [word for option, value in named.items() if value is not None for word in (option, value)]
    return codegen("apply", specs, *words, *options)
