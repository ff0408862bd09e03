"""What a CPU build of torch needs to run megatron on CPU; shared by the test workers.

Nothing in megatron is patched: each redirect lives in the worker process, scoped by a context
manager, and is undone when it exits. ``CudaFactoriesOnCpu`` is enough for the schedules;
``cpu_shims`` adds what ``evaluate()``/``train_step()`` need; ``cuda_on_cpu`` adds what
megatron.training's whole ``pretrain()`` needs (see the table in each docstring).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode


class CudaFactoriesOnCpu(TorchFunctionMode):
    """Tensor factories called with ``device="cuda"`` (or a cuda device) create CPU tensors."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if device is not None and _is_cuda(device):
            kwargs = {**kwargs, "device": "cpu"}
        return func(*args, **kwargs)


def _is_cuda(device: Any) -> bool:
    if isinstance(device, int):  # torch.cuda.current_device() on a GPU build
        return True
    try:
        return torch.device(device).type == "cuda"
    except (RuntimeError, TypeError):
        return False


@contextlib.contextmanager
def _patched(target: Any, **replacements: Any) -> Iterator[None]:
    saved = {name: getattr(target, name) for name in replacements}
    for name, value in replacements.items():
        setattr(target, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(target, name, value)


@contextlib.contextmanager
def cpu_shims() -> Iterator[None]:
    """``evaluate()`` and ``train_step()``:

    - ``megatron.core.timers.Timer`` calls ``torch.cuda.synchronize()``: a no-op (nothing to wait
      for on the CPU); ``Timers.log`` allocates on ``torch.cuda.current_device()``: ``"cpu"``;
    - tensor factories asking for CUDA (the schedule's token counter, evaluate's
      ``total_loss_dict``, the DDP grad buffers, the optimizer's bookkeeping) go to the CPU.
    """
    with (
        _patched(torch.cuda, synchronize=lambda *a, **k: None, current_device=lambda: "cpu"),
        CudaFactoriesOnCpu(),
    ):
        yield


class _Stream:
    """Stands in for ``torch.cuda.Stream``: work on the CPU is already ordered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, other: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def record_event(self, event: Any = None) -> Any:
        return event or _Event()


class _Event(_Stream):
    def record(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True


_CPU_STREAM = _Stream()


@contextlib.contextmanager
def cuda_on_cpu() -> Iterator[None]:
    """megatron.training's ``pretrain()`` (0.19.2), on top of ``cpu_shims``:

    - ``Module.cuda`` / ``Tensor.cuda`` (``get_model`` moves the model to
      ``torch.cuda.current_device()``): return the module / tensor unchanged;
    - ``torch.cuda.Stream``, ``current_stream``, ``stream(...)``, ``Event`` (the DDP wrap, the
      grad-sync path): stand-ins that wait for nothing;
    - ``torch.cuda.get_rng_state`` / ``set_rng_state`` (the rerun state machine's state dict):
      the CPU generator's state / a no-op;
    - ``torch.Tensor.pin_memory`` is left alone: a CPU build pins nothing and megatron does not
      ask on this path.
    """
    cuda = torch.cuda
    with contextlib.ExitStack() as stack:
        stack.enter_context(
            _patched(
                cuda,
                Stream=_Stream,
                Event=_Event,
                current_stream=lambda *a, **k: _CPU_STREAM,
                default_stream=lambda *a, **k: _CPU_STREAM,
                stream=lambda *a, **k: contextlib.nullcontext(),
                get_rng_state=lambda *a, **k: torch.get_rng_state(),
                set_rng_state=lambda *a, **k: None,
            )
        )
        stack.enter_context(_patched(torch.nn.Module, cuda=lambda self, *a, **k: self))
        stack.enter_context(_patched(torch.Tensor, cuda=lambda self, *a, **k: self))
        stack.enter_context(cpu_shims())
        yield
