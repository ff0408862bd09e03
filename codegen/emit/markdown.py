"""The one Markdown escaper of the generated pages (docs, the releases page, a run's report)."""

from __future__ import annotations

import re
from collections.abc import Iterable


def cell(text: str) -> str:
    """Text for one table cell: pipes escaped, line breaks (which would end the row) folded."""
    return re.sub(r"\s*\n\s*", " ", text).replace("|", "\\|")


def code_cell(text: str) -> str:
    """``text`` as inline code in a table cell."""
    return f"`{cell(text)}`"


def code_list(texts: Iterable[str], empty: str = "–") -> str:
    """``a``, ``b``: each text as inline code, comma-separated; ``empty`` when there are none."""
    return ", ".join(code_cell(t) for t in texts) or empty
