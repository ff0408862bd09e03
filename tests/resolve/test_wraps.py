"""resolve/hooks.py's rewrites and the decorator form through the plan: the one call a ``wrap:``
hook rewrites, the function a ``form: decorator`` span decorates."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.plans import placed

SOURCE = """\
def launch(pool, job):
    prepared = prepare(job)
    handle = pool.submit(run, prepared)
    return handle


class Worker:
    def run(self):
        return 1
"""


@pytest.mark.parametrize(
    ("call", "rewrites", "errors"),
    [("pool.submit", {"wrap launch": 3}, []), ("pool.map", {}, ["wrap launch"])],  # the call lacked
)
def test_a_wrap_hook_rewrites_the_named_call(
    tmp_path: Path, call: str, rewrites: dict[str, int], errors: list[str]
) -> None:
    hook = f"  - function: launch\n    wrap: {{call: {call}, argument: 0, with: otel.in_context}}\n"
    result = placed(tmp_path, "file: megatron/demo.py\nhooks:\n" + hook, SOURCE)
    assert result.rewrites == rewrites and list(result.errors) == errors


def test_a_decorator_span_decorates_its_method_and_wraps_nothing(tmp_path: Path) -> None:
    spec = "file: megatron/demo.py\nspans:\n  - {name: demo.run, group: step, function: Worker.run, form: decorator}\n"
    result = placed(tmp_path, spec, SOURCE)
    assert result.decorated == {"demo.run": "run"} and result.wraps == {}
