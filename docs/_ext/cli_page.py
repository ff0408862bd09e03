"""The command-line reference, rendered from codegen's argument parser when the site is built.

A page holding the line ``MARKER`` gets it replaced (Sphinx's ``source-read`` event, before MyST
parses the page) by one section per command: its description, its usage and a table of its
arguments with their help, all read from ``codegen.cli.build_parser()``, so the page cannot drift from
``codegen --help``. tests/unit/test_docs_cli.py checks every option of every command is listed.
"""

from __future__ import annotations

import argparse
from typing import Any

MARKER = "<!-- codegen-cli: generated from codegen.cli's parser -->"
WIDTH = 100


def _cell(text: str) -> str:
    text = " ".join(text.split())
    for char, escaped in (("\\", "\\\\"), ("|", "\\|"), ("*", "\\*"), ("<", "&lt;"), ("`", "\\`")):
        text = text.replace(char, escaped)
    return text


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:
        text = text % {**vars(action), "default": action.default}
    return text


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{names}`"
    metavar = action.metavar or action.dest.upper()
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    return f"`{names} {metavar}`"


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """``{name: subparser}`` of ``parser``'s commands, in the order ``--help`` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def render(parser: argparse.ArgumentParser) -> str:
    """The Markdown of every command of ``parser``."""
    lines: list[str] = []
    if parser.description:
        lines += ["```text", parser.description.strip(), "```", ""]
    for name, sub in commands(parser).items():
        lines += [f"### codegen {name}", ""]
        if sub.description:
            lines += [" ".join(sub.description.split()), ""]
        lines += ["```text", _usage(sub), "```", "", "| argument | what it does |", "|---|---|"]
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            lines.append(f"| {_name(action)} | {_cell(_help(action))} |")
        lines.append("")
    return "\n".join(lines)


def _source_read(app: Any, docname: str, source: list[str]) -> None:
    if MARKER in source[0]:
        from codegen.cli import build_parser

        source[0] = source[0].replace(MARKER, render(build_parser()))


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
