"""The docs and the code come from one source: every documented name is emitted, and back."""

from __future__ import annotations

import ast
import re

from codegen.pipeline import Generation
from tests.target.spans_in_code import find_spans

ALIAS = "_otel"  # the name the generated code imports the runtime as


def _documented(generation: Generation) -> set[str]:
    """Span names of the spans page's tables (the compatibility table that follows them lists
    attribute names, not spans)."""
    page = generation.docs["spans.md"].split("\n## Names kept for compatibility")[0]
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    return {re.match(r"\| `([^`]+)`", line).group(1) for line in rows}  # type: ignore[union-attr]


def _emitted_by_instrumented_code(generation: Generation) -> set[str]:
    return {
        name
        for path, (_, new) in generation.changes.items()
        for span in find_spans(new, ALIAS)
        for name in span.names
    }


def _emitted_by_runtime(generation: Generation) -> set[str]:
    """Names the runtime's lifecycle opens: the string constants of the rendered taxonomy's
    lifecycle tables."""
    package = generation.project.runtime.package
    source = generation.changes[f"{package}/_taxonomy.py"][1]
    names: set[str] = set()
    for node in ast.parse(source).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        table = next((t.id for t in targets if isinstance(t, ast.Name)), "")
        if table in {"STARTUP", "INTERVAL"} and isinstance(node.value, ast.Call):
            names.add(ast.literal_eval(node.value.args[0]))  # Startup(name, ...), Interval(name, ...)
        elif table in {"PHASES", "PRE_STARTUP"} and isinstance(node.value, ast.Tuple):
            names |= {
                ast.literal_eval(phase.args[0]) for phase in node.value.elts if isinstance(phase, ast.Call)
            }
    return names


def test_every_emitted_name_is_documented_and_every_documented_name_is_emitted(
    generation: Generation,
) -> None:
    documented = _documented(generation)
    emitted = _emitted_by_instrumented_code(generation) | _emitted_by_runtime(generation)
    assert emitted - documented == set(), "emitted but undocumented"
    assert documented - emitted == set(), "documented but never emitted"
    # 55 taxonomy rows: megatron.layer.forward is two rows (Mamba and Transformer), row 40 two names
    assert len(documented) == 55


def test_help_text_advertises_only_declared_presets(generation: Generation) -> None:
    arguments = generation.changes["megatron/training/arguments.py"][1]
    presets = {p.name for p in generation.project.presets}
    assert "full" not in presets
    call = arguments[arguments.index('"--otel-span-groups"') :].split("\n    )\n")[0]
    help_text = "".join(re.findall(r'"([^"]*)"', call[call.index("help=") :]))
    advertised = set(re.search(r"presets \(([^)]*)\)", help_text).group(1).split(", "))  # type: ignore[union-attr]
    assert advertised == presets
