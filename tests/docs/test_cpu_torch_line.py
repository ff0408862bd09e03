"""The guides' CPU-only torch line (block ``job-env`` of docs/guide/installed.md and patches.md)
fails loudly when torch's CPU build cannot be had, rather than pip taking the public index's torch
(the multi-GB CUDA build) without a word, as ``--extra-index-url`` let it.

Where PyTorch's CPU index cannot be reached (an HTTPS proxy on a closed port here) and the public
index serves a torch 2.13.0 (a small stand-in wheel marked ``cuda``, in a local index given as
pip's index), the line as written must exit non-zero and install no torch; the guides' CUDA line,
in the same setting, installs the stand-in (the setting would have caught the old line). pip's
configuration of this machine (its local wheels) is left out.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import subprocess
import venv
import zipfile
from pathlib import Path

from tests.support.doc_blocks import INSTALLED, PATCHES, blocks, workspace

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _wheel(dest: Path) -> Path:
    """torch 2.13.0, a pure-Python stand-in for the public index's CUDA build."""
    info = "torch-2.13.0.dist-info"
    files = {
        "torch/__init__.py": b"BUILD = 'cuda'\n",
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    dest.mkdir(parents=True)
    wheel = dest / "torch-2.13.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(index: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV"))}
    env = {k: v for k, v in env.items() if k.lower() not in ("http_proxy", "https_proxy", "no_proxy")}
    proxy = f"http://127.0.0.1:{_closed_port()}"
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_INDEX_URL=index.as_uri(),
        PIP_RETRIES="0",
        PIP_TIMEOUT="5",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        https_proxy=proxy,
        HTTPS_PROXY=proxy,
    )
    return env


def _line(block: str, *words: str) -> str:
    (line,) = [line for line in block.splitlines() if all(word in line for word in words)]
    return line


def test_cpu_torch_line_fails_where_the_cpu_build_cannot_be_had(tmp_path: Path) -> None:
    assert blocks(INSTALLED)["job-env"] == blocks(PATCHES)["job-env"]
    cpu = _line(blocks(INSTALLED)["job-env"], "torch==2.13.0", CPU_INDEX)
    cuda = _line(blocks(INSTALLED)["job-env-cuda"], "torch==2.13.0")
    wheel = _wheel(tmp_path / "public" / "files")
    page = tmp_path / "public" / "simple" / "torch" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f'<html><body><a href="../../files/{wheel.name}">{wheel.name}</a></body></html>\n')
    root = workspace(tmp_path / "work")
    venv.EnvBuilder(with_pip=True).create(root / "job-env")
    env = _env(tmp_path / "public" / "simple")

    def installed() -> str:
        probe = [str(root / "job-env" / "bin" / "python"), "-c", "import torch; print(torch.BUILD)"]
        return subprocess.run(probe, capture_output=True, text=True, env=env).stdout.strip()

    done = subprocess.run(["bash", "-e", "-c", cpu], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode != 0, done.stdout + done.stderr
    assert "ERROR: " in done.stderr and "torch==2.13.0" in done.stderr, done.stderr
    assert installed() == "", "no torch installed"
    # the same setting, the CUDA line: the public index's torch installs (it would have been taken)
    done = subprocess.run(["bash", "-e", "-c", cuda], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert installed() == "cuda"
