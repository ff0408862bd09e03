"""The megatron-core release a tree says it is, read from its ``megatron/core/package_info.py``.

The one reader of that file: the generator (``codegen.target``) and the import hook
(``_finder``, shipped in the instrumentation wheel without the generator) both use it. Stdlib only.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE_INFO = "megatron/core/package_info.py"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def tree_release(root: Path) -> str | None:
    """The megatron-core version of the tree at ``root``, read from its ``package_info.py``
    (``MAJOR``/``MINOR``/``PATCH``/``PRE_RELEASE``, or a literal ``__version__``); None when the
    file is missing or says it in a way we do not read. The file is parsed, never executed."""
    try:
        module = ast.parse((root / PACKAGE_INFO).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    values: dict[str, object] = {}
    for node in module.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
        ):
            values[node.targets[0].id] = node.value.value
    parts = [values.get(k) for k in ("MAJOR", "MINOR", "PATCH")]
    if all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
        pre = values.get("PRE_RELEASE", "")
        return ".".join(str(p) for p in parts) + (pre if isinstance(pre, str) else "")
    version = values.get("__version__")
    return version if isinstance(version, str) and _NAME.fullmatch(version) else None
