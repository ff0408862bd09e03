"""Resource attributes: the run's shape from Megatron's args, GPU identity, SLURM identity."""

from __future__ import annotations

import importlib
import os
import uuid
from collections.abc import Mapping
from typing import Any

# Resource attribute -> Megatron argument.
ARGS: dict[str, str] = {
    "dl.tensor_parallel.size": "tensor_model_parallel_size",
    "dl.pipeline_parallel.size": "pipeline_model_parallel_size",
    "dl.context_parallel.size": "context_parallel_size",
    "dl.data_parallel.size": "data_parallel_size",
    "dl.world_size": "world_size",
    "dl.batch_size": "global_batch_size",
    "dl.sequence_length": "seq_length",
    "megatron.num_layers": "num_layers",
    "megatron.hidden_size": "hidden_size",
    "megatron.num_attention_heads": "num_attention_heads",
    "megatron.train_iters": "train_iters",
    "megatron.micro_batch_size": "micro_batch_size",
    "megatron.ckpt_format": "ckpt_format",
    "megatron.save_interval": "save_interval",
}
# Resource attribute -> environment variable (SLURM, torchelastic); counts are integers.
ENV: dict[str, str] = {
    "slurm.job.id": "SLURM_JOB_ID",
    "slurm.job.name": "SLURM_JOB_NAME",
    "slurm.cluster": "SLURM_CLUSTER_NAME",
    "slurm.array.job_id": "SLURM_ARRAY_JOB_ID",
    "slurm.array.task_id": "SLURM_ARRAY_TASK_ID",
    "slurm.nnodes": "SLURM_NNODES",
    "slurm.node_id": "SLURM_NODEID",
    "slurm.procid": "SLURM_PROCID",
    "slurm.restart_count": "SLURM_RESTART_COUNT",
    "slurm.torchelastic.restart_count": "TORCHELASTIC_RESTART_COUNT",
}
_INTEGERS = frozenset(
    {
        "slurm.nnodes",
        "slurm.node_id",
        "slurm.procid",
        "slurm.restart_count",
        "slurm.torchelastic.restart_count",
    }
)
# uuid5 namespace of job_uuid and run_uuid.
NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/NVIDIA/Megatron-LM/otel")


def resource_attributes(args: Any = None) -> dict[str, Any]:
    """Resource attributes for this process: from ``args`` (Megatron's), pynvml and the environment.

    Never raises: a part that fails is left out.
    """
    attributes: dict[str, Any] = {}
    local_rank = _integer(os.environ.get("LOCAL_RANK"))
    if local_rank is None and args is not None:
        local_rank = _integer(getattr(args, "local_rank", None))
    if local_rank is not None:
        attributes["dl.local_rank"] = local_rank
    if args is not None:
        for key, name in ARGS.items():
            value = getattr(args, name, None)
            if isinstance(value, (bool, int, float, str)):
                attributes[key] = value
        attributes["megatron.precision"] = precision(args)
    attributes.update(gpu_identity(local_rank or 0))
    attributes.update(slurm_attributes(os.environ))
    return attributes


def precision(args: Any) -> str:
    """Megatron's training precision from its ``args``: fp16, bf16 or fp32."""
    if getattr(args, "fp16", False):
        return "fp16"
    if getattr(args, "bf16", False):
        return "bf16"
    return "fp32"


def gpu_identity(index: int) -> dict[str, Any]:
    """``dl.gpu.*`` of GPU ``index`` via pynvml; ``{}`` when pynvml or the GPU is unavailable."""
    try:
        pynvml = importlib.import_module("pynvml")  # optional, untyped: NVIDIA GPUs only

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            identity = {
                "dl.gpu.index": index,
                "dl.gpu.name": pynvml.nvmlDeviceGetName(handle),
                "dl.gpu.uuid": pynvml.nvmlDeviceGetUUID(handle),
                "dl.gpu.serial": pynvml.nvmlDeviceGetSerial(handle),
                "dl.gpu.pci_bus_id": pynvml.nvmlDeviceGetPciInfo(handle).busId,
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return {}
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in identity.items()}


def slurm_attributes(environ: Mapping[str, str]) -> dict[str, Any]:
    """SLURM and restart identity from ``environ``, with the derived ``job_uuid`` / ``run_uuid``.

    ``job_uuid`` is uuid5 of the cluster and the job (``<array job>_<task>`` for array tasks): the
    same for every restart of the job; ``run_uuid`` adds the restart counts: one per attempt.
    """
    attributes: dict[str, Any] = {}
    for key, name in ENV.items():
        value = environ.get(name, "").strip()
        if value:
            number = _integer(value) if key in _INTEGERS else None
            attributes[key] = number if number is not None else value
    job = attributes.get("slurm.job.id")
    array_job = attributes.get("slurm.array.job_id")
    if array_job is not None:
        job = f"{array_job}_{attributes.get('slurm.array.task_id', '')}"
    if job is not None:
        cluster = attributes.get("slurm.cluster", "")
        job_uuid = uuid.uuid5(NAMESPACE, f"{cluster}/{job}")
        restarts = (
            attributes.get("slurm.restart_count", 0),
            attributes.get("slurm.torchelastic.restart_count", 0),
        )
        attributes["job_uuid"] = str(job_uuid)
        attributes["run_uuid"] = str(uuid.uuid5(job_uuid, "/".join(map(str, restarts))))
    return attributes


def _integer(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
