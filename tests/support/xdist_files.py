"""Which test files share an xdist worker: those whose tests use one session fixture too costly to
build twice (a minute of ``pretrain()`` runs, the replaced Megatron-LM main tree). With ``--dist
loadfile`` (tox -e runtime) each file of ``SAME_WORKER`` runs on the worker of the file it names
(``pytest_xdist_make_scheduler`` in tests/conftest.py); tests/unit/test_suite_structure.py checks
that every file using one of ``SHARED_SESSION_FIXTURES`` is listed."""

from __future__ import annotations

SHARED_SESSION_FIXTURES = ("pretrain_runs", "main_root", "main_helpers")
SAME_WORKER = {
    "tests/megatron_cpu/test_report_pretrain.py": "tests/megatron_cpu/test_pretrain_cpu.py",
    "tests/megatron_cpu/test_main_installed.py": "tests/megatron_cpu/test_main_pretrain.py",
    "tests/megatron_cpu/test_main_tree.py": "tests/megatron_cpu/test_main_pretrain.py",
    "tests/megatron_cpu/test_dependency_pretrain.py": "tests/megatron_cpu/test_main_pretrain.py",
}
