"""The suite's own structure: tests share helpers through support modules, never by importing one
another or a conftest, and none edits ``sys.path`` (see docs/development.md)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO, TESTS
from tests.support.xdist_files import COSTLIEST_FIRST, SAME_WORKER, SHARED_SESSION_FIXTURES, costliest_first

# fixture inputs: code the tests feed the generator, not the suite's own code
FIXTURE_DIRS = ("fixtures", "transform_cases", "data", "bad_specs", "bad_captures")


def _suite() -> list[Path]:
    return sorted(
        path
        for path in TESTS.rglob("*.py")
        if path.relative_to(TESTS).parts[0] not in FIXTURE_DIRS and "__pycache__" not in path.parts
    )


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


def _is_test_module(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last == "conftest" or last.startswith("test_")


def _edits_sys_path(node: ast.AST) -> bool:
    """``sys.path.insert(...)`` and the like, or an assignment to ``sys.path``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        owner = node.func.value
        return (
            isinstance(owner, ast.Attribute)
            and owner.attr == "path"
            and isinstance(owner.value, ast.Name)
            and owner.value.id == "sys"
            and node.func.attr in {"insert", "append", "extend", "remove", "pop", "clear"}
        )
    if isinstance(node, (ast.Assign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(ast.unparse(target).startswith("sys.path") for target in targets)
    return False


def test_the_suite_is_read() -> None:
    files = {path.relative_to(TESTS).as_posix() for path in _suite()}
    assert {"conftest.py", "support/modules.py", "unit/test_suite_structure.py"} <= files
    assert not [f for f in files if f.startswith("transform_cases/")]


def test_no_test_module_or_conftest_is_imported() -> None:
    found = [
        f"{path.relative_to(TESTS)}:{line}: {name}"
        for path in _suite()
        for line, name in _imported(ast.parse(path.read_text(encoding="utf-8")))
        if _is_test_module(name)
    ]
    assert found == [], "helpers belong in tests/support (fixtures in a conftest):\n" + "\n".join(found)


def test_no_test_edits_sys_path() -> None:
    found = [
        f"{path.relative_to(TESTS)}:{node.lineno}"
        for path in _suite()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if _edits_sys_path(node)
    ]
    assert found == [], "import through tests/support/modules.py or PYTHONPATH:\n" + "\n".join(found)


def test_files_sharing_a_costly_session_fixture_share_a_worker() -> None:
    """A test file that asks for one of the costly session fixtures runs on the worker of the
    other files that do (else tox -e runtime builds it twice)."""
    users: dict[str, set[str]] = {name: set() for name in SHARED_SESSION_FIXTURES}
    for path in _suite():
        if not path.name.startswith("test_"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef):
                for argument in node.args.args:
                    if argument.arg in users:
                        users[argument.arg].add(path.relative_to(REPO).as_posix())
    for name, files in users.items():
        assert files, f"no test uses {name}: drop it from SHARED_SESSION_FIXTURES"
        workers = {SAME_WORKER.get(file, file) for file in files}
        assert len(workers) == 1, f"{name}: {sorted(files)} would run on {len(workers)} workers"


def test_the_costliest_files_handed_out_first_are_test_files_of_tox_e_test() -> None:
    """Each exists and is none of tests/megatron_cpu (tox -e runtime's, ``--dist loadfile``)."""
    for path in COSTLIEST_FIRST:
        assert (REPO / path).is_file() and Path(path).name.startswith("test_"), path
        assert not path.startswith("tests/megatron_cpu/"), path
    assert len(set(COSTLIEST_FIRST)) == len(COSTLIEST_FIRST)


def test_the_costliest_files_sort_first_in_their_order_the_rest_as_collected() -> None:
    collected = ["tests/unit/test_layout.py", COSTLIEST_FIRST[-1], "tests/a.py", COSTLIEST_FIRST[0]]
    assert sorted(collected, key=costliest_first) == [
        COSTLIEST_FIRST[0],
        COSTLIEST_FIRST[-1],
        "tests/unit/test_layout.py",
        "tests/a.py",
    ]


def test_the_checks_catch_what_they_look_for() -> None:
    tree = ast.parse(
        "import sys\nfrom tests.report.conftest import X\nimport test_other\n"
        "sys.path.insert(0, 'x')\nsys.path = []\nsys.path[:0] = ['y']\n"
    )
    assert [name for _, name in _imported(tree) if _is_test_module(name)] == [
        "tests.report.conftest",
        "test_other",
    ]
    assert sum(_edits_sys_path(node) for node in ast.walk(tree)) == 3
