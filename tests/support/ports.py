"""Local ports for the servers and process groups the tests start (no dependency beyond the
standard library, so any test may import it)."""

from __future__ import annotations

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
    connection lands.
    """
    low = _ephemeral_low()
    draw = random.Random()
    for _ in range(200):
        port = draw.randrange(max(1024, low - 12000), low)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port on {HOST} below {low}")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default
