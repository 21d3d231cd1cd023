"""GPU use as E.12 defines it, Figure 22b and 22e, and the audited service (3.7, 4.1)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from spu.analysis.runs import read_run
from spu.analysis.trajectory_analysis import audited_tools, gpu_within_config, gpu_workloads
from spu.schema import ToolCall
from spu.stats.outcomes import relative_frame
from tests.analysis.test_rankings import FINAL, make_run, step

GPU = "import torch\nx = torch.randn(64, 64, device='cuda')\nprint(x.device)\n"


def bash(command: str, output: str = "") -> ToolCall:
    return ToolCall(name="Bash", arguments={"command": command}, output=output)


def _steps(probe_at: int, workload: bool) -> list:
    """Twelve calls in step 1, the ``probe_at``-th (from 1) an ``nvidia-smi``."""
    calls = [bash("nvidia-smi", "NVIDIA H20 | 0MiB / 97871MiB") if k == probe_at
             else bash("ls /workspace", "a b") for k in range(1, 13)]
    steps = [step(0, "start"), step(1, None, calls)]
    if workload:
        steps.append(step(2, None, [bash(f"python3 - <<'EOF'\n{GPU}EOF", "cuda:0")]))
    steps.append(step(3, "done"))
    return steps


def test_early_probe_is_a_gpu_probe_within_the_first_ten_calls(tmp_path) -> None:
    early = read_run(make_run(tmp_path / "a", _steps(10, False), FINAL)).features
    late = read_run(make_run(tmp_path / "b", _steps(11, False), FINAL)).features
    # the tenth call probes the GPU: early; the eleventh: not (before, any probe in the
    # first ten and a GPU probe anywhere counted, so ``ls`` made the second one early too)
    assert early["gpu_probe"] and early["gpu_probe_early"]
    assert late["gpu_probe"] and not late["gpu_probe_early"]


def test_used_gpu_is_executed_code_and_the_sampled_device_stays_beside_it(tmp_path) -> None:
    run = make_run(tmp_path, _steps(1, True), FINAL)
    f = read_run(run).features
    assert f["used_gpu"] and f["gpu_workload_main"] == "other" and not f["gpu_measured"]
    # the workload call runs from step 2 (t=20 s) to step 3 (t=30 s): 10 s of 30
    assert f["gpu_call_s"] == pytest.approx(10.0)
    assert f["gpu_call_share"] == pytest.approx(10.0 / 30.0)
    record = json.loads((run / "run.json").read_text())
    record.update(used_gpu=True, gpu_seconds=12.5)
    (run / "run.json").write_text(json.dumps(record))
    probe_only = make_run(tmp_path / "p", _steps(1, False), FINAL)
    (probe_only / "run.json").write_text(json.dumps({**record, "used_gpu": True}))
    g = read_run(probe_only).features
    # the device was sampled busy, but no executed code put work on it: not "used" (E.12)
    assert not g["used_gpu"] and g["gpu_measured"] and g["gpu_seconds"] == 12.5


def test_main_workload_by_discipline_hand_worked() -> None:
    f = pd.DataFrame({"discipline": ["chemistry"] * 3 + ["biology"],
                      "used_gpu": [True, True, False, True],
                      "gpu_workload_main": ["dft", "dft", None, "molecular_dynamics"]})
    t = gpu_workloads(f).set_index(["discipline", "workload"])
    assert t.loc[("chemistry", "dft"), "share"] == 1.0
    assert t.loc[("all", "dft"), "n_runs"] == 2 and t.loc[("all", "dft"), "n_used"] == 3


@pytest.mark.parametrize("tasks", ["both-sides", "all"])
def test_within_configuration_gpu_difference_matches_a_hand_computation(tasks) -> None:
    """4.8: "Over the 63 tasks that have runs on both sides" (the default) or every task
    (--gpu-tasks all); the tasks are cut after each run is made relative to the others."""
    rng = np.random.default_rng(4)
    rows = []
    for t in range(8):
        for c in "ABC":
            rows.append({"task_id": f"t{t}", "config": c, "score": float(rng.normal(0.3, 0.1)),
                         "used_gpu": bool(rng.random() < 0.4),
                         "gpu_confirmed": bool(rng.random() < 0.5)})
    f = pd.DataFrame(rows)
    table = gpu_within_config(f, seed=0, resamples=300, tasks=tasks)
    rel = relative_frame(f.rename(columns={"score": "score_recovered"}).assign(scored=True),
                         ["A", "B", "C"])
    sides = rel.groupby("task_id")["used_gpu"].agg(["any", "all"])
    both = sides.index[sides["any"] & ~sides["all"]]
    assert 0 < len(both) < 8  # the seed leaves tasks on one side only
    if tasks == "both-sides":
        rel = rel[rel["task_id"].isin(both)]
    assert set(table["n_tasks"]) == {rel["task_id"].nunique()}
    for c in "ABC":
        own = rel[rel["config"] == c]
        used = own["used_gpu"]
        if not used.any() or used.all():
            continue
        want = own.loc[used, "relative"].mean() - own.loc[~used, "relative"].mean()
        got = table[(table["marker"] == "used_gpu") & (table["config"] == c)]["diff"].item()
        assert got == pytest.approx(want)
    pooled = table[(table["marker"] == "used_gpu") & (table["config"] == "pooled")].iloc[0]
    assert pooled["ci_low"] <= pooled["diff"] <= pooled["ci_high"]
    assert set(table["marker"]) == {"used_gpu", "gpu_confirmed"}


def test_audited_service_and_never_used(tmp_path) -> None:
    steps = [step(0, "start"), step(1, None, [ToolCall(
        name="mcp__spu__search", arguments={"query": "ligand"}, output="[]")]), step(2)]
    run = make_run(tmp_path / "a", steps, FINAL)
    (run / "tools").mkdir()
    (run / "tools" / "audit.jsonl").write_text("".join(json.dumps(e) + "\n" for e in [
        {"tool": "search", "args": {"query": "ligand"}, "status": "ok"},
        {"tool": "fetch", "args": {"url": "https://x.org"}, "status": "error"},
        {"tool": "fetch", "args": {"url": "https://y.org"}, "status": "refused"}]))
    f = read_run(run).features
    assert (f["audited_calls"], f["audited_errors"], f["audited_refused"]) == (3, 1, 1)
    assert f["used_audited_tools"]
    none = read_run(make_run(tmp_path / "b", [step(0, "start"), step(1)], FINAL)).features
    assert not none["used_audited_tools"] and np.isnan(none["audited_calls"])
    table = audited_tools(pd.DataFrame([f, none]).assign(config=["A", "B"]))
    row = table.set_index("config").loc["all"]
    assert (row["n_with_log"], row["audited_calls"], row["audited_refused"]) == (1, 3, 1)
    assert row["share_never_audited"] == 0.5


def test_within_configuration_takes_one_official_run_per_configuration_and_task() -> None:
    """Repeats (--all-repeats) and a second official run of a pair (the benchmark corpus)
    are left out: the table equals the one of the first official runs alone."""
    rng = np.random.default_rng(9)
    rows = []
    for t in range(8):
        for c in "ABC":
            rows.append({"run_key": f"{t}-{c}-0", "task_id": f"t{t}", "config": c, "repeat": 0,
                         "score": float(rng.normal(0.3, 0.1)),
                         "used_gpu": bool(rng.random() < 0.4),
                         "gpu_confirmed": bool(rng.random() < 0.5)})
    first = pd.DataFrame(rows)
    extra = first.assign(run_key=first["run_key"] + "x", score=0.9, used_gpu=True)
    repeats = first.assign(run_key=first["run_key"] + "r", repeat=1, score=-0.5)
    both = pd.concat([first, extra, repeats], ignore_index=True)
    pd.testing.assert_frame_equal(gpu_within_config(both, seed=0, resamples=100),
                                  gpu_within_config(first, seed=0, resamples=100))
