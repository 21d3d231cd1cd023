"""Contamination probes (``harness=recall``) and ``spu task contamination``.

A scripted model that remembers one task (its DOI and its measured order) and not
another is probed with both questions in one multirun, through the model gateway and
the default sandbox, recorded in MLflow on SQLite; the contamination table then flags
the remembered task, and only it, to retire.
"""

from __future__ import annotations

import csv
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from spu.config import EffortConfig, HarnessConfig, ModelConfig
from spu.harness.base import HarnessError
from spu.harness.recall import RecallHarness
from spu.scripted import load_script
from spu.scripted.script import ScriptError
from tests.conftest import EXAMPLE_TASK, run_module
from tests.harness.test_cli_runs import sandbox_ok  # noqa: F401


@dataclass(frozen=True)
class ProbedTask:
    """A copy of the example task with its own id, source and measured values."""

    path: Path
    task_id: str
    doi: str
    title: str
    measured: dict[str, dict[str, float]]
    """Group -> experiment -> measured value (values found nowhere else)."""

    def measured_order(self, reverse: bool = False) -> list[dict[str, object]]:
        """Each group's experiments from the lowest measured value (or the highest)."""
        return [{"group_id": g, "order": sorted(values, key=values.__getitem__,
                                                 reverse=reverse)}
                for g, values in self.measured.items()]


def _probed_task(root: Path, task_id: str, doi: str, title: str, offset: float) -> ProbedTask:
    path = root / task_id
    shutil.copytree(EXAMPLE_TASK, path)
    meta = (path / "task.yaml").read_text().replace(EXAMPLE_TASK.name, task_id)
    (path / "task.yaml").write_text(meta)
    contract = json.loads((path / "contract.json").read_text())
    contract["task_id"] = task_id
    (path / "contract.json").write_text(json.dumps(contract, indent=1))
    answers = json.loads((path / "hidden" / "answers.json").read_text())
    answers["task_id"] = task_id
    # Distinct values that appear in no public file, so that a leak would show.
    for group in answers["groups"].values():
        for k, item in enumerate(sorted(group)):
            group[item] = round(offset + 7.123457 * ((k * 5) % 8), 6)
    answers["source"] = {"doi": doi, "title": title}
    (path / "hidden" / "answers.json").write_text(json.dumps(answers, indent=1))
    return ProbedTask(path, task_id, doi, title, answers["groups"])


def make_tasks(root: Path) -> tuple[ProbedTask, ProbedTask]:
    """Two tasks: one the scripted model remembers, one it does not."""
    known = _probed_task(root, "recall-known", "10.5555/spu.recall.known.2021",
                         "Kinetic resolution of remembered biaryls under automated screening",
                         offset=1000.0)
    unknown = _probed_task(root, "recall-unknown", "10.5555/spu.recall.unknown.2026",
                           "Fresh measurements of unpublished electrolyte stabilities",
                           offset=3000.0)
    return known, unknown


def write_script(path: Path, known: ProbedTask, unknown: ProbedTask) -> Path:
    """The scripted model: remembers ``known`` (its DOI and order), not ``unknown``."""
    answers = [
        {"if_asked": [known.task_id, "which published study"],
         "text": f"These look like the screen of Example et al., J. Remembered Chem. (2021), "
                 f"doi:{known.doi}."},
        {"if_asked": [known.task_id, "measured order"],
         "text": "```json\n" + json.dumps({"rankings": known.measured_order()}) + "\n```"},
        {"if_asked": [unknown.task_id, "which published study"],
         "text": "I do not know which study these experiments come from."},
        # A wrong memory: the reverse of the measured order (graded, far below chance).
        {"if_asked": [unknown.task_id, "measured order"],
         "text": json.dumps({"rankings": unknown.measured_order(reverse=True)})},
    ]
    path.write_text(json.dumps({"name": "recall_memory", "turns": [], "answers": answers}))
    return path


@pytest.mark.slow
def test_a_remembered_task_is_flagged_and_a_fresh_one_is_not(sandbox_ok,  # noqa: F811
                                                             tmp_path: Path) -> None:
    """Both probes of both tasks as one multirun: the remembered task's source is recalled
    and its order probe scores above its chance threshold, the other task neither; no
    probe sees a key or a measured value; every probe is recorded in MLflow (SQLite)."""
    root = tmp_path / "tasks"
    known, unknown = make_tasks(root)
    script = write_script(tmp_path / "memory.json", known, unknown)
    out = tmp_path / "outputs"
    proc = run_module(["spu.main", "-m", "harness=recall",
                       "harness.options.probe=source,order",
                       "model=scripted", f"model.api_model={script}", f"task_root={root}",
                       "task=glob(*)", f"output_root={out}", "limits.gpus=0",
                       "limits.time_s=120", "model.prices.input=1.0",
                       "model.prices.output=5.0"], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]

    records = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/run.json"))]
    assert len(records) == 4
    # The probe is an option of the harness, in the identity where it is not the default.
    by = {(r["task_id"], r["identity"]["config"].get("options", {}).get("probe", "source")): r
          for r in records}
    assert set(by) == {(t.task_id, p) for t in (known, unknown) for p in ("source", "order")}
    for record in records:
        run_dir = out / "runs" / record["run_key"]
        recall = json.loads((run_dir / "output" / "recall.json").read_text())
        # The sandbox held the public files only: no key, no hidden folder ...
        assert "hidden" not in recall["task_files"] and "answers.json" not in recall["task_files"]
        assert not (run_dir / "task" / "hidden").exists()
        # ... and nothing of any key reached the model.
        for task in (known, unknown):
            assert task.doi not in recall["prompt"] and task.title not in recall["prompt"]
            for values in task.measured.values():
                assert not any(repr(v) in recall["prompt"] for v in values.values())
        # Through the gateway: its record is the run's usage and cost.
        assert record["gateway"] is not None and record["cost_usd"] > 0
        lines = (run_dir / "model" / "requests.jsonl").read_text().splitlines()
        assert len(lines) == 1 and json.loads(lines[0])["status"] == 200

    source_known = by[(known.task_id, "source")]
    assert source_known["flagged_exposure"]
    assert {h["kind"] for h in source_known["exposure_hits"]} == {"doi"}
    assert {h["tool"] for h in source_known["exposure_hits"]} == {"model_answer"}
    assert not by[(unknown.task_id, "source")]["flagged_exposure"]
    order_known = by[(known.task_id, "order")]
    assert order_known["outcome"] == "valid" and order_known["score_recovered"] == 1.0
    assert order_known["score_recovered"] > order_known["threshold"]
    order_unknown = by[(unknown.task_id, "order")]
    assert order_unknown["outcome"] == "valid"
    assert order_unknown["score_recovered"] < order_unknown["threshold"]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    tracked = client.search_runs(experiments)
    assert sorted(r.data.tags["run_key"] for r in tracked) == sorted(r["run_key"]
                                                                    for r in records)
    assert {r.data.params["harness"] for r in tracked} == {"recall"}

    table = tmp_path / "contamination.csv"
    proc = run_module(["spu", "task", "contamination", str(out), "--tasks", str(root),
                       "--out", str(table)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rule: a task is flagged to retire when any model recalls its source" in proc.stdout
    assert f"retire: {known.task_id}\n" in proc.stdout
    rows = {r["task_id"]: r for r in csv.DictReader(table.open())}
    assert rows[known.task_id] == {
        "task_id": known.task_id, "model": "scripted", "source_recalled": "true",
        "recall_score": "1.0000", "recall_above_chance": "true", "retire": "true"}
    assert rows[unknown.task_id]["source_recalled"] == "false"
    assert rows[unknown.task_id]["recall_above_chance"] == "false"
    assert rows[unknown.task_id]["retire"] == "false"


def _harness(**cfg: object) -> RecallHarness:
    return RecallHarness(HarnessConfig(name="recall", **cfg),  # type: ignore[arg-type]
                         ModelConfig(name="scripted", provider="scripted"),
                         EffortConfig(name="none"))


def test_a_probe_is_an_option_checked_before_the_run() -> None:
    """An unknown probe, or a misspelt option, stops the run at once, in one line naming
    the key and the harness's options; the probe is its option's value."""
    assert _harness().probe() == "source"
    assert _harness(options={"probe": "order"}).probe() == "order"
    with pytest.raises(HarnessError, match=r"^harness.options.probe: Input should be 'source' "
                                           r"or 'order' \(got 'dates'; harness=recall\) "
                                           r"\(its options: probe\)$"):
        _harness(options={"probe": "dates"})
    with pytest.raises(HarnessError, match=r"^harness.options.prob: not an option of "
                                           r"harness=recall \(its options: probe\)$"):
        _harness(options={"prob": "order"})


def test_scripted_answers_need_if_asked_and_text(tmp_path: Path) -> None:
    """A script's ``answers`` are read strictly; the first whose strings are all asked wins."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"turns": [], "answers": [
        {"if_asked": ["a", "b"], "text": "both"}, {"if_asked": "a", "text": "a only"}]}))
    script = load_script(path)
    assert (script.answer("b a"), script.answer("a"), script.answer("c")) == \
        ("both", "a only", None)
    path.write_text(json.dumps({"turns": [], "answers": [{"if_asked": "", "text": "x"}]}))
    with pytest.raises(ScriptError, match=r"s.json: answers\[0\] must be an object"):
        load_script(path)
