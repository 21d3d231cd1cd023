"""The hand check of the activity labels (paper 4 and E.7: 56 of 60 correct).

``spu analyze sample`` draws calls (seeded) from every run under a folder and writes
them as JSON lines, one :class:`~spu.schema.AuditVerdict` per call with ``correct``
null, plus the call's tool, command and the head of its output for the person checking;
``spu analyze audit`` reads the file back, validates every line (a bad line is an error
naming the file, the line and the key), stores the verdicts as ``audit.csv`` and reports
the share of labels found correct with its Wilson interval.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from spu.activities import RunContext, label_call
from spu.analysis.runs import call_texts
from spu.analysis.trajectory_analysis import run_folders, sample_calls
from spu.schema import AuditVerdict
from spu.stats.resampling import wilson_interval
from spu.tasks.package import validation_message
from spu.tracking.trajectories import TrajectoryFileError, find_trajectory, iter_steps

SHOWN_CHARS = 600
"""Characters of a call's command and of its output shown to the person checking."""


class AuditFileError(ValueError):
    """A verdict file cannot be used; the message names the file, line and key."""


def draw_sample(runs_dir: Path, n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` calls drawn from all runs under ``runs_dir``, each with its label and text.

    Raises:
        FileNotFoundError: ``runs_dir`` is not a folder.
    """
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise FileNotFoundError(f"{runs_dir}: runs folder does not exist")
    index = []
    folders = {}
    for folder in run_folders(runs_dir):
        path = find_trajectory(folder)
        if path is None:
            continue
        folders[folder.name] = (folder, path)
        try:
            for step in iter_steps(path):
                index += [(folder.name, step.index, k) for k in range(len(step.tool_calls))]
        except TrajectoryFileError:
            continue
    chosen = sample_calls(pd.DataFrame(index, columns=["folder", "step", "call_index"]), n, seed)
    wanted = {(r.folder, r.step, r.call_index) for r in chosen.itertuples(index=False)}
    out = []
    for name in sorted({f for f, _, _ in wanted}):
        folder, path = folders[name]
        ctx = RunContext(task_paths=("/task", "SPU_TASK_DIR", str(folder / "task")),
                         output_paths=("/output", "SPU_OUTPUT_DIR", str(folder / "output")))
        run_key = _run_key(folder)
        for step in iter_steps(path):
            for k, call in enumerate(step.tool_calls):
                # every call is labelled: the context (scripts written) must be complete
                label = label_call(call.name, call.arguments, call.output, ctx, call.is_error)
                if (name, step.index, k) in wanted:
                    out.append({
                        "run_key": run_key, "step": step.index, "call_index": k,
                        "activity": label.activity.value, "correct": None,
                        "correct_activity": None, "note": None,
                        "tool": call.name, "families": list(label.families),
                        "command": call_texts(call)[:SHOWN_CHARS],
                        "output_head": (call.output or "")[:SHOWN_CHARS // 2],
                    })
    return out


def _run_key(folder: Path) -> str:
    try:
        return str(json.loads((folder / "run.json").read_text(encoding="utf-8"))["run_key"])
    except (OSError, ValueError, KeyError, TypeError):
        return folder.name


def format_sample(sample: list[dict[str, Any]]) -> str:
    """The sample as text for a person: one block per call."""
    blocks = []
    for i, s in enumerate(sample, start=1):
        families = f" families={','.join(s['families'])}" if s["families"] else ""
        command = s["command"].replace("\n", "\n    ")
        output = s["output_head"].replace("\n", "\n    ")
        blocks.append(f"[{i}] run {s['run_key']} step {s['step']} call {s['call_index']}: "
                      f"{s['tool']} -> {s['activity']}{families}\n    {command}\n"
                      f"  output:\n    {output}")
    return "\n\n".join(blocks)


def write_sample(sample: list[dict[str, Any]], path: Path) -> Path:
    """Write the sample as JSON lines (verdict fields first, context after)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(s) + "\n" for s in sample), encoding="utf-8")
    return path


def read_verdicts(path: Path) -> list[AuditVerdict]:
    """The verdicts of a filled-in sample file (context fields are ignored).

    Raises:
        AuditFileError: A line is not JSON or not a verdict (the message names the line).
    """
    verdicts = []
    fields = set(AuditVerdict.model_fields)
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AuditFileError(f"{path}: line {number}: not JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise AuditFileError(f"{path}: line {number}: not a JSON object")
        try:
            verdicts.append(AuditVerdict.model_validate(
                {k: v for k, v in obj.items() if k in fields}))
        except ValidationError as exc:
            raise AuditFileError(validation_message(f"{path}: line {number}", exc)) from None
    return verdicts


def store_verdicts(verdicts: list[AuditVerdict], out: Path) -> Path:
    """Write the verdicts to ``out/audit.csv``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "audit.csv"
    pd.DataFrame([v.model_dump(mode="json") for v in verdicts],
                 columns=list(AuditVerdict.model_fields)).to_csv(path, index=False)
    return path


@dataclass(frozen=True)
class LabelAccuracy:
    """Share of checked labels found correct."""

    correct: int
    checked: int
    unchecked: int
    share: float
    ci_low: float
    ci_high: float
    by_activity: dict[str, tuple[int, int]]
    """Correct and checked, by the rules' label."""


def label_accuracy(verdicts: list[AuditVerdict]) -> LabelAccuracy:
    """Accuracy of the labels with a 95% Wilson interval.

    Examples
    --------
    The paper's 56 of 60:

    >>> v = [AuditVerdict(run_key="r", step=i, call_index=0, activity="other",
    ...                   correct=i < 56) for i in range(60)]
    >>> a = label_accuracy(v)
    >>> a.correct, a.checked, round(a.share, 3), round(a.ci_low, 3)
    (56, 60, 0.933, 0.841)
    """
    checked = [v for v in verdicts if v.correct is not None]
    correct = sum(1 for v in checked if v.correct)
    by: dict[str, tuple[int, int]] = {}
    for v in checked:
        right, n = by.get(v.activity.value, (0, 0))
        by[v.activity.value] = (right + bool(v.correct), n + 1)
    low, high = wilson_interval(correct, len(checked)) if checked else (float("nan"),) * 2
    return LabelAccuracy(correct, len(checked), len(verdicts) - len(checked),
                         correct / len(checked) if checked else float("nan"), low, high, by)
