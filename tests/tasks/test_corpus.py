"""The shipped tasks: real, varied, small enough for the default job, and built from specs."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from spu.tasks.package import discover_tasks, load_answers, load_task
from tests.conftest import TASKS

EXAMPLES = {"example-coupling-conditions", "example-electrolytes-and-films"}
REAL = [p for p in discover_tasks(TASKS) if p.name not in EXAMPLES]
MAX_EXPERIMENTS = 150
MAX_FILE_BYTES = 200 * 1024


def test_at_least_ten_real_tasks_over_the_four_disciplines() -> None:
    assert len(REAL) >= 10
    disciplines = {load_task(p).meta.discipline.value for p in REAL}
    assert disciplines == {"chemistry", "materials science", "biology", "medicine"}


@pytest.mark.parametrize("task_dir", REAL, ids=lambda p: p.name)
def test_real_task_is_small_anonymized_and_cites_its_source(task_dir) -> None:
    task = load_task(task_dir)
    assert re.fullmatch(r"spu-[a-z0-9]{4}", task.id) and task_dir.name == task.id
    assert task.n_items <= MAX_EXPERIMENTS
    for path in task_dir.rglob("*"):
        if path.is_file():
            assert path.stat().st_size <= MAX_FILE_BYTES, path
    answers = load_answers(task.answers_path())
    assert answers.source is not None
    assert answers.source.package and "==" in answers.source.package
    assert answers.source.file
    assert answers.source.doi or answers.source.title or answers.source.preprint_doi \
        or answers.source.note or answers.source.model_extra


@pytest.mark.parametrize("task_dir", REAL, ids=lambda p: p.name)
def test_real_task_has_a_build_spec(task_dir) -> None:
    specs = {yaml.safe_load(p.read_text())["id"]: p for p in (TASKS / "sources").glob("*.yaml")}
    assert task_dir.name in specs


def test_corpus_exercises_groups_weights_and_ties() -> None:
    sizes, unequal_weights, tied, multi_group = [], 0, 0, 0
    for p in REAL:
        task = load_task(p)
        answers = load_answers(task.answers_path())
        sizes += [len(g.items) for g in task.contract.groups]
        weights = {g.weight for g in task.contract.groups}
        unequal_weights += len(weights) > 1
        multi_group += len(task.contract.groups) > 1
        tied += any(len(set(v.values())) < len(v) for v in answers.groups.values())
    assert min(sizes) <= 4 and max(sizes) >= 60
    assert unequal_weights >= 2 and multi_group >= 4 and tied >= 3


def test_experiment_ids_never_repeat_within_a_task() -> None:
    for p in REAL:
        contract = json.loads((p / "contract.json").read_text())
        items = [i for g in contract["groups"] for i in g["items"]]
        assert len(items) == len(set(items)), p.name
