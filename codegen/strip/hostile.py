"""Source files of a ``--source`` tree are hostile input too: parse them without crashing.

libcst's native parser recurses without a limit: a file nesting a few thousand brackets or unary
operators (``-----x``) overflows its stack and kills the process (SIGSEGV), and a chain of tens of
thousands of operators takes minutes. CPython's own parser refuses such files with a clean error
("too many nested parentheses", "too complex"); real code never comes near. So a cheap scan flags
suspicious text (deep brackets, long operator runs, huge lines or files), and only then CPython's
parser, which is guarded, decides before libcst is asked.
"""

from __future__ import annotations

import ast
import re
from itertools import accumulate

import libcst as cst

_BRACKETS = re.compile(r"[()\[\]{}]")
_OPERATOR_RUN = re.compile(r"[-+~]{100}")
_NOT_RUN = re.compile(r"(?:not\s+){100}")
LONG_LINE = 20000
MAX_BRACKET_DEPTH = 150  # CPython refuses 200 nested brackets
LARGE = 1 << 20  # bytes of text above which CPython's parser always checks first


def suspicious(source: str) -> bool:
    """Whether ``source`` may nest deeper than a parser's stack allows (cheap; false positives
    only cost a check by CPython's parser)."""
    # this runs on every file the specs touch: patterns with a literal prefix, no regex per line
    if (
        len(source) > LARGE
        or _OPERATOR_RUN.search(source)
        or (source.count("not") >= 100 and _NOT_RUN.search(source))
        or max(map(len, source.split("\n"))) >= LONG_LINE
    ):
        return True
    steps = (1 if b in "([{" else -1 for b in _BRACKETS.findall(source))
    return max(accumulate(steps), default=0) > MAX_BRACKET_DEPTH


def parse_module(source: str) -> cst.Module:
    """``libcst.parse_module``, refusing with :class:`libcst.ParserSyntaxError` what CPython's
    parser refuses first, when the text looks pathological."""
    if suspicious(source):
        try:
            compile(source, "<source>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        except SyntaxError as exc:
            raise cst.ParserSyntaxError(
                str(exc.msg), lines=source.splitlines() or [""], raw_line=exc.lineno or 1, raw_column=0
            ) from None
        except (RecursionError, MemoryError, ValueError) as exc:
            why = "nested too deeply for a parser" if not isinstance(exc, ValueError) else str(exc)
            raise cst.ParserSyntaxError(
                why, lines=source.splitlines() or [""], raw_line=1, raw_column=0
            ) from None
    return cst.parse_module(source)
