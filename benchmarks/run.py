"""Runtime overhead and generator speed of megatron-otel-codegen, reported as same-run ratios.

    .venv/bin/python -m benchmarks [--quick] [--no-generator] [--no-lens] [--json FILE]

Not part of the test suite. See benchmarks/README.md for what each row measures.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import py_compile
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from benchmarks import timing

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FIXTURE = HERE / "fixture"
WORKER = HERE / "runtime_worker.py"
LENS_PACKAGES = ("nemo-lens", "opentelemetry-sdk")
LENS_PYTHON_VERSION = "3.13"  # nemo-lens requires Python >= 3.13


# -- building the fixture with the real generator ------------------------------------------------


def build_fixture(tmp: Path) -> tuple[Path, Path]:
    """Run the generator on fixture/ and write two independent instrumented copies under ``tmp``."""
    from codegen.pipeline import generate

    # the fixture tree has no package_info.py: say its release
    generation = generate(FIXTURE / "specs", source=FIXTURE / "src", release="0.19.2")
    trees = []
    for name in ("off", "on"):
        tree = tmp / name
        shutil.copytree(FIXTURE / "src", tree, ignore=shutil.ignore_patterns("__pycache__"))
        for path, (_, text) in generation.changes.items():
            target = tree / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            py_compile.compile(str(target), doraise=True)
        trees.append(tree)
    if "megatron/benchfix/work.py" not in generation.changes:
        raise RuntimeError("the generator left fixture/src/megatron/benchfix/work.py unchanged")
    return trees[0], trees[1]


def run_worker(python: str, off: Path, on: Path, rounds: int, target_ms: float, lens: bool) -> dict:
    command = [python, str(WORKER), "--off-tree", str(off), "--on-tree", str(on)]
    command += ["--rounds", str(rounds), "--target-ms", str(target_ms)] + (["--lens"] if lens else [])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


# -- nemo-lens in its own interpreter -------------------------------------------------------------


def _lens_ok(python: Path) -> bool:
    probe = "import nemo.lens, opentelemetry.sdk.trace"
    return subprocess.run([str(python), "-c", probe], capture_output=True, timeout=60).returncode == 0


def _runs(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", "pass"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def lens_python(explicit: str | None, install: bool) -> tuple[Path | None, str]:
    """A Python with nemo-lens and the OTel SDK: given, cached, or installed into a cached venv."""
    if explicit:
        path = Path(explicit)
        return (path, "given") if _lens_ok(path) else (None, f"{explicit} cannot import nemo.lens")
    from codegen.upstream import default_cache_dir

    venv = default_cache_dir() / f"bench-nemo-lens-py{LENS_PYTHON_VERSION}"
    python = venv / "bin" / "python"
    if python.exists() and _lens_ok(python):
        return python, f"cached venv {venv}"
    if not install:
        return None, "not installed (run without --no-lens-install to try)"
    candidates = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{LENS_PYTHON_VERSION}*/bin/python")))
    candidates.append(shutil.which(f"python{LENS_PYTHON_VERSION}"))  # may be a pyenv shim that fails
    base = next((c for c in candidates if c and _runs(c)), None)
    if base is None:
        return None, f"cannot be installed: no Python {LENS_PYTHON_VERSION} interpreter found"
    print(f"installing {' '.join(LENS_PACKAGES)} into {venv} (once) ...", file=sys.stderr)
    try:
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([base, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *LENS_PACKAGES]
        proc = subprocess.run(pip, capture_output=True, text=True, timeout=240)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"cannot be installed: {exc}"
    if proc.returncode != 0 or not _lens_ok(python):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"cannot be installed: pip: {tail[0][:200]}"
    return python, f"installed into {venv}"


# -- the table --------------------------------------------------------------------------------------


@dataclass
class Row:
    section: str
    label: str
    value: str
    baseline: str
    ratio: str
    median_ratio: str
    goal: str
    status: str
    read: str = ""  # the value the status reads, when not the ratio column (the summary shows it)


def _ns(value: float) -> str:
    return f"{value:,.0f} ns" if value >= 100 else f"{value:.1f} ns"


def ratio_row(section, label, results, num, den, goal=None, note_missing="") -> Row:
    """``num``/``den`` per call; ``goal`` is ("<=" or ">=", threshold)."""
    if num not in results or den not in results:
        return Row(section, label, "-", "-", "-", "-", _goal_text(goal), note_missing or "not measured")
    a, b = results[num], results[den]
    ratio = a["min_ns"] / b["min_ns"]
    paired = paired_ratio(a, b)
    middle = a["median_ns"] / b["median_ns"] if paired is None else paired
    read = f"{ratio if paired is None else paired:.2f}x" + ("" if paired is None else " (median)")
    return Row(section, label, _ns(a["min_ns"]), _ns(b["min_ns"]), f"{ratio:.2f}x", f"{middle:.2f}x",
               _goal_text(goal), _status(ratio if paired is None else paired, goal), read)  # fmt: skip


def paired_ratio(a: dict, b: dict) -> float | None:
    """The median of the per-round ratios ``a``/``b`` when one ``measure`` call timed both (every
    round times each variant once), else None. The minimums of ``a`` and ``b`` come from different
    rounds, so a round lucky for the baseline alone moves their ratio; a round's own ratio is free
    of that."""
    if not a.get("rounds_ns") or a.get("run") is None or a.get("run") != b.get("run"):
        return None
    return median(x / y for x, y in zip(a["rounds_ns"], b["rounds_ns"], strict=True))


def overhead_row(section, label, results, num, den, base, goal=None) -> Row:
    """(``num`` - ``base``) / (``den`` - ``base``): the guards' own costs, the workload taken out."""
    if not all(k in results for k in (num, den, base)):
        return Row(section, label, "-", "-", "-", "-", _goal_text(goal), "not measured")
    # An overhead smaller than the baseline's own spread (median - min) is noise: divide by that
    # spread instead, which makes the ratio a lower bound (shown as ">=").
    noise = max(results[base]["median_ns"] - results[base]["min_ns"], 1.0)
    text = {}
    ratios = {}
    for key in ("min_ns", "median_ns"):
        b = results[base][key]
        a, d = results[num][key] - b, results[den][key] - b
        bound = d < noise
        ratios[key] = a / max(d, noise)
        text[key] = (a, d, f"{'>=' if bound else ''}{ratios[key]:.1f}x")
    a, d, ratio_text = text["min_ns"]
    value = f"+{_ns(d)}" if d >= noise else f"<{_ns(noise)}"
    return Row(section, label, f"+{_ns(a)}", value, ratio_text, text["median_ns"][2],
               _goal_text(goal), _status(ratios["min_ns"], goal))  # fmt: skip


def _goal_text(goal) -> str:
    return "" if goal is None else f"{goal[0]} {goal[1]:g}x"


def _status(value: float, goal) -> str:
    if goal is None:
        return "info"
    op, threshold = goal
    return "met" if (value <= threshold if op == "<=" else value >= threshold) else "NOT MET"


def runtime_rows(data: dict, timed_goals: bool = True) -> list[Row]:
    """The timed per-call rows. The disabled rows' goals are read from instruction counts when
    callgrind is at hand (``instruction_rows``); ``timed_goals`` puts them here otherwise."""
    r = data["results"]
    rows: list[Row] = []
    off_goals = (("<=", 1.5), ("<=", 3)) if timed_goals else (None, None)
    for w, what in (("empty", "empty function"), ("small", "small function (~1 us)")):
        s = f"per call, {what}, Python {data['python']}"
        rows += [
            ratio_row(s, "function span, group disabled / uninstrumented", r, f"{w}.function.group_off", f"{w}.base", off_goals[0]),
            ratio_row(s, "statement span, group disabled / uninstrumented", r, f"{w}.statement.group_off", f"{w}.base", off_goals[1]),
            ratio_row(s, "reference @contextmanager guard, off / statement span, disabled", r, f"{w}.ref_managed_span", f"{w}.statement.group_off", (">=", 5) if w == "empty" else None),
            overhead_row(s, "  the same, overhead over uninstrumented only", r, f"{w}.ref_managed_span", f"{w}.statement.group_off", f"{w}.base", (">=", 5)),
            ratio_row(s, "enabled span, recording / SDK start_as_current_span", r, f"{w}.recording", f"{w}.sdk", ("<=", 1.15)),
            ratio_row(s, "function span, telemetry never enabled / uninstrumented", r, f"{w}.function.never_enabled", f"{w}.base"),
            ratio_row(s, "plain `if FLAG:` guard, off / uninstrumented", r, f"{w}.if_flag", f"{w}.base"),
            ratio_row(s, "reference @contextmanager guard, off / uninstrumented", r, f"{w}.ref_managed_span", f"{w}.base"),
            ratio_row(s, "reference trace_fn decorator, off / uninstrumented", r, f"{w}.ref_trace_fn", f"{w}.base"),
            ratio_row(s, "reference trace_fn, off / function span, disabled", r, f"{w}.ref_trace_fn", f"{w}.function.group_off"),
        ]  # fmt: skip
    s = f"enabled span: cost of the span-group attribute, empty function, Python {data['python']}"
    rows += [
        ratio_row(s, "SDK start_as_current_span + the runtime's span-group attribute / bare", r, "empty.sdk_attributes", "empty.sdk"),
        ratio_row(s, "enabled span, recording / SDK span with the same attribute", r, "empty.recording", "empty.sdk_attributes"),
    ]  # fmt: skip
    return rows


def lens_rows(data: dict | None, status: str) -> list[Row]:
    s = "nemo-lens, empty function" + (f", Python {data['python']}, {data['lens']}" if data else "")
    if data is None:
        return [
            Row(s, f"nemo-lens managed_span / trace_fn: {status}", "-", "-", "-", "-", "", "not measured")
        ]
    r = data["results"]
    return [
        ratio_row(s, "nemo-lens managed_span, off / uninstrumented", r, "lens.managed_span.off", "empty.base"),
        ratio_row(s, "nemo-lens managed_span, off / statement span, disabled", r, "lens.managed_span.off", "empty.statement.group_off", (">=", 5)),
        ratio_row(s, "benchmark's reference-shaped guard / nemo-lens managed_span (both off)", r, "empty.ref_managed_span", "lens.managed_span.off"),
        ratio_row(s, "nemo-lens trace_fn, off / uninstrumented", r, "lens.trace_fn.off", "empty.base"),
        ratio_row(s, "nemo-lens trace_fn, off / function span, disabled", r, "lens.trace_fn.off", "empty.function.group_off"),
        ratio_row(s, "function span, group disabled / uninstrumented (this interpreter)", r, "empty.function.group_off", "empty.base", ("<=", 1.5)),
        ratio_row(s, "nemo-lens managed_span, recording / SDK start_as_current_span", r, "lens.managed_span.on", "empty.sdk"),
        ratio_row(s, "nemo-lens trace_fn, recording / SDK start_as_current_span", r, "lens.trace_fn.on", "empty.sdk"),
        ratio_row(s, "enabled span, recording / nemo-lens managed_span, recording", r, "empty.recording", "lens.managed_span.on"),
    ]  # fmt: skip


GENERATE_GOAL, CLI_GOAL, UNCHANGED_GOAL_S = 1.5, 1.8, 0.5


def generator_rows(g) -> list[Row]:
    s = f"generator: megatron-core 0.19.2, real specs/, {len(g.files)} touched files"
    rows = []
    for unit, gen_runs, floor_runs in (
        ("", g.generate_s, g.floor_s),
        (" (CPU)", g.generate_cpu_s, g.floor_cpu_s),
    ):
        if gen_runs and floor_runs:
            gen, fl = min(gen_runs), min(floor_runs)
            rows.append(Row(s, f"in-process generate() + patches/docs / libcst parse+render floor{unit}", f"{gen:.2f} s",
                            f"{fl:.2f} s", f"{gen / fl:.2f}x", f"{median(gen_runs) / median(floor_runs):.2f}x",
                            f"<= {GENERATE_GOAL}x", _status(gen / fl, ("<=", GENERATE_GOAL))))  # fmt: skip
    for unit, apply_s, floor_s in (
        ("", g.cli_apply_s, g.cli_floor_s),
        (" (CPU)", g.cli_apply_cpu_s, g.cli_floor_cpu_s),
    ):
        if apply_s is not None and floor_s:
            rows.append(Row(s, f"codegen apply, end to end / floor end to end (subprocesses){unit}", f"{apply_s:.2f} s",
                            f"{floor_s:.2f} s", f"{apply_s / floor_s:.2f}x", "-", f"<= {CLI_GOAL}x",
                            _status(apply_s / floor_s, ("<=", CLI_GOAL))))  # fmt: skip
    rc = "" if g.cli_check_rc == 0 else f" (exit {g.cli_check_rc})"
    for unit, check_s in (("", g.cli_check_s), (" (CPU)", g.cli_check_cpu_s)):
        if check_s is not None:
            rows.append(Row(s, f"unchanged second run: codegen apply --check, end to end{unit}" + rc, f"{check_s:.2f} s",
                            f"{UNCHANGED_GOAL_S} s", f"{check_s / UNCHANGED_GOAL_S:.2f}x", "-", f"<= {UNCHANGED_GOAL_S} s",
                            "met" if check_s <= UNCHANGED_GOAL_S else "NOT MET"))  # fmt: skip
    if len(g.generate_s) > 1:
        second = g.generate_s[1]
        # generate() itself never caches: the result cache sits in the CLI, before libcst is imported
        rows.append(Row(s, "second in-process generate() (the cache is the CLI's)", f"{second:.2f} s",
                        "0.5 s", f"{second / 0.5:.2f}x", "-", "", "info"))  # fmt: skip
    return rows


# -- the real training step (benchmarks/step_worker.py) ------------------------------------------

STEP_WORKER = HERE / "step_worker.py"


def build_fork(tmp: Path) -> Path:
    """The instrumented megatron-core 0.19.2 (real specs/), written to ``tmp/megatron-core``."""
    from codegen.emit.tree import write_tree
    from codegen.pipeline import generate

    generation = generate(REPO / "specs")
    dest = tmp / "megatron-core"
    write_tree(
        dest, {path: new for path, (_old, new) in generation.changes.items()}, base=generation.source_root
    )
    return dest


def run_step_worker(fork: Path, shape: str, rounds: int) -> dict:
    from tests.support.ports import free_port

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_"))}
    env.update(PYTHONPATH=str(fork), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", TORCHDYNAMO_DISABLE="1")
    command = [
        sys.executable,
        str(STEP_WORKER),
        "--shape",
        shape,
        "--rounds",
        str(rounds),
        "--port",
        str(port),
    ]
    command += ["--warmup", "1" if shape == "layer" else "2"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1800, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} exited {proc.returncode}:\n{(proc.stderr or proc.stdout)[-2000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.2f} us"


def sdk_own_row(section: str, data: dict, spans: dict, per_span: dict[str, float]) -> Row:
    """Issue 33's SDK-path row: the training-thread CPU the runtime's SDK path adds per span, over
    what the SDK's own spans at the same call sites add (``sdk_own``), both paired with ``off`` by
    round. The interval: the per-round differences between the two arms, per span."""
    goal = ("<=", 1.2)
    own = per_span["sdk_own"]
    ratio = per_span["all"] / own
    rounds = data.get("cpu_times_s") or {}
    pairs = list(zip(rounds.get("all", ()), rounds.get("sdk_own", ()), strict=False))
    label = (
        "added training-thread CPU per span under all, SDK path / the SDK's own spans at the same sites (CPU"
    )
    if pairs and own > 0:
        low, high = (1 + bound / spans["all"] / own for bound in _interval([a - b for a, b in pairs]))
        label += f"; 95% interval {low:.2f}-{high:.2f}x)"
        status = _status_within(ratio, low, goal, high)
    else:
        label += "; no rounds: no interval)"
        status = _status(ratio, goal)
    return Row(section, label, _us(per_span["all"]), _us(own), f"{ratio:.2f}x", "-", _goal_text(goal), status)


def step_rows(data: dict) -> list[Row]:
    """Wall-clock rows and training-thread CPU rows side by side. On a quiet machine the two agree
    for the training thread; on a loaded one (other processes taking the cores) wall time measures
    the scheduler, and the goals are read from the CPU rows (each goal row says which it uses)."""
    m, cpu, export, spans, sdk = (
        data[k] for k in ("median_s", "cpu_s", "export_cpu_s", "spans_per_step", "sdk_span_s")
    )
    # Paired by round (each round runs every arm once, in a shuffled order): the median of the
    # per-round ratios and differences to ``off``, which cancels what drifts between rounds.
    per_round = {"wall": data.get("times_s"), "training-thread CPU": data.get("cpu_times_s")}
    z = data["sizes"]
    s = (
        f"per training step: megatron.training train_step on CPU, {data['shape']} GPT ({z['NUM_LAYERS']} layers, "
        f"hidden {z['HIDDEN']}, seq {z['SEQ']}, {z['NUM_MICROBATCHES']} microbatches of {z['MICRO_BATCH']}), "
        f"median of {data['rounds']} interleaved rounds (ratios: the median of the per-round ratios), torch {data['torch']}, {data['threads']} thread(s); "
        f"recorded through {data.get('recording', 'an SDK provider')}; load average {data.get('load', '?')}"
    )
    rows = []
    labels = {
        "default": "telemetry default / off",
        "all": "telemetry all (SDK path) / off",
        "all_urandom": "all, SDK path with the previous os.urandom ids / off",
        "lean": "telemetry all (lean path) / off",
        "sdk_own": "all, the SDK's own spans at the call sites / off",
        "off2": "off (a second, identical arm) / off: the noise floor",
    }
    for clock, values in (("wall", m), ("training-thread CPU", cpu)):
        rounds = per_round[clock]
        ratios = {
            arm: _paired_ratio(rounds, arm) if rounds else values[arm] / values["off"] for arm in values
        }
        for arm, label in labels.items():
            if arm not in values:
                continue
            goal = ("<=", 1.01) if arm == "default" else None
            ratio = ratios[arm]
            status = _status(ratio, goal)
            if goal is not None and rounds:
                # A step's time varies by a quarter from round to round on a shared machine, more
                # than the goal: a ratio over it whose interval reaches it is noise, not a result.
                low, high = _interval(_per_round_ratios(rounds, arm))
                label = f"{label} (95% interval {low:.3f}-{high:.3f}x)"
                status = _status_within(ratio, low, goal, high)
            rows.append(Row(s, f"train_step {clock}, {label}", _ms(values[arm]), _ms(values["off"]),
                            f"{ratio:.4f}x", f"{values[arm] / values['off']:.4f}x", _goal_text(goal),
                            status))  # fmt: skip
    for arm in ("default", "all", "lean", "sdk_own"):
        if arm in spans:
            rows.append(
                Row(s, f"spans recorded per step, {arm}", f"{spans[arm]:g}", "-", "-", "-", "", "info")
            )
    probe, lean_probe = _net(data.get("probe") or {}), _net(data.get("probe_lean") or {})
    in_place = probe.get("sdk_span_s") or sdk  # the SDK's own span, production processors, in place
    in_place_cpu = probe.get("sdk_span_cpu_s") or in_place
    per_span: dict[str, float] = {}
    for arm in ("all", "all_urandom", "lean", "sdk_own"):
        if arm not in m or not spans.get(arm):
            continue
        n = spans[arm]
        added, added_cpu = (
            _paired_added(data, "times_s", m, arm) / n,
            _paired_added(data, "cpu_times_s", cpu, arm) / n,
        )
        per_span[arm] = added_cpu
        path = {"all": "SDK path", "lean": "lean path", "all_urandom": "SDK path, os.urandom ids",
                "sdk_own": "the SDK's own spans"}[arm]  # fmt: skip
        # The lean path's goal is checked in place (below): its added time per span is a fraction
        # of what two identical arms drift apart per span here (shown as the noise). The SDK
        # path's goal is read against the SDK's own spans added the same way (the row after the
        # loop): a span timed in place leaves out what it costs the step outside its own calls.
        rows.append(Row(s, f"added training-thread wall time per span under all, {path} / the SDK's span in place (wall)",
                        _us(added), _us(in_place), f"{added / in_place:.2f}x", "-", "", "info"))  # fmt: skip
        ratio = added_cpu / in_place_cpu
        differences = _paired_differences(data, "cpu_times_s", arm)
        noise = "no rounds: no interval"
        if differences:
            low, high = (bound / n / in_place_cpu for bound in _interval(differences))
            noise = f"95% interval {low:.2f}-{high:.2f}x"
        rows.append(Row(s, f"added training-thread CPU per span under all, {path} / the SDK's span in place (CPU; "
                        f"{noise})", _us(added_cpu), _us(in_place_cpu), f"{ratio:.2f}x", "-", "", "info"))  # fmt: skip
        exported = (export[arm] - export["off"]) / n
        rows.append(Row(s, f"export CPU per span (export thread and the flush), {path}", _us(exported), "-", "-",
                        "-", "", "info"))  # fmt: skip
    if "all" in per_span and "sdk_own" in per_span:
        rows.append(sdk_own_row(s, data, spans, per_span))
    if "all" in per_span and "all_urandom" in per_span:
        saved = per_span["all_urandom"] - per_span["all"]
        rows.append(Row(s, "avoided on the SDK path: ids from the per-process generator, not os.urandom "
                        "(training-thread CPU per span, all_urandom - all)", _us(saved), _us(per_span["all_urandom"]),
                        f"{per_span['all'] / per_span['all_urandom']:.2f}x", "-", "", "info"))  # fmt: skip
    for name, p in (("SDK path", probe), ("lean path", lean_probe)):
        if p.get("spans"):
            for clock, key in (("wall", "span_s"), ("CPU", "span_cpu_s")):
                if f"runtime_{key}" not in p:
                    continue
                ratio = p[f"runtime_{key}"] / p[f"sdk_{key}"]
                rows.append(Row(s, f"runtime span in place, {name} / bare SDK span beside it ({p['spans']} pairs, {clock})",
                                _us(p[f"runtime_{key}"]), _us(p[f"sdk_{key}"]), f"{ratio:.2f}x", "-", "", "info"))  # fmt: skip
    if lean_probe.get("spans") and probe.get("spans"):
        for clock, key, goal in (("wall", "span_s", None), ("CPU", "span_cpu_s", ("<=", 0.2))):
            if f"runtime_{key}" not in lean_probe:
                continue
            ratio = lean_probe[f"runtime_{key}"] / probe[f"sdk_{key}"]
            rows.append(Row(s, f"lean span in place / the SDK's span in place, production processors ({clock})",
                            _us(lean_probe[f"runtime_{key}"]), _us(probe[f"sdk_{key}"]), f"{ratio:.2f}x", "-",
                            _goal_text(goal), _status(ratio, goal)))  # fmt: skip
    if lean_probe.get("clock_cpu_s") is not None:
        rows.append(Row(s, "subtracted above: the timing's own cost per timed region, in place (CPU)",
                        _us(lean_probe["clock_cpu_s"]), "-", "-", "-", "", "info"))  # fmt: skip
    if probe.get("spans"):
        rows.append(Row(s, "SDK span in place / the same in a tight loop (warm caches), wall", _us(probe["sdk_span_s"]),
                        _us(sdk), f"{probe['sdk_span_s'] / sdk:.2f}x", "-", "", "info"))  # fmt: skip
    big, _fixed = _big_step_spans(data)
    for name, p in (("SDK path", probe), ("lean path", lean_probe)):
        for clock, key in (("wall", "runtime_span_s"), ("CPU", "runtime_span_cpu_s")):
            if not p.get("spans") or key not in p:
                continue
            share = big * p[key] / 1.0
            goal = ("<=", 0.01) if name == "lean path" and clock == "CPU" else None  # < 1%
            rows.append(Row(s, f"projection: {big:g} spans of a ~1 s step (32 layers, 8 microbatches), {name}, "
                            f"in-place {clock} cost", _ms(big * p[key]), "1,000.00 ms", f"{share * 100:.2f}%", "-",
                            "< 1%" if goal else "", _status(share, goal)))  # fmt: skip
    return rows


def _per_round_ratios(rounds: dict[str, list[float]], arm: str) -> list[float]:
    return [a / o for a, o in zip(rounds[arm], rounds["off"], strict=True)]


def _paired_ratio(rounds: dict[str, list[float]], arm: str) -> float:
    return median(_per_round_ratios(rounds, arm))


def _paired_differences(data: dict, key: str, arm: str) -> list[float]:
    rounds = data.get(key)
    return [a - o for a, o in zip(rounds[arm], rounds["off"], strict=True)] if rounds else []


def _interval(values: list[float], resamples: int = 2000) -> tuple[float, float]:
    """A 95% percentile-bootstrap interval for the median of ``values`` (fixed seed: the same data
    gives the same interval)."""
    draw = random.Random(0)
    medians = sorted(median(draw.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def _status_within(value: float, low: float, goal, high: float | None = None) -> str:
    """``_status`` with what the interval says beside it, never instead of it: a value over an
    upper-bound goal reads NOT MET, "(within noise)" when its interval reaches the goal (this run
    cannot tell it from the goal); a value within the goal whose interval reaches over it reads
    "met (its interval reaches over)"."""
    status = _status(value, goal)
    if goal is None:
        return status
    op, bound = goal
    if status == "NOT MET" and (low <= bound if op == "<=" else (high is not None and high >= bound)):
        return "NOT MET (within noise)"
    if status == "met" and high is not None and op == "<=" and high > bound:
        return "met (its interval reaches over)"
    if status == "met" and op == ">=" and low < bound:
        return "met (its interval reaches under)"
    return status


def _paired_added(data: dict, key: str, medians: dict[str, float], arm: str) -> float:
    """Seconds ``arm`` adds to a step: the median of the per-round differences to ``off`` (the
    difference of the medians when the worker did not report rounds)."""
    differences = _paired_differences(data, key, arm)
    return median(differences) if differences else medians[arm] - medians["off"]


def _net(probe: dict) -> dict:
    """A probe's per-span times with the timing's own cost subtracted (measured in place by an
    empty timed region: two per runtime span, its start and its end; one per SDK span)."""
    if not probe.get("spans") or "clock_cpu_s" not in probe:
        return probe
    out = dict(probe)
    for clock in ("", "_cpu"):
        cost = probe[f"clock{clock}_s"]
        out[f"runtime_span{clock}_s"] = max(probe[f"runtime_span{clock}_s"] - 2 * cost, 0.0)
        out[f"sdk_span{clock}_s"] = max(probe[f"sdk_span{clock}_s"] - cost, 0.0)
    return out


def _big_step_spans(data: dict) -> tuple[float, float]:
    """Spans per step under 'all' for 32 layers and 8 microbatches, from the tiny model's count."""
    spans, z = data["spans_per_step"]["all"], data["sizes"]
    per_layer_mb = 3  # layer.forward, self_attention, mlp per layer per microbatch
    fixed = spans - per_layer_mb * z["NUM_LAYERS"] * z["NUM_MICROBATCHES"] - 2 * z["NUM_MICROBATCHES"]
    return per_layer_mb * 32 * 8 + 2 * 8 + fixed, fixed


def gpu_step_note(data: dict) -> str:
    """What the tiny model's figures mean for a ~1 s GPU step with 32 layers and 8 microbatches."""
    big, fixed = _big_step_spans(data)
    parts = []
    for name, key in (("the SDK path", "probe"), ("the lean path", "probe_lean")):
        probe = _net(data.get(key) or {})
        per_span, per_span_cpu = probe.get("runtime_span_s"), probe.get("runtime_span_cpu_s")
        if per_span:
            cost = big * per_span
            part = f"{name} {per_span * 1e6:.1f} us per span in place (wall), ~{cost * 1e3:.1f} ms ({cost * 100:.2f}% of the step)"
            if per_span_cpu:
                cost = big * per_span_cpu
                part += f", {per_span_cpu * 1e6:.1f} us CPU, ~{cost * 1e3:.1f} ms ({cost * 100:.2f}%)"
            parts.append(part)
    return (
        f"a ~1 s GPU step with 32 layers and 8 microbatches records ~{big:g} spans under 'all' "
        f"(3 per layer per microbatch, 2 per microbatch, {fixed:g} per step): "
        + "; ".join(parts)
        + ", spent on the host thread while the GPU runs ahead; 'default' records no per-step spans"
    )


def _steps(args, raw: dict, rows: list, notes: list) -> None:
    shapes = [] if args.no_step else (["tiny", "layer"] if args.step_layer and not args.quick else ["tiny"])
    if not shapes:
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        notes.append(
            "training-step rows skipped: torch is not installed (tox -e runtime's environment has it)"
        )
        return
    with tempfile.TemporaryDirectory(prefix="otel-bench-fork-") as tmp:
        fork = build_fork(Path(tmp))
        for shape in shapes:
            rounds = args.step_rounds or (STEP_ROUNDS[shape] // (3 if args.quick else 1))
            print(f"train_step: {shape} GPT, {rounds} interleaved rounds ...", file=sys.stderr)
            try:
                data = run_step_worker(fork, shape, rounds)
            except (RuntimeError, subprocess.SubprocessError, ValueError) as exc:
                notes.append(f"training-step rows ({shape}) skipped: {str(exc)[:1500]}")
                continue
            raw.setdefault("train_step", {})[shape] = data
            rows += step_rows(data)
            if shape == "tiny":
                notes.append(gpu_step_note(data))


STEP_ROUNDS = {"tiny": 60, "layer": 4}
PROCESS_WORKER = HERE / "process_worker.py"
PROCESS_LABELS = {
    "sdk": "all, SDK path",
    "lean_readable": "all, lean path, ReadableSpans to the exporter (before _otlp)",
    "lean": "all, lean path",
    "distro": "all, opentelemetry-instrument's provider, lean path",
    "distro_sdk": "all, opentelemetry-instrument's provider, SDK path (MEGATRON_OTEL_RECORDING=sdk)",
}


# Issue 42's goals for the lean arms (the runtime's own provider, opentelemetry-instrument's).
PROCESS_GOALS = {
    "thread_us": 3.0,
    "export_us": 4.0,
    "threads_ms_s": 2.5,
    "share_pct": 0.6,
    "share_high_pct": 0.8,
}


def process_rows(data: dict) -> list[Row]:
    """The whole process at ~786 spans a step: per arm, paired by round with ``off``, the training
    thread's added CPU per span, the other threads' (export) CPU per span, their CPU per second of
    training (the most GIL they can hold), all of it as a share of a 1 s step; with 95% intervals."""
    runs, steps = data["runs"], data["spans_per_step"]
    s = (
        f"whole process: {steps['lean']} spans a step (32 layers, 8 microbatches, all), the training thread "
        f"waiting {data['step_s']:g} s a step as for a GPU, export running during the steps (OTLP/HTTP to a live "
        f"receiver); {data['rounds']} rounds x {data['steps']} steps, paired with off by round; "
        f"load average {data['load']}"
    )
    rows = []

    def row(
        label: str, values: list[float], scale: float, unit: str, goal: tuple | None, baseline: str = ""
    ) -> None:
        mid = median(values) * scale
        low, high = (v * scale for v in _interval(values))
        status = "info" if goal is None else _status_within(mid, low, goal, high)
        goal_text = "" if goal is None else f"{goal[0]} {goal[1]:g} {unit}"
        rows.append(
            Row(s, label, f"{mid:.2f} {unit}", baseline, f"[{low:.2f}, {high:.2f}]", "", goal_text, status)
        )

    off = runs["off"]
    for arm, name in PROCESS_LABELS.items():
        if arm not in runs or not steps.get(arm):
            continue
        spans = steps[arm]
        run = runs[arm]
        thread = [a - o for a, o in zip(run["thread_cpu_s"], off["thread_cpu_s"], strict=True)]
        other = [a - o for a, o in zip(run["other_cpu_s"], off["other_cpu_s"], strict=True)]
        wall = [w for w in run["wall_s"]]
        total = [t + o for t, o in zip(thread, other, strict=True)]
        lean = arm in ("lean", "distro")
        row(f"{name}: training-thread CPU per span (arm - off)", thread, 1e6 / spans, "us",
            ("<=", PROCESS_GOALS["thread_us"]) if lean else None)  # fmt: skip
        row(f"{name}: export CPU per span (the process's other threads, arm - off)", other, 1e6 / spans, "us",
            ("<=", PROCESS_GOALS["export_us"]) if lean else None)  # fmt: skip
        row(f"{name}: telemetry threads' CPU per second of training (the GIL they can hold at most)",
            [o / w for o, w in zip(other, wall, strict=True)], 1e3, "ms/s",
            ("<=", PROCESS_GOALS["threads_ms_s"]) if lean else None)  # fmt: skip
        row(f"{name}: all telemetry work (both) per step, % of a 1 s step", total, 100.0, "%",
            ("<=", PROCESS_GOALS["share_pct"]) if lean else None)  # fmt: skip
        if lean:  # the goal's second half: the interval's upper end
            high = _interval(total)[1] * 100.0
            goal = ("<=", PROCESS_GOALS["share_high_pct"])
            rows.append(Row(s, f"{name}: the same, the upper end of its 95% interval", f"{high:.2f} %", "", "", "",
                            f"<= {goal[1]:g} %", _status(high, goal)))  # fmt: skip
    ratios = (
        [a / o for a, o in zip(runs["lean"]["wall_s"], off["wall_s"], strict=True)] if "lean" in runs else []
    )
    if ratios:
        row(
            "all, lean path: step wall time / off (informative: a loaded machine's scheduler)",
            ratios,
            1.0,
            "x",
            None,
        )
    return rows


# The step length of the warm row: waits of 98 us after each layer, too short for the core to run
# anything else or halt (benchmarks/pause_sweep.py: the same spans cost 2 us here, 5-7 us at 2 ms).
WARM_STEP_S = 0.05


def warm_rows(data: dict) -> list[Row]:
    """The lean arm's training-thread CPU per span when its waits are short (``WARM_STEP_S``),
    paired with ``off`` by round: informative, beside the goal row's cold case."""
    runs, spans = data["runs"], data["spans_per_step"]["lean"]
    pause_us = data["pause_s"] * 1e6
    differences = [
        a - o for a, o in zip(runs["lean"]["thread_cpu_s"], runs["off"]["thread_cpu_s"], strict=True)
    ]
    low, high = (v * 1e6 / spans for v in _interval(differences))
    section = (
        f"whole process, short waits: the same step with {data['step_s']:g} s of waits a step ({pause_us:.0f} us "
        f"after each layer), arms off and lean; {data['rounds']} rounds x {data['steps']} steps, paired by "
        f"round; load average {data['load']}"
    )
    label = (
        f"all, lean path: training-thread CPU per span, {pause_us:.0f} us waits (its caches warm; the goal "
        "row's 2 ms waits leave them cold)"
    )
    value = median(differences) * 1e6 / spans
    return [Row(section, label, f"{value:.2f} us", "", f"[{low:.2f}, {high:.2f}]", "", "", "info")]


def run_process_worker(rounds: int, step_s: float, arms: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MEGATRON_OTEL_"))}
    env.update(PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore")
    command = [sys.executable, str(PROCESS_WORKER), "--rounds", str(rounds), "--step-s", str(step_s)]
    if arms is not None:
        command += ["--arms", arms]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1800, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} exited {proc.returncode}:\n{(proc.stderr or proc.stdout)[-2000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _process(args, raw: dict, rows: list, notes: list) -> None:
    if args.no_process:
        return
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
    except ImportError:
        notes.append("whole-process rows skipped: the OTLP/HTTP exporter is not installed")
        return
    rounds = args.process_rounds or (3 if args.quick else 8)
    print(f"whole process: ~786 spans a step, {rounds} interleaved rounds ...", file=sys.stderr)
    try:
        data = run_process_worker(rounds, 0.5 if args.quick else 1.0)
    except (RuntimeError, subprocess.SubprocessError, ValueError) as exc:
        notes.append(f"whole-process rows skipped: {str(exc)[:1500]}")
        return
    raw["process"] = data
    rows += process_rows(data)
    if args.quick:
        return
    try:
        warm = run_process_worker(rounds, WARM_STEP_S, arms="off,lean")
    except (RuntimeError, subprocess.SubprocessError, ValueError) as exc:
        notes.append(f"whole-process short-wait row skipped: {str(exc)[:1500]}")
        return
    raw["process_warm"] = warm
    rows += warm_rows(warm)


def serving_rows(data: dict) -> list[Row]:
    """The inference server's request latency, instrumented against pristine and off (paired by
    round); a disabled async span against an uninstrumented coroutine call."""
    from benchmarks.serving_bench import paired

    s = (
        f"serving: one completion request at a time, localhost server (megatron-core 0.19.2), stand-in "
        f"engine answering in {data['delay_ms']:g} ms; {data['rounds']} rounds paired by round; "
        f"load average {', '.join(f'{x:.1f}' for x in data['load'])}"
    )
    rows = []
    budget_ms = data["delay_ms"] * 0.01  # the goal: at most 1% of a 50 ms request
    for arm, base, goal in (
        ("off", "pristine", None),
        ("default", "off", budget_ms),
        ("all", "off", budget_ms),
    ):
        added, ratio, base_latency = paired(data, arm, base)
        goal_text = "" if goal is None else f"<= +{goal:g} ms"
        status = "info" if goal is None else ("met" if added * 1e3 <= goal else "NOT MET")
        rows.append(Row(s, f"request latency, {arm} / {base} (median added per request)", f"{added * 1e3:+.3f} ms",
                        f"{base_latency * 1e3:.2f} ms", "", f"{ratio:.4f}x", goal_text, status))  # fmt: skip
    m = data["micro"]
    counts = data.get("instructions") or {}
    python = sys.version.split()[0]
    # the goal is read from instruction counts where callgrind ran (as the other disabled per-call rows)
    rows.append(ratio_row("serving: per call, Python " + python,
                          "async span (traced coroutine), group disabled / uninstrumented coroutine", m,
                          "traced_off", "plain", None if "traced" in counts else ("<=", 1.5)))  # fmt: skip
    if "traced" in counts:
        ratio = counts["traced"] / counts["plain"]
        rows.append(Row(f"serving: per call, Python {python}, instructions (callgrind)",
                        "async span, group disabled / uninstrumented coroutine (instructions per call)",
                        f"{counts['traced']:,.0f}", f"{counts['plain']:,.0f}", f"{ratio:.3f}x", "-",
                        _goal_text(("<=", 1.5)), _status(ratio, ("<=", 1.5))))  # fmt: skip
    return rows


def _serving(args, raw: dict, rows: list, notes: list) -> None:
    if args.no_serving:
        return
    try:
        import hypercorn  # noqa: F401
        import quart  # noqa: F401
        import torch  # noqa: F401
        import zmq  # noqa: F401
    except ImportError as exc:
        notes.append(f"serving rows skipped: {exc} (tox -e runtime's packages)")
        return
    from benchmarks import serving_bench

    rounds = args.serving_rounds or (20 if args.quick else 300)
    print(f"serving: 4 servers, {rounds} interleaved rounds ...", file=sys.stderr)
    try:
        data = serving_bench.run(rounds)
    except Exception as exc:
        notes.append(f"serving rows skipped: {str(exc)[:1500]}")
        return
    if shutil.which("valgrind"):
        from benchmarks import async_instructions

        print(
            "serving: the disabled async span's instructions per call (callgrind, ~1 min) ...",
            file=sys.stderr,
        )
        try:
            data["instructions"] = async_instructions.per_call(20000)
        except Exception as exc:
            notes.append(f"serving: no instruction counts: {str(exc)[:500]}")
    raw["serving"] = data
    rows += serving_rows(data)


def _imports(args, raw: dict, rows: list, notes: list) -> None:
    """``import megatron.training.training`` woven by the installed instrumentation vs not woven."""
    if args.no_import:
        return
    from benchmarks import import_cost

    python = import_cost.torch_python(args.import_python, REPO)
    if python is None:
        notes.append("import-cost rows skipped: no Python with torch (tox -e runtime's, or --import-python)")
        return
    rounds = args.import_rounds or (3 if args.quick else 7)
    print(
        f"import cost: megatron.training.training, {rounds} interleaved rounds ({python}) ...",
        file=sys.stderr,
    )
    try:
        data = import_cost.run(python, REPO / "specs", rounds)
    except (RuntimeError, subprocess.SubprocessError, ValueError, OSError) as exc:
        notes.append(f"import-cost rows skipped: {str(exc)[:1500]}")
        return
    raw["import_cost"] = data
    s = "import megatron.training.training (torch imported first, not counted), fresh interpreter per sample"
    for arm, label, goal in (
        ("woven", "woven by the installed instrumentation (bytecode cached) / not woven", ("<=", 1.05)),
        (
            "first",
            "woven, first time (no bytecode cache: compiling the instrumented sources) / not woven",
            None,
        ),
    ):
        a, b = data[arm], data["plain"]
        ratio = a["min_s"] / b["min_s"]
        rows.append(Row(s, label, f"{a['min_s'] * 1e3:.0f} ms", f"{b['min_s'] * 1e3:.0f} ms", f"{ratio:.3f}x",
                        f"{a['median_s'] / b['median_s']:.3f}x", _goal_text(goal), _status(ratio, goal)))  # fmt: skip


def table_text(rows: list[Row]) -> str:
    """Every row, in full (wide: the file ``--table`` names)."""
    headers = ("measure", "value", "baseline", "ratio", "median", "goal", "status")
    cells = [(r.label, r.value, r.baseline, r.ratio, r.median_ratio, r.goal, r.status) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths)))
    out = [line, "-" * len(line)]
    section = None
    for row, cell in zip(rows, cells):
        if row.section != section:
            section = row.section
            out.append(f"[{section}]")
        out.append(
            "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cell, widths)))
        )
    return "\n".join(out) + "\n"


SUMMARY_WIDTH = 100


def _short_section(section: str) -> str:
    """A section's first words: what it measures, without its set-up."""
    head = section.split(":")[0]
    return ", ".join(head.split(", ")[:2])


def _goal_value(row: Row) -> str:
    """The value a goal row's status reads, with its interval where it has one."""
    if row.read:
        return row.read
    if row.ratio.startswith("["):  # an interval (the whole-process rows)
        return f"{row.value} {row.ratio}"
    return row.ratio if row.ratio not in ("", "-") else row.value


def summary_text(rows: list[Row], width: int = SUMMARY_WIDTH) -> str:
    """The goal rows only, one per line, at most ``width`` columns: status, value, goal, measure
    (wrapped)."""
    import textwrap

    goals = [r for r in rows if r.goal]
    head = ("status", "value", "goal")
    cells = [(r.status, _goal_value(r), r.goal) for r in goals]
    widths = (
        [min(24, max(len(h), *(len(c[i]) for c in cells), 0)) for i, h in enumerate(head)]
        if cells
        else [6, 5, 4]
    )
    left = sum(widths) + 2 * len(widths)
    wrap = max(20, width - left)
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths)) + "  measure"]
    out.append("-" * min(width, left + wrap))
    for row, cell in zip(goals, cells):
        first = "  ".join(c.ljust(w) for c, w in zip(cell, widths)) + "  "
        # a cell longer than its column ("met (its interval reaches over)") shortens the first line
        out += textwrap.wrap(
            f"{_short_section(row.section)}: {row.label}",
            left + wrap,
            initial_indent=first,
            subsequent_indent=" " * left,
        ) or [first.rstrip()]
    met = sum(r.status.startswith("met") for r in goals)
    out.append(
        f"{met} of {len(goals)} goals met; NOT MET: {sum(r.status.startswith('NOT MET') for r in goals)}"
    )
    return "\n".join(out) + "\n"


def print_table(rows: list[Row]) -> None:
    print(table_text(rows), end="")


INSTRUCTION_CALLS = 20000


def count_instructions(off: Path, on: Path, calls: int = INSTRUCTION_CALLS) -> dict[str, float]:
    """Instructions per call of the per-call variants (``runtime_worker.py --instructions``)."""
    command = [sys.executable, str(WORKER), "--off-tree", str(off), "--on-tree", str(on), "--instructions",
               str(calls)]  # fmt: skip
    return timing.callgrind_per_call(command, calls)


def instruction_row(section: str, label: str, value: float, base: float, goal: tuple[str, float]) -> Row:
    """A goal read from instructions per call (``value`` against ``base``, the uninstrumented
    call's): repeatable to a fraction of an instruction per call, where the timed rows beside it
    move by 0.1x from run to run."""
    ratio = value / base
    return Row(section, label, f"{value:,.0f}", f"{base:,.0f}", f"{ratio:.3f}x", "-", _goal_text(goal),
               _status(ratio, goal))  # fmt: skip


def instruction_rows(counts: dict[str, float], python: str) -> list[Row]:
    """The disabled per-call rows' goals, read from instruction counts (``instruction_row``)."""
    rows = []
    for w, what in (("empty", "empty function"), ("small", "small function (~1 us)")):
        s = f"per call, {what}, Python {python}, instructions (callgrind)"
        for kind, goal in (("function", 1.5), ("statement", 3.0)):
            rows.append(instruction_row(s, f"{kind} span, group disabled / uninstrumented (instructions per call)",
                                        counts[f"{w}.{kind}.group_off"], counts[f"{w}.base"], ("<=", goal)))  # fmt: skip
    return rows


def _runtime(args, rounds: int, off: Path, on: Path, raw: dict, rows: list) -> None:
    print(f"runtime: generated fixture in {off.parent}; {rounds} interleaved rounds ...", file=sys.stderr)
    raw["runtime"] = run_worker(sys.executable, off, on, rounds, 4.0, lens=False)
    counts = None
    if shutil.which("valgrind") and not args.quick:
        print("runtime: the disabled spans' instructions per call (callgrind, ~1 min) ...", file=sys.stderr)
        try:
            counts = raw["instructions"] = count_instructions(off, on)
        except (RuntimeError, subprocess.SubprocessError, ValueError, KeyError, IndexError) as exc:
            raw["instructions"] = {"error": str(exc)[:1500]}
    rows += runtime_rows(raw["runtime"], timed_goals=counts is None)
    if counts is not None:
        rows += instruction_rows(counts, raw["runtime"]["python"])
    if args.no_lens:
        lens_data, lens_status = None, "skipped (--no-lens)"
    else:
        python, lens_status = lens_python(args.lens_python, not args.no_lens_install)
        lens_data = None
        if python is not None:
            print(f"nemo-lens: {python} ...", file=sys.stderr)
            try:
                lens_data = run_worker(str(python), off, on, rounds, 4.0, lens=True)
            except (RuntimeError, subprocess.SubprocessError) as exc:
                lens_status = f"worker failed: {str(exc).splitlines()[0]}"
    raw["lens"] = lens_data or {"status": lens_status}
    rows += lens_rows(lens_data, lens_status)


def _dependency(tmp: Path, rounds: int, raw: dict, rows: list, notes: list, instructions: bool) -> None:
    from benchmarks import dependency_bench

    print("dependency mode: the import shim, without and with megatron-otel-runtime ...", file=sys.stderr)
    if instructions:
        print(
            "dependency mode: then the disabled spans' instructions per call (callgrind, ~30 s)",
            file=sys.stderr,
        )
    try:
        raw["dependency"] = dependency_bench.run(tmp / "dependency", rounds, instructions)
    except Exception as exc:
        notes.append(f"dependency-mode rows skipped: {exc!r}"[:1000])
        return
    error = raw["dependency"].get("instructions", {}).get("error")
    if error:
        notes.append(
            f"dependency-mode instruction counts failed (the timed rows keep the goals): {error}"[:1000]
        )
    rows += dependency_bench.rows(raw["dependency"], ratio_row, instruction_row)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, no subprocess generator runs")
    parser.add_argument(
        "--rounds", type=int, help="interleaved rounds per runtime variant (default 40, quick 12)"
    )
    parser.add_argument("--no-generator", action="store_true", help="skip the generator benchmark")
    parser.add_argument(
        "--generator-only",
        action="store_true",
        help="only the generator rows (no runtime, nemo-lens or training-step rows)",
    )
    parser.add_argument("--no-lens", action="store_true", help="skip nemo-lens")
    parser.add_argument(
        "--no-lens-install", action="store_true", help="use nemo-lens only if already installed"
    )
    parser.add_argument("--lens-python", help="a Python that can import nemo.lens and the OTel SDK")
    parser.add_argument(
        "--no-step", action="store_true", help="skip the training-step rows (they need torch)"
    )
    parser.add_argument(
        "--step-layer",
        action="store_true",
        help="training step: also the layer-shaped GPT (hidden 1024, seq 1024; minutes on CPU)",
    )
    parser.add_argument(
        "--step-rounds", type=int, help="interleaved rounds per arm (default tiny 60, layer 4)"
    )
    parser.add_argument(
        "--no-process", action="store_true", help="skip the whole-process rows (~786 spans a step)"
    )
    parser.add_argument(
        "--process-rounds", type=int, help="interleaved rounds of the whole-process arms (default 8, quick 3)"
    )
    parser.add_argument(
        "--no-import", action="store_true", help="skip the import-cost rows (they need torch)"
    )
    parser.add_argument("--import-python", help="a Python with torch for the import-cost rows")
    parser.add_argument(
        "--import-rounds", type=int, help="interleaved rounds per import arm (default 7, quick 3)"
    )
    parser.add_argument(
        "--no-serving", action="store_true", help="skip the serving rows (they need torch, Quart)"
    )
    parser.add_argument(
        "--serving-only",
        action="store_true",
        help="only the serving rows (the inference server's request latency)",
    )
    parser.add_argument(
        "--serving-rounds", type=int, help="interleaved request rounds (default 300, quick 20)"
    )
    parser.add_argument("--json", type=Path, help="also write the raw measurements here")
    parser.add_argument(
        "--table",
        type=Path,
        default=Path(tempfile.gettempdir()) / "megatron-otel-benchmarks.txt",
        help="write the full table (every row, the notes) here; the terminal gets the goal rows",
    )
    args = parser.parse_args(argv)
    rounds = args.rounds or (12 if args.quick else 40)
    started = time.perf_counter()
    raw: dict = {}
    rows: list[Row] = []

    notes: list[str] = []
    if args.serving_only:
        args.generator_only = args.no_generator = True
        _serving(args, raw, rows, notes)
    if not args.generator_only:
        with tempfile.TemporaryDirectory(prefix="otel-bench-") as tmp:
            try:
                off, on = build_fixture(Path(tmp))
            except Exception as exc:  # the generator is being edited: report, still time the rest
                notes.append(
                    f"runtime rows skipped: the generator failed on benchmarks/fixture: {exc!r}"[:1000]
                )
                args.no_lens = True
                off = on = None
            if off is not None:
                _runtime(args, rounds, off, on, raw, rows)
                _dependency(
                    Path(tmp), rounds, raw, rows, notes, bool(shutil.which("valgrind")) and not args.quick
                )

        _steps(args, raw, rows, notes)
        _process(args, raw, rows, notes)
        _imports(args, raw, rows, notes)
        _serving(args, raw, rows, notes)

    if not args.no_generator:
        from benchmarks import generator_bench

        print("generator: codegen on specs/ (about 30 s) ...", file=sys.stderr)
        try:
            g = generator_bench.run(REPO / "specs", REPO, generate_runs=2, floor_runs=3, cli=not args.quick)
        except Exception as exc:
            notes.append(f"generator rows skipped: {exc!r}"[:1000])
        else:
            raw["generator"] = g.__dict__
            rows += generator_rows(g)
            notes += g.notes

    legend = (
        "ratio: min over rounds of the value / of the baseline; median: the median of the per-round\n"
        "ratios where both were timed in every round (per call: the status reads it), else the ratio\n"
        "of the medians. Per-call values have the timing loop's own cost subtracted.\n"
    )
    if not rows:  # every part skipped: say why, write no table
        print("benchmarks: nothing was measured", file=sys.stderr)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        return 1
    full = table_text(rows) + legend + "".join(f"note: {note}\n" for note in notes)
    args.table.parent.mkdir(parents=True, exist_ok=True)
    args.table.write_text(full, encoding="utf-8")
    print(summary_text(rows), end="")
    print(f"every row, with the notes: {args.table}")
    print(f"total {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(raw, indent=2, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
