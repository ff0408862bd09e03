"""The module kept alive to the interpreter's final clearing of modules (held by ``sys``, whose
attributes outlive every module but builtins): the methods the ``__del__`` calls run their bodies as the pristine one does, with the
runtime's name already None, telemetry off or on."""

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
sys.path.insert(0, {root!r})
import megatron.demo
sys._kept_alive = megatron.demo  # the module outlives sys.modules, to the final clearing
"""


def _run(module, env):
    root = str(Path(module.__file__).resolve().parents[1])
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.format(root=root)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        check=False,
    )


def check(before, after, otel, exporter):
    pristine = _run(before, {})
    assert pristine.returncode == 0 and pristine.stdout == "flushed at exit\nlogged at exit\nclosed at exit\n", pristine
    for env in ({}, {"MEGATRON_OTEL_ENABLED": "1", "MEGATRON_OTEL_EXPORTER": "none"}):
        instrumented = _run(after, env)
        assert instrumented.returncode == 0, instrumented
        assert instrumented.stdout == pristine.stdout, (env, instrumented)
        assert "Exception ignored" not in instrumented.stderr, (env, instrumented.stderr)
