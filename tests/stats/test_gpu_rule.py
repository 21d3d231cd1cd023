"""GPU use in ``spu stats``: the paper's executed-code rule (E.12) by default, the sampled
device beside it (``gpu_measured``), and ``manifest.json`` naming the rule."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from spu.analysis.runs import executed_gpu_use
from spu.schema import ToolCall, Trajectory, TrajectoryStep
from spu.stats.analysis import StatsOptions, analyze
from spu.stats.effort import EffortPair, effort_ratios
from spu.stats.gpu import GPU_RULES, apply_gpu_rule
from spu.stats.runs_table import check_runs_table
from spu.tracking.trajectories import write_trajectory

from .conftest import run_row

TORCH = "python3 -c \"import torch; x = torch.randn(8, device='cuda'); print(x.device)\""
OUTPUTS = {"ran": "cuda:0",
           "failed": "OSError: libcudart.so.12: cannot open shared object file",
           "none": None}


def _run_folder(root: Path, run_key: str, gpu: str, measured: bool) -> None:
    """A run folder whose trajectory runs a GPU workload that works, fails, or none."""
    folder = root / "runs" / run_key
    (folder / "output").mkdir(parents=True)
    calls = [ToolCall(name="Bash", arguments={"command": "ls"}, output="a b")]
    if OUTPUTS[gpu] is not None:
        calls = [ToolCall(name="Bash", arguments={"command": TORCH}, output=OUTPUTS[gpu])]
    steps = [TrajectoryStep(index=0, timestamp="2026-11-01T00:00:00Z", role="assistant",
                            tool_calls=calls),
             TrajectoryStep(index=1, timestamp="2026-11-01T00:01:00Z", role="assistant",
                            text="done")]
    write_trajectory(folder / "trajectory.jsonl.gz",
                     Trajectory(harness="claude_code", cli_version="t", steps=steps))
    (folder / "run.json").write_text(json.dumps({"run_key": run_key, "used_gpu": measured}))


@pytest.fixture
def hand_table(tmp_path: Path) -> tuple[pd.DataFrame, Path]:
    """Four scored runs of M (low effort) and X (high effort) on two tasks, one unscored.

    By hand: M-t1 ran a workload the sampler missed (executed yes, measured no); X-t1's
    workload failed though the device was busy (no, yes); M-t2 did nothing (no, no);
    X-t2 ran one (yes, yes); X-t3 has no run folder (keeps the measured yes).
    """
    root = tmp_path / "outputs"
    plan = {"M-t1-0": ("ran", False), "X-t1-0": ("failed", True), "M-t2-0": ("none", False),
            "X-t2-0": ("ran", True)}
    for key, (gpu, measured) in plan.items():
        _run_folder(root, key, gpu, measured)
    rows = [run_row("M", "t1", 0.2, used_gpu=False), run_row("X", "t1", 0.3, used_gpu=True),
            run_row("M", "t2", 0.4, used_gpu=False), run_row("X", "t2", 0.5, used_gpu=True),
            run_row("X", "t3", 0.1, used_gpu=True), run_row("M", "t3", None, used_gpu=True)]
    return pd.DataFrame(rows), root


def test_executed_code_rule_by_hand(hand_table) -> None:
    runs, root = hand_table
    result = apply_gpu_rule(runs, "executed", root, executed_gpu_use)
    by_id = result.runs.set_index("run_id")
    assert by_id["used_gpu"].to_dict() == {"M-t1-0": True, "X-t1-0": False, "M-t2-0": False,
                                           "X-t2-0": True, "X-t3-0": True, "M-t3-0": True}
    assert by_id["gpu_measured"].tolist() == [False, True, False, True, True, True]
    assert (result.rule, result.from_trajectories, result.measured_only) == ("executed", 4, 1)
    assert "1 scored run(s) have no trajectory" in result.notes[0]
    # Figure 24c's share of scored runs that used a GPU: M (M-t1, M-t2) 1 of 2 by code,
    # 0 of 2 sampled; X (X-t1, X-t2, X-t3) 2 of 3 by code, 3 of 3 sampled.
    ratios = effort_ratios(check_runs_table(result.runs), EffortPair("M", "X", "m"),
                           resamples=20).set_index("quantity")
    assert ratios.loc["used_gpu", ["low_mean", "high_mean"]].tolist() == pytest.approx(
        [0.5, 2 / 3])
    assert ratios.loc["gpu_measured", ["low_mean", "high_mean"]].tolist() == pytest.approx(
        [0.0, 1.0])


def test_measured_rule_and_fallbacks(hand_table) -> None:
    runs, root = hand_table
    measured = apply_gpu_rule(runs, "measured", root, executed_gpu_use)
    assert measured.runs["used_gpu"].tolist() == runs["used_gpu"].tolist()
    assert measured.rule == "measured" and measured.from_trajectories == 0
    without = apply_gpu_rule(runs, "executed", None, executed_gpu_use)
    assert without.rule == "measured" and without.asked == "executed"
    assert "no --runs-dir" in without.notes[0]
    with pytest.raises(ValueError, match="--gpu-rule"):
        apply_gpu_rule(runs, "nvml")


def test_the_paper_rule_is_the_default(hand_table) -> None:
    import argparse

    from spu.stats.cli import add_analysis_arguments

    parser = argparse.ArgumentParser()
    add_analysis_arguments(parser)
    args = parser.parse_args(["runs.csv", "--out", "x"])
    assert args.gpu_rule == StatsOptions().gpu_rule == GPU_RULES[0] == "executed"
    runs, root = hand_table
    result = analyze(check_runs_table(runs), StatsOptions(resamples=20, runs_dir=root,
                                                        gpu_reader=executed_gpu_use))
    assert result.manifest["gpu_rule"]["rule"] == "executed"
    assert result.manifest["gpu_rule"]["runs_from_trajectories"] == 4
    assert "E.12" in result.manifest["gpu_rule"]["text"]
    assert result.runs.set_index("run_id").loc["M-t1-0", "used_gpu"]
