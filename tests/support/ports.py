"""Local ports for the servers and process groups the tests start (no dependency beyond the
standard library, so any test may import it)."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

HOST = "127.0.0.1"

_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port on ``HOST`` nothing listens on, below the kernel's ephemeral range, never handed out
    twice by this process.

    A port the kernel picks for ``bind(0)`` is an ephemeral one: between this check and the server
    binding it, any process's outgoing connection may take it (a gloo rank of a run started just
    before did, and the next run's TCPStore failed with EADDRINUSE). Below that range no outgoing
    connection lands. Each pytest-xdist worker draws from its own slice of it (``port_range``).
    """
    low, high = port_range()
    draw = random.Random()
    for _ in range(200):
        port = draw.randrange(low, high)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port on {HOST} in [{low}, {high})")


def port_range(worker: int | None = None, workers: int | None = None) -> tuple[int, int]:
    """The ports ``free_port`` draws from: the 12,000 below the ephemeral range, or the
    ``worker``-th of ``workers`` equal slices of them (by default this pytest-xdist worker's).
    ``_HANDED_OUT`` is one process's: without slices two workers could hand out one port, the
    second while the first's receiver had let it go (a collector "absent") and its exporter still
    sent there."""
    if worker is None or workers is None:
        name = os.environ.get("PYTEST_XDIST_WORKER", "")
        count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
        worker, workers = 0, 1
        if name.startswith("gw") and name[2:].isdigit() and count.isdigit() and int(count) > 0:
            worker, workers = int(name[2:]), int(count)
    top = _ephemeral_low()
    bottom = max(1024, top - 12000)
    size = (top - bottom) // workers
    return bottom + worker * size, top if worker == workers - 1 else bottom + (worker + 1) * size


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default
