"""What needs a process of its own: interpreter exit, SIGTERM, spawn, a missing SDK.

Each test runs a small script against the rendered runtime; spans go to the console exporter the
runtime builds itself (MEGATRON_OTEL_EXPORTER=console, batched), so a span name on stdout proves the
span was ended *and* flushed by the runtime.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from runtime_pkg_support import PRELUDE, Rendered, run_script, span_names


def test_spans_flushed_at_interpreter_exit(rendered: Rendered) -> None:
    result = run_script(rendered, "pretrain()\nprint('training done', flush=True)\n")
    assert result.returncode == 0, result.stderr
    names = span_names(result.stdout)
    assert result.stdout.index("training done") < result.stdout.index('"name"')  # flushed at exit
    assert names.count("megatron.startup") == 1
    assert names.count("megatron.train") == 2
    assert names.count("megatron.train.iteration") == 4
    assert names.count("megatron.startup.imports") == 1


def test_spans_exported_when_an_exception_escapes_to_the_top(rendered: Rendered) -> None:
    result = run_script(rendered, "pretrain(fail=lambda: 1 / 0)\n")
    assert result.returncode == 1
    assert "ZeroDivisionError" in result.stderr
    names = span_names(result.stdout)
    assert names.count("megatron.train") == 2 and names.count("megatron.startup") == 1
    assert '"status_code": "ERROR"' in result.stdout


def test_spans_exported_on_sys_exit_early_exit_path(rendered: Rendered) -> None:
    result = run_script(rendered, "pretrain(fail=lambda: sys.exit(0))\nprint('not reached')\n")
    assert result.returncode == 0, result.stderr
    assert "not reached" not in result.stdout
    assert span_names(result.stdout).count("megatron.train") == 2


def test_exit_hooks_installed_once_across_two_runs_and_second_run_flushes_at_exit(
    rendered: Rendered,
) -> None:
    body = """\
    import atexit
    before = atexit._ncallbacks(), signal.getsignal(signal.SIGTERM)
    pretrain()
    first = atexit._ncallbacks()
    handler = signal.getsignal(signal.SIGTERM)
    otel.reset()  # destroy_global_state()
    print("RUN 2", flush=True)
    pretrain(iterations=6)
    assert atexit._ncallbacks() == first == before[0] + 1, (before, first, atexit._ncallbacks())
    assert signal.getsignal(signal.SIGTERM) is handler is not before[1]
    """
    result = run_script(rendered, body, env={"MEGATRON_OTEL_SIGTERM_FLUSH_TIMEOUT_S": "5"})
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.split("RUN 2")
    assert span_names(first).count("megatron.train") == 2  # flushed by reset()
    assert span_names(second).count("megatron.train") == 3  # flushed by the atexit hook
    assert span_names(second).count("megatron.startup") == 1


# A Python handler installed before ours runs first (it may return and let training go on):
# test_providers_forks_and_sigterm.py covers the handler that returns, the one that raises, and every thread.


def test_sigterm_default_action_is_reraised_after_the_flush(rendered: Rendered) -> None:
    body = """\
    otel.configure()
    otel.startup(STAMPS)
    otel.begin_training(0, None)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
    print("survived")
    """
    result = run_script(rendered, body, env={"MEGATRON_OTEL_SIGTERM_FLUSH_TIMEOUT_S": "5"})
    assert result.returncode == -signal.SIGTERM, result.stderr
    assert "survived" not in result.stdout
    assert span_names(result.stdout).count("megatron.train") == 1


def test_sigterm_without_drain_timeout_keeps_the_default_action_and_does_not_flush(
    rendered: Rendered,
) -> None:
    body = """\
    otel.configure()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    otel.startup(STAMPS)
    otel.begin_training(0, None)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
    """
    result = run_script(rendered, body)
    assert result.returncode == -signal.SIGTERM, result.stderr
    assert span_names(result.stdout) == []


WORKER = """\
import importlib
import sys


def work(bootstrap, module, queue):
    otel = importlib.import_module(module)
    otel.setup_worker(bootstrap)
    span = otel.CHECKPOINT and otel.start_span("megatron.checkpoint.save.io_write")
    span and span.end()
    queue.put((sorted(otel.enabled_groups()), bool(span)))
"""


@pytest.mark.parametrize("enabled", ["1", "0"])
def test_worker_bootstrap_round_trips_through_pickle_in_a_spawned_process(
    rendered: Rendered, enabled: str
) -> None:
    (rendered.root / "ckpt_worker.py").write_text(WORKER, encoding="utf-8")
    body = f"""\
    import multiprocessing, pickle
    import ckpt_worker

    otel.configure()
    bootstrap = otel.worker_bootstrap()
    assert pickle.loads(pickle.dumps(bootstrap)) == bootstrap
    assert all(type(v) in (bool, str, int, float, list, dict) for v in bootstrap.values())
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(
        target=ckpt_worker.work, args=(bootstrap, {rendered.project.runtime.module!r}, queue)
    )
    process.start()
    print("WORKER", queue.get(timeout=60), flush=True)
    process.join(60)
    assert process.exitcode == 0, process.exitcode
    print("BOOTSTRAP", sorted(bootstrap), flush=True)
    """
    result = run_script(rendered, body, env={"MEGATRON_OTEL_ENABLED": enabled})
    assert result.returncode == 0, result.stderr
    names = span_names(result.stdout)
    if enabled == "1":
        assert "WORKER (['checkpoint', 'job', 'layer', 'step'], True)" in result.stdout
        assert names == ["megatron.checkpoint.save.io_write"]  # exported by the worker
        assert (
            "BOOTSTRAP ['enabled', 'environ', 'export', 'exporter', 'resource', 'service_name', 'span_groups']"
            in result.stdout
        )
    else:
        assert "WORKER ([], False)" in result.stdout
        assert "BOOTSTRAP ['enabled']" in result.stdout
        assert names == []


TARGET = """\
import importlib


def write(module, queue):
    otel = importlib.import_module(module)
    span = otel.CHECKPOINT and otel.start_span("megatron.checkpoint.save.io_write")
    span and span.end()
    queue.put((sorted(otel.enabled_groups()), bool(span)))
"""


@pytest.mark.parametrize("enabled", ["1", "0"])
def test_in_worker_target_sets_telemetry_up_in_a_spawned_process(rendered: Rendered, enabled: str) -> None:
    """What the generated code passes as the async checkpoint worker's Process target."""
    (rendered.root / "ckpt_target.py").write_text(TARGET, encoding="utf-8")
    body = f"""\
    import multiprocessing
    import ckpt_target

    otel.configure()
    target = otel.in_worker(ckpt_target.write)
    print("SAME", target is ckpt_target.write, flush=True)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=target, args=({rendered.project.runtime.module!r}, queue))
    process.start()
    print("WORKER", queue.get(timeout=60), flush=True)
    process.join(60)
    assert process.exitcode == 0, process.exitcode
    """
    result = run_script(rendered, body, env={"MEGATRON_OTEL_ENABLED": enabled})
    assert result.returncode == 0, result.stderr
    if enabled == "1":
        assert "SAME False" in result.stdout
        assert "WORKER (['checkpoint', 'job', 'layer', 'step'], True)" in result.stdout
        assert span_names(result.stdout) == ["megatron.checkpoint.save.io_write"]
    else:
        assert "SAME True" in result.stdout, "telemetry off: the target is passed through untouched"
        assert "WORKER ([], False)" in result.stdout


def test_missing_sdk_is_logged_once_and_training_continues(rendered: Rendered) -> None:
    body = """\
    import logging
    logging.basicConfig()
    sys.modules["opentelemetry.sdk"] = None
    assert otel.configure() == frozenset(otel.GROUPS)
    pretrain()
    otel.reset()
    pretrain()
    print("trained")
    """
    result = run_script(rendered, body, env={"MEGATRON_OTEL_METRICS_ENABLED": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "trained"
    assert result.stderr.count("opentelemetry-sdk is not installed") == 1


def test_without_opentelemetry_the_whole_api_is_inert(rendered: Rendered) -> None:
    (rendered.root / "block_otel.py").write_text(
        'import sys\nsys.modules["opentelemetry"] = None\n', encoding="utf-8"
    )
    body = """\
    assert otel.configure() == frozenset()
    pretrain()
    otel.METRICS and otel.record_metrics(lambda: {"megatron.training.loss": 1.0})
    otel.set_current_attributes(lambda: {"x": 1})
    assert otel.in_context(len) is len and otel.first_time("k") and not otel.first_time("k")
    assert otel.worker_bootstrap() == {"enabled": False}
    otel.setup_worker({"enabled": True, "span_groups": ["job"], "exporter": "console"})
    otel.shutdown()
    otel.reset()
    assert not [m for m in sys.modules if m.startswith("opentelemetry") and sys.modules[m]]
    print("inert")
    """
    script = "import block_otel\n" + PRELUDE.format(
        root=str(rendered.root), module=rendered.project.runtime.module
    )
    environ = dict(os.environ, MEGATRON_OTEL_ENABLED="1", PYTHONPATH=str(rendered.root))
    result = subprocess.run(
        [sys.executable, "-c", script + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        env=environ,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "inert"
    assert result.stderr.count("opentelemetry is not installed") == 1


def test_a_span_ended_from_del_at_interpreter_exit_prints_nothing(rendered: Rendered) -> None:
    """A span another thread started, held until the interpreter's final collection, ends in
    ``__del__`` after shutdown began: no context or SDK warning on stderr."""
    body = """\
    import threading

    class Holder:
        def __init__(self):
            self.span = otel.CHECKPOINT and otel.start_span("megatron.checkpoint.save")

        def __del__(self):
            self.span and self.span.end()

    otel.configure()
    held = []
    thread = threading.Thread(target=lambda: held.append(Holder()))
    thread.start()
    thread.join()
    assert held[0].span
    held.append(held)  # a cycle: collected at interpreter exit, after the runtime's shutdown
    print("held")
    """
    result = run_script(rendered, body)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("held"), result.stdout
    assert result.stderr == ""


def test_exporter_threads_cannot_log_while_the_interpreter_finalizes(rendered: Rendered) -> None:
    """An exporter's daemon thread that outlives the exit flush (a dead collector: retries, then
    "Failed to export ... batch") and writes to stderr while the interpreter finalizes can abort
    the process (CPython: "could not acquire lock for <stderr> at interpreter shutdown", exit -6;
    seen once in CI). Past the exit flush OpenTelemetry's loggers and the runtime's are quiet: an
    exit handler that runs after the runtime's finds them off, and a record logged there is not
    written."""
    body = """\
    import atexit, logging
    exporter_log = logging.getLogger("opentelemetry.exporter.otlp.proto.http.metric_exporter")

    def after_ours():
        print("ENABLED", exporter_log.isEnabledFor(logging.WARNING), flush=True)
        exporter_log.warning("LATE EXPORT WARNING")

    atexit.register(after_ours)  # registered first, so it runs after the runtime's hook
    pretrain()
    exporter_log.warning("EARLY EXPORT WARNING")
    """
    result = run_script(rendered, body)
    assert result.returncode == 0, result.stderr
    assert "ENABLED False" in result.stdout
    assert "EARLY EXPORT WARNING" in result.stderr and "LATE EXPORT WARNING" not in result.stderr
