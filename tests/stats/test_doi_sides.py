"""The source DOI requested by the agent and recorded in its report (paper 3.7, Figure 13c)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from spu.stats.exposure import doi_sides, exposure_indicators, task_dois


def _run(root: Path, key: str, query: str | None, report: str | None) -> None:
    folder = root / "runs" / key
    (folder / "output").mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"run_key": key}))
    if query is not None:
        (folder / "tools").mkdir()
        (folder / "tools" / "audit.jsonl").write_text(
            json.dumps({"tool": "search", "args": {"query": "ligands"}}) + "\n"
            + "not json\n" + json.dumps({"tool": "fetch", "args": {"url": query}}) + "\n")
    if report is not None:
        (folder / "output" / "report.md").write_text(report)


def test_hand_worked_request_and_report_sides(tmp_path) -> None:
    doi = "10.1038/S41586-025-0001"
    _run(tmp_path, "r1", f"https://doi.org/{doi.lower()}", "No source.")
    _run(tmp_path, "r2", "https://example.org", f"I recognise {doi} as the source.")
    _run(tmp_path, "r3", None, None)
    _run(tmp_path, "r4", f"https://doi.org/{doi}", f"see {doi}")  # task without a DOI
    runs = pd.DataFrame({"run_id": ["r1", "r2", "r3", "r4", "r5"], "config": "A",
                         "scored": True, "task_id": ["t", "t", "t", "u", "t"],
                         "flagged_exposure": False})
    sides = doi_sides(tmp_path, runs, {"t": doi})
    # r5 has no folder; r4's task has no DOI
    assert sides == {"r1": (True, False), "r2": (False, True), "r3": (False, False)}
    row = exposure_indicators(runs, ["A"], {"t"}, {}, sides).iloc[0]
    assert (row["n_doi_runs"], row["n_doi_sides_known"], row["n_doi_requested"],
            row["n_doi_reported"]) == (4, 3, 1, 1)


def test_without_run_folders_the_counts_are_zero_of_zero() -> None:
    runs = pd.DataFrame({"run_id": ["r1"], "config": "A", "scored": True, "task_id": ["t"],
                         "flagged_exposure": False})
    row = exposure_indicators(runs, ["A"], {"t"}).iloc[0]
    assert (row["n_doi_sides_known"], row["n_doi_requested"], row["n_doi_reported"]) == (0, 0, 0)


def test_the_simulated_study_exercises_both_sides(tmp_path) -> None:
    from spu.stats.simulate import PAPER_CONFIGS, SimulationParameters, simulate_study
    from spu.stats.submissions import load_task_set

    runs = simulate_study(tmp_path, SimulationParameters(configs=PAPER_CONFIGS[:4], repeats=0),
                          seed=0)
    scored = runs[runs["scored"]]
    tasks = load_task_set([tmp_path / "tasks"])
    sides = doi_sides(tmp_path / "outputs", scored, task_dois(tasks))
    assert len(sides) == len(scored)
    assert 0 < sum(r for r, _ in sides.values()) < sum(p for _, p in sides.values())
