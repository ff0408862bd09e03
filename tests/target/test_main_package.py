"""The import-time instrumentation package on Megatron-LM main: a tree carrying #6438's
hand-written instrumentation is left untouched (no module woven, even one whose bytes match a
supported release: never two sets of spans), with one warning naming the replace command; the
same commit without #6438 gets no such warning."""

from __future__ import annotations

import importlib.machinery
import warnings
from pathlib import Path
from typing import Any

from tests.target.test_package import _find, _table, finder_module, unpacked, wheel  # noqa: F401
from tests.upstream_main import snapshot


def _find_all(finder: Any, root: Path, table: dict[str, Any]) -> list[Any]:
    return [_find(finder, root, path) for path in table["files"] if (root / path).is_file()]


def test_a_tree_with_6438_is_left_alone_with_one_warning(finder_module: Any, unpacked: Path) -> None:  # noqa: F811
    with_6438 = snapshot("with")
    table = _table(unpacked)
    finder = finder_module.MegatronFinder(table)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        specs = _find_all(finder, with_6438, table)
        specs += _find_all(finder, with_6438, table)  # imported again: still one warning
    assert len(specs) > 10
    assert all(isinstance(s.loader, importlib.machinery.SourceFileLoader) for s in specs), "nothing woven"
    assert len(caught) == 1, [str(w.message) for w in caught]
    (warning,) = caught
    assert issubclass(warning.category, finder_module.HandWrittenTelemetryWarning)
    message = str(warning.message)
    assert message.startswith(f"{with_6438.resolve()}: not instrumented: ")
    assert f"--source {with_6438.resolve()} --in-place --replace-upstream" in message


def test_the_tree_without_6438_gets_no_hand_written_warning(finder_module: Any, unpacked: Path) -> None:  # noqa: F811
    minus = snapshot("minus")
    table = _table(unpacked)
    finder = finder_module.MegatronFinder(table)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _find_all(finder, minus, table)
    assert not [w for w in caught if issubclass(w.category, finder_module.HandWrittenTelemetryWarning)]
