"""Runs megatron.training's own ``pretrain()`` on CPU, one rank per process; a subprocess of the tests.

    python megatron_pretrain_worker.py --out DIR --rank R --world-size W --port P
        --telemetry plain|off|default|all|SPEC [--helpers DIR] [--sigterm-at N] [--live]
        -- MEGATRON_ARGS...

``megatron`` is whatever ``PYTHONPATH`` puts first (the pristine release or the instrumented fork).
The worker does what ``pretrain_gpt.py`` does (parse and validate Megatron's arguments, build the
``PretrainConfigContainer``, call ``pretrain()`` with a model provider, a mock-data dataset provider
and a forward step), with a tiny GPT on CPU and a gloo process group. Telemetry: ``plain`` and
``off`` pass no ``--otel-*`` flag; any other value is passed as ``--otel-enabled
--otel-span-groups VALUE``, and ``otel.configure`` gets SDK providers that write the spans
(as they end) and the metrics (at exit) to ``DIR/capture.jsonl`` in the OTLP JSON file format.

Written to ``DIR``: ``capture.jsonl`` (the export rank's telemetry), ``result-R.json`` (per
iteration: the ``lm loss`` and grad norm ``training_log`` received; the spans still open at exit;
where megatron was imported from).

What a CPU build of torch and a wheel without a build of its dataset helpers need (nothing in
megatron is patched; everything is done in this process):

- ``pretrain()`` calls ``initialize_megatron()`` without ``allow_no_cuda``, which asserts CUDA: the
  name ``training.py`` imported is wrapped to pass ``allow_no_cuda=True``;
- model-parallel initialization is skipped when ``torch.cuda.device_count() == 0``: the gloo
  process group and ``initialize_model_parallel`` are set up here first, from the same sizes;
- ``compile_helpers()`` runs ``make`` in ``core/datasets`` (no Makefile in the wheel, which ships
  only a cpython-312 ``helpers_cpp``): it is a no-op, and ``--helpers DIR`` (``helpers.cpp`` built
  for this Python by the test session) joins ``megatron.core.datasets.__path__``;
- CUDA tensor factories, ``Module.cuda``, streams, the CUDA RNG state, ``synchronize``,
  ``current_device``: ``cuda_on_cpu.cuda_on_cpu()`` around the whole run;
- the core attention of the local spec needs CUDA: ``megatron_cpu_worker``'s CPU attention;
- flags: ``--no-persist-layer-norm`` (torch_norm asserts it), ``--clip-grad 0`` (clip_grads
  asserts ``torch.cuda.FloatTensor`` grads), ``--no-load-rng`` (no CUDA RNG-tracker states to
  restore), ``--distributed-backend gloo``; the test supplies them.

``--sigterm-at N`` sends this process SIGTERM in the first microbatch of iteration N (0-based:
the iteration that ends as N + 1), mid-iteration.

``--device cuda`` (``tests/gpu/``) runs on a GPU as ``pretrain_gpt.py`` would: none of the CPU
redirects, megatron's stock layer spec for ``--transformer-impl``, ``initialize_megatron`` sets the
process groups up itself; only the dataset helpers are still provided.
"""

from __future__ import annotations

import time

_PROGRAM_START = time.time()

import argparse
import atexit
import contextlib
import functools
import inspect
import json
import multiprocessing
import os
import signal
import sys
import warnings
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore")
# megatron/training uses typing.override (Python 3.12); nemo-lens one 3.12 statement: py311_shims.
import py311_shims

py311_shims.install()

import megatron_cpu_worker as base
import torch
import torch.distributed as dist
from cuda_on_cpu import cuda_on_cpu


class Telemetry:
    """SDK providers writing ``capture.jsonl``; handed to ``otel.configure`` by a wrapper.

    With ``lean`` (``PRETRAIN_RECORDING=lean``) no tracer provider is handed over: the runtime
    builds its own and records on its lean path, its span exporter the same capture file; the
    spans left open are those of the lean path (every LeanSpan made and not ended)."""

    def __init__(self, path: Path, lean: bool = False) -> None:
        self.path, self.lean = path, lean
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from otlp_file import OpenSpans, OtlpJsonMetricExporter, OtlpJsonSpanExporter

        self.open_spans = OpenSpans()
        self.tracer_provider = TracerProvider(shutdown_on_exit=False)
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(OtlpJsonSpanExporter(str(path))))
        self.tracer_provider.add_span_processor(self.open_spans)
        self.reader = PeriodicExportingMetricReader(
            OtlpJsonMetricExporter(str(path)), export_interval_millis=3_600_000
        )
        self.meter_provider = MeterProvider(metric_readers=[self.reader], shutdown_on_exit=False)
        self.configured: list[list[str]] = []

    def install(self) -> None:
        from megatron.core import otel

        configure = otel.configure

        if self.lean:
            self._install_lean(otel)

        @functools.wraps(configure)
        def configure_with_capture(args=None, **kwargs):
            if not self.lean:
                kwargs.setdefault("tracer_provider", self.tracer_provider)
            kwargs.setdefault("meter_provider", self.meter_provider)
            groups = configure(args, **kwargs)
            self.configured.append(sorted(groups))
            return groups

        otel.configure = configure_with_capture

    def _install_lean(self, otel) -> None:
        from otlp_file import OtlpJsonSpanExporter

        exporter = OtlpJsonSpanExporter(str(self.path))
        otel._export.otlp_exporter = lambda settings, signal, kind: exporter if signal == "trace" else None
        tracing, open_spans = otel._lean_tracer, self.open_spans.open
        made, opened, ended = tracing.new_span, tracing.LeanTracer.open, tracing.LeanSpan.end

        def make(*args, **kwargs):  # spans of the API's start_span and each nesting's outermost
            span = made(*args, **kwargs)
            open_spans[span.span_id] = span._name
            return span

        def open_(tracer, name, attributes=None):  # the statement sites' (children made inline)
            span = opened(tracer, name, attributes)
            if type(span) is tracing.LeanSpan:
                open_spans[span.span_id] = span._name
            return span

        def end(span, end_time=None) -> None:
            open_spans.pop(span.span_id, None)
            ended(span, end_time)

        tracing.new_span, tracing.LeanTracer.open, tracing.LeanSpan.end = make, open_, end

    def flush(self) -> None:
        self.tracer_provider.force_flush()
        self.meter_provider.force_flush()


class HandWritten:
    """Upstream's hand-written telemetry (#6438) records through nemo-lens, which builds its own
    providers in ``setup_telemetry``: its span exporter and metric reader are this worker's
    (``capture.jsonl``, the format ``Telemetry`` writes), and the spans left open are tracked.

    nemo-lens declares Python >= 3.13 and uses one newer construct, a ``type X = ...`` alias
    statement (``nemo/lens/strategies.py``, Python 3.12 syntax); on 3.11 that module is compiled
    with the statement as a plain assignment (``py311_shims``). Nothing else is changed."""

    def __init__(self, path: Path) -> None:
        from otlp_file import OpenSpans, OtlpJsonMetricExporter, OtlpJsonSpanExporter

        self.path = path
        self.open_spans = OpenSpans()
        self.exporter = OtlpJsonSpanExporter(str(path))
        self.metric_exporter = OtlpJsonMetricExporter(str(path))
        self.configured: list[list[str]] = []
        self.reader = None

    def install(self) -> None:
        import nemo.lens
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        setup = nemo.lens.setup_telemetry

        @functools.wraps(setup)
        def setup_with_capture(config, *args, **kwargs):
            self.reader = PeriodicExportingMetricReader(
                self.metric_exporter, export_interval_millis=3_600_000
            )
            kwargs.setdefault("span_exporter", self.exporter)
            kwargs.setdefault("metric_reader", self.reader)
            kwargs.setdefault("_allow_reinit", True)
            handle = setup(config, *args, **kwargs)
            from nemo.lens import state
            from opentelemetry import trace

            provider = trace.get_tracer_provider()
            if hasattr(provider, "add_span_processor"):
                provider.add_span_processor(self.open_spans)
            self.configured.append(sorted(state._ENABLED_GROUPS))
            return handle

        nemo.lens.setup_telemetry = setup_with_capture

    def flush(self) -> None:
        from opentelemetry import metrics, trace

        for provider in (trace.get_tracer_provider(), metrics.get_meter_provider()):
            if hasattr(provider, "force_flush"):
                provider.force_flush()


def count_exit_hooks() -> dict[str, int]:
    """How often the telemetry (the runtime, or upstream's training.py) registers an atexit hook
    or a SIGTERM handler in this process."""
    counts = {"atexit": 0, "sigterm": 0}
    register, set_handler = atexit.register, signal.signal

    def telemetry(func) -> bool:
        module = getattr(func, "__module__", "") or ""
        name = getattr(func, "__qualname__", "") or ""
        return module.startswith(("megatron.core.otel", "megatron_otel_runtime")) or "otel" in name

    def counting_register(func, *args, **kwargs):
        counts["atexit"] += telemetry(func)
        return register(func, *args, **kwargs)

    def counting_signal(signum, handler):
        counts["sigterm"] += signum == signal.SIGTERM and telemetry(handler)
        return set_handler(signum, handler)

    atexit.register, signal.signal = counting_register, counting_signal
    return counts


def install_dataset_helpers(helpers: str | None) -> None:
    import megatron.core.datasets.utils as dataset_utils
    from megatron.core import datasets

    if helpers:
        datasets.__path__.append(helpers)
    dataset_utils.compile_helpers = lambda: None


def install_cpu_redirects() -> None:
    from megatron.training import training

    training.initialize_megatron = functools.partial(training.initialize_megatron, allow_no_cuda=True)


def model_provider(pre_process=True, post_process=True, vp_stage=None, config=None, pg_collection=None, **_):
    from megatron.core.models.gpt import GPTModel
    from megatron.training import get_args
    from megatron.training.argument_utils import core_transformer_config_from_args

    args = get_args()
    if config is None:
        config = core_transformer_config_from_args(args)
    if _DEVICE == "cuda":
        from megatron.core.models.gpt import gpt_layer_specs

        if args.transformer_impl == "transformer_engine":
            spec = gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec()
        else:
            spec = gpt_layer_specs.get_gpt_layer_local_spec()
    else:
        spec = base.layer_spec()
    return GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=args.padded_vocab_size,
        max_sequence_length=args.max_position_embeddings,
        pre_process=pre_process,
        post_process=post_process,
        vp_stage=vp_stage,
        pg_collection=pg_collection,
    )


def datasets_provider(train_val_test_num_samples, vp_stage=None):
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig, MockGPTDataset
    from megatron.training import get_args, get_tokenizer

    args = get_args()
    config = GPTDatasetConfig(
        random_seed=args.seed,
        sequence_length=args.seq_length,
        blend=None,
        blend_per_split=None,
        split="98,1,1",
        tokenizer=get_tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        mmap_bin_files=False,
        num_dataset_builder_threads=1,
    )
    return BlendedMegatronDatasetBuilder(
        MockGPTDataset, train_val_test_num_samples, lambda: True, config
    ).build()


datasets_provider.is_distributed = True

_SIGTERM_AT: int | None = None
_RAISE_AT: int | None = None
_DEVICE = "cpu"
_microbatches = 0
_DATA_ITERATOR: dict[str, Any] = {}


def describe_data_iterator(data_iterator) -> dict[str, Any]:
    """The first training data iterator: which torch iterator, how many worker processes, how made."""
    inner = getattr(data_iterator, "iterable", data_iterator)  # megatron's RerunDataIterator
    workers = getattr(inner, "_workers", [])
    context = getattr(inner, "_multiprocessing_context", None) or multiprocessing.get_context()
    return {
        "type": type(inner).__name__,
        "workers": len(workers),
        "worker_pids": [w.pid for w in workers],
        "start_method": context.get_start_method(),
    }


def forward_step(data_iterator, model):
    global _microbatches
    from megatron.core import parallel_state
    from megatron.training import get_args

    args = get_args()
    if not _DATA_ITERATOR and data_iterator is not None:
        _DATA_ITERATOR.update(describe_data_iterator(data_iterator))
    if _SIGTERM_AT is not None or _RAISE_AT is not None:
        per_iteration = args.global_batch_size // (
            args.micro_batch_size * parallel_state.get_data_parallel_world_size()
        )
        if _SIGTERM_AT is not None and _microbatches == _SIGTERM_AT * per_iteration:
            os.kill(os.getpid(), signal.SIGTERM)
        if _RAISE_AT is not None and _microbatches == _RAISE_AT * per_iteration:
            raise RuntimeError(f"raised by the test in iteration {_RAISE_AT}")
        _microbatches += 1
    tokens = labels = loss_mask = position_ids = None
    if data_iterator is not None:
        batch = next(data_iterator)
        tokens, labels = batch["tokens"], batch["labels"]
        loss_mask, position_ids = batch["loss_mask"], batch["position_ids"]
    if not parallel_state.is_pipeline_first_stage():
        tokens = position_ids = None
    if not parallel_state.is_pipeline_last_stage():
        labels = None

    def loss_func(output_tensor):
        losses = output_tensor.float()
        mask = loss_mask.view(-1).float()
        loss = torch.sum(losses.view(-1) * mask)
        num_tokens = mask.sum().to(torch.int)
        return loss, num_tokens, {"lm loss": torch.stack([loss.detach(), num_tokens.float()])}

    output = model(tokens, position_ids, attention_mask=None, labels=labels)
    return output, loss_func


def record_training_log(results: dict[str, Any]) -> None:
    """Wrap the ``training_log`` that ``train()`` calls: keep each iteration's loss and grad norm."""
    from megatron.training import training

    training_log = training.training_log
    signature = inspect.signature(training_log)

    @functools.wraps(training_log)
    def recording(*args, **kwargs):
        bound = signature.bind(*args, **kwargs).arguments
        loss, grad_norm, iteration = bound["loss_dict"].get("lm loss"), bound["grad_norm"], bound["iteration"]
        results["iterations"].append(
            {
                "iteration": int(iteration),
                "lm_loss": None if loss is None else float(loss),
                "lm_loss_hex": None if loss is None else float(loss).hex(),
                "grad_norm": None if grad_norm is None else float(grad_norm),
            }
        )
        results.setdefault("tracer", _tracer_type())  # the recording path, during training
        return training_log(*args, **kwargs)

    training.training_log = recording


def _tracer_type() -> str | None:
    """The class of the tracer the runtime records with now (``LeanTracer``: the lean path)."""
    try:
        from megatron.core.otel import _state

        tracer = _state.PROCESS.run.tracer
    except (ImportError, AttributeError):  # telemetry off, or no runtime in this tree
        return None
    return None if tracer is None else type(tracer).__name__


def main(argv: list[str] | None = None) -> None:
    global _SIGTERM_AT, _RAISE_AT, _DEVICE
    main_entry = time.time()
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--telemetry", default="off")
    parser.add_argument("--helpers")
    parser.add_argument("--sigterm-at", type=int)
    # --raise-at N: forward_step raises RuntimeError in the first microbatch of iteration N
    parser.add_argument("--raise-at", type=int)
    # --repeat N: pretrain() N times in this process, global state destroyed in between
    parser.add_argument("--repeat", type=int, default=1)
    # --hand-written: the tree carries upstream's own telemetry (#6438, through nemo-lens):
    # nemo-lens's providers get this worker's capture exporter
    parser.add_argument("--hand-written", action="store_true")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    # --live: the runtime builds its own providers and exports over OTLP (the OTEL_EXPORTER_OTLP_*
    # environment names the receiver); no capture.jsonl, no open-span tracking
    parser.add_argument("--live", action="store_true")
    # file: the spans go to DIR/capture.jsonl through providers of this worker's own; global: the
    # runtime records into the providers the application set (opentelemetry-instrument's distro)
    parser.add_argument("--providers", choices=("file", "global"), default="file")
    options = parser.parse_args(argv[:split])
    _DEVICE = options.device
    megatron_argv = argv[split + 1 :]
    _SIGTERM_AT = options.sigterm_at
    _RAISE_AT = options.raise_at
    out = Path(options.out)
    if options.device == "cpu":
        torch.set_num_threads(1)
        torch.use_deterministic_algorithms(True)
    os.environ.update(
        RANK=str(options.rank),
        LOCAL_RANK=str(options.rank),
        WORLD_SIZE=str(options.world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(options.port),
    )
    if options.telemetry not in ("plain", "off"):
        megatron_argv += ["--otel-enabled", "--otel-span-groups", options.telemetry]
        if not options.live and options.providers == "file" and not options.hand_written:
            os.environ.setdefault("MEGATRON_OTEL_EXPORTER", "none")
    hooks = count_exit_hooks()

    from megatron.core import parallel_state
    from megatron.core.enums import ModelType
    from megatron.training import training
    from megatron.training.argument_utils import pretrain_cfg_container_from_args
    from megatron.training.arguments import parse_and_validate_args

    results: dict[str, Any] = {
        "rank": options.rank,
        "iterations": [],
        "megatron_file": training.__file__,
        "megatron_loader": type(training.__loader__).__name__,  # WovenLoader: the installed instrumentation
        "open_spans": None,
        "finished": False,
    }
    telemetry = None
    if options.hand_written:
        telemetry = HandWritten(out / "capture.jsonl")
        telemetry.install()
    elif options.telemetry != "plain" and not options.live and options.providers == "file":
        telemetry = Telemetry(out / "capture.jsonl", lean=os.environ.get("PRETRAIN_RECORDING") == "lean")
        telemetry.install()

    def write_results() -> None:
        results["data_iterator"] = dict(_DATA_ITERATOR)
        if telemetry is not None:
            telemetry.flush()
            results["open_spans"] = sorted(telemetry.open_spans.open.values())
            results["configured_groups"] = telemetry.configured
        results["exit_hooks"] = dict(hooks)
        (out / f"result-{options.rank}.json").write_text(json.dumps(results, indent=1))

    # pretrain() ends the process with sys.exit() after --exit-signal-handler: write at exit too,
    # after the runtime's own exit hook (atexit runs hooks last-registered first).
    atexit.register(write_results)
    install_dataset_helpers(options.helpers)
    if options.device == "cpu":
        install_cpu_redirects()
    record_training_log(results)
    training.set_startup_timestamps(program_start=_PROGRAM_START, main_entry=main_entry)

    sys.argv = ["pretrain_gpt.py", *megatron_argv]
    with cuda_on_cpu() if options.device == "cpu" else contextlib.nullcontext():
        for round_ in range(options.repeat):
            if round_:  # what a notebook or a multi-stage driver does between two runs
                training.destroy_global_state()
                parallel_state.destroy_model_parallel()
                results["iterations"].append({"iteration": -1})  # the rounds' separator
            args = parse_and_validate_args()
            if options.device == "cpu":
                if not dist.is_initialized():
                    dist.init_process_group("gloo", rank=options.rank, world_size=options.world_size)
                parallel_state.initialize_model_parallel(
                    tensor_model_parallel_size=args.tensor_model_parallel_size,
                    pipeline_model_parallel_size=args.pipeline_model_parallel_size,
                )
            config = pretrain_cfg_container_from_args(args)
            training.pretrain(
                config,
                datasets_provider,
                ModelType.encoder_or_decoder,
                forward_step,
                model_provider=model_provider,
            )
    results["finished"] = True
    atexit.unregister(write_results)
    # the runtime ends the run at interpreter exit; end it here to see what it leaves open
    if options.hand_written:
        telemetry.flush()
    elif telemetry is not None or options.live:
        from megatron.core import otel

        otel.shutdown()
    write_results()
    dist.barrier()
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
