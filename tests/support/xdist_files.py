"""Which test files share an xdist worker: those whose tests use one session fixture too costly to
build twice (a minute of ``pretrain()`` runs, the replaced Megatron-LM main tree). With ``--dist
loadfile`` (tox -e runtime) each file of ``SAME_WORKER`` runs on the worker of the file it names
(``pytest_xdist_make_scheduler`` in tests/conftest.py); tests/unit/test_suite_structure.py checks
that every file using one of ``SHARED_SESSION_FIXTURES`` is listed.

With ``--dist load`` (tox -e test) the files of ``COSTLIEST_FIRST`` are handed out first, in that
order (``pytest_collection_modifyitems`` in tests/conftest.py): in collection order the longest
ones came last (tests/target/, tests/upstream/test_main_size.py's single 42-second test), and
one worker ran them while the others stood idle."""

from __future__ import annotations

SHARED_SESSION_FIXTURES = ("pretrain_runs", "main_root", "main_helpers")
SAME_WORKER = {
    "tests/megatron_cpu/test_report_pretrain.py": "tests/megatron_cpu/test_pretrain_cpu.py",
    "tests/megatron_cpu/test_main_installed.py": "tests/megatron_cpu/test_main_pretrain.py",
    "tests/megatron_cpu/test_main_tree.py": "tests/megatron_cpu/test_main_pretrain.py",
    "tests/megatron_cpu/test_dependency_pretrain.py": "tests/megatron_cpu/test_main_pretrain.py",
}

# tox -e test's files by the seconds their tests took (--durations=0, two workers), longest first.
COSTLIEST_FIRST = (
    "tests/inplace/test_in_place.py",
    "tests/target/test_main_package.py",
    "tests/target/test_releases.py",
    "tests/target/test_main_guide.py",
    "tests/report/test_without_chdb.py",
    "tests/inplace/test_readme_in_place.py",
    "tests/target/test_main_snapshots.py",
    "tests/upstream/test_main_size.py",
    "tests/docs/test_setup_block.py",
)


def costliest_first(path: str) -> int:
    """The sort key of a test file (relative to the repository, as ``COSTLIEST_FIRST`` names it):
    its place there, after them all when it is not listed (a stable sort keeps their order)."""
    return COSTLIEST_FIRST.index(path) if path in COSTLIEST_FIRST else len(COSTLIEST_FIRST)
