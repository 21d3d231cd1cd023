"""Grading speed against a straightforward reference, measured in the same run.

    .venv/bin/python benchmarks/grading.py [--submissions 10000] [--seed 0]

1. Grade 10,000 random valid submissions of a 100-item, 10-group task with
   ``grade_submission`` (which ranks the answer key on every call), with a
   ``GradingKey`` prepared once, and with the reference (``json.loads`` +
   ``scipy.stats.spearmanr`` per group, weighted). All give the same scores (checked
   to 1e-12 first); the ratios of their times are printed. Target: >= 10x for
   ``grade_submission``.
2. The chance thresholds of 116 paper-sized tasks (4,207 experiments in 517 groups,
   4,000 draws each; paper section 2.5). Target: under 2 s. A straightforward reference
   (one ``numpy`` permutation and one ``spearmanr`` per group and draw) is timed on
   ``--reference-draws`` draws per task and scaled to 4,000.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np
from scipy.stats import spearmanr

from spu.grading import chance_threshold, grade_submission
from spu.grading.rules import GradingKey
from spu.schema import AnswerKey, ComparisonGroup, Contract

PAPER_TASKS, PAPER_GROUPS, PAPER_EXPERIMENTS = 116, 517, 4207
THRESHOLD_TARGET_S = 2.0
GRADING_TARGET_RATIO = 10.0


def make_task(task_id: str, sizes: list[int], rng: random.Random) -> tuple[Contract, AnswerKey]:
    """A task with one group per size; small integer values, so ties are common."""
    groups, measured = [], {}
    for k, n in enumerate(sizes):
        items = [f"E{k:02d}{i:03d}" for i in range(n)]
        rng.shuffle(items)
        groups.append(ComparisonGroup(group_id=f"G{k}", endpoint="y", weight=1 / len(sizes),
                                      items=items))
        values = [float(rng.randint(0, 3 * n)) for _ in items]
        if len(set(values)) < 2:
            values[0] += 1.0
        measured[f"G{k}"] = dict(zip(items, values, strict=True))
    return (Contract(task_id=task_id, task_version="1", groups=groups),
            AnswerKey(task_id=task_id, task_version="1", groups=measured))


def reference_score(data: bytes, contract: Contract, answers: AnswerKey) -> float:
    """The straightforward grader: json.loads and scipy's spearmanr per group."""
    obj = json.loads(data)
    weights = {g.group_id: g.weight for g in contract.groups}
    score = 0.0
    for entry in obj["rankings"]:
        measured = answers.groups[entry["group_id"]]
        order = entry["order"]
        rho = spearmanr(range(len(order)), [measured[i] for i in order])[0]
        score += weights[entry["group_id"]] * rho
    return score


def bench_grading(n_submissions: int, seed: int) -> float:
    rng = random.Random(seed)
    contract, answers = make_task("bench", [10] * 10, rng)
    submissions = []
    for _ in range(n_submissions):
        rankings = []
        for g in contract.groups:
            order = list(g.items)
            rng.shuffle(order)
            rankings.append({"group_id": g.group_id, "order": order})
        submissions.append(json.dumps({"task_id": "bench", "task_version": "1",
                                       "rankings": rankings}).encode())
    for data in submissions[:200]:
        ours = grade_submission(contract, answers, data).score
        assert abs(ours - reference_score(data, contract, answers)) <= 1e-12

    start = time.perf_counter()
    for data in submissions:
        grade_submission(contract, answers, data)
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    key = GradingKey.build(contract, answers)
    for data in submissions:
        key.grade(data)
    prepared_s = time.perf_counter() - start
    start = time.perf_counter()
    for data in submissions:
        reference_score(data, contract, answers)
    reference_s = time.perf_counter() - start

    ratio = reference_s / ours_s
    verdict = "met" if ratio >= GRADING_TARGET_RATIO else "NOT met"
    print(f"grading: {n_submissions} submissions of a 100-item, 10-group task")
    for name, seconds in (("grade_submission", ours_s), ("GradingKey.grade", prepared_s),
                          ("reference", reference_s)):
        print(f"  {name:<17} {seconds:8.3f} s  {n_submissions / seconds:10.0f} per s")
    print(f"  ratio reference/grade_submission = {ratio:.1f}x "
          f"(target >= {GRADING_TARGET_RATIO:.0f}x: {verdict})")
    print(f"  ratio reference/GradingKey.grade = {reference_s / prepared_s:.1f}x "
          "(one key prepared for all submissions)")
    return ratio


def paper_sized_tasks(seed: int) -> list[tuple[Contract, AnswerKey]]:
    """116 tasks, 517 groups, 4,207 experiments: every task has a group, every group 2+ items."""
    rng = random.Random(seed)
    groups_per_task = [1] * PAPER_TASKS
    for _ in range(PAPER_GROUPS - PAPER_TASKS):
        groups_per_task[rng.randrange(PAPER_TASKS)] += 1
    sizes = [2] * PAPER_GROUPS
    for _ in range(PAPER_EXPERIMENTS - 2 * PAPER_GROUPS):
        sizes[rng.randrange(PAPER_GROUPS)] += 1
    tasks, k = [], 0
    for t, n_groups in enumerate(groups_per_task):
        tasks.append(make_task(f"paper-{t:03d}", sizes[k:k + n_groups], rng))
        k += n_groups
    assert sum(len(c.groups) for c, _ in tasks) == PAPER_GROUPS
    assert sum(len(g.items) for c, _ in tasks for g in c.groups) == PAPER_EXPERIMENTS
    return tasks


def reference_threshold(contract: Contract, answers: AnswerKey, draws: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    scores = []
    for _ in range(draws):
        total = 0.0
        for g in contract.groups:
            values = [answers.groups[g.group_id][i] for i in g.items]
            perm = rng.permutation(len(values))
            total += g.weight * spearmanr(perm, values)[0]
        scores.append(total)
    return float(np.quantile(scores, 0.95))


def bench_thresholds(seed: int, reference_draws: int) -> float:
    tasks = paper_sized_tasks(seed)
    start = time.perf_counter()
    thresholds = [chance_threshold(c, a) for c, a in tasks]
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    for c, a in tasks:
        reference_threshold(c, a, reference_draws, seed)
    reference_s = (time.perf_counter() - start) * 4000 / reference_draws
    print(f"chance thresholds: {PAPER_TASKS} tasks, {PAPER_GROUPS} groups, "
          f"{PAPER_EXPERIMENTS} experiments, 4000 draws each")
    print(f"  chance_threshold  {ours_s:8.3f} s  (median threshold {np.median(thresholds):.3f})")
    print(f"  reference         {reference_s:8.1f} s  (timed on {reference_draws} draws, scaled)")
    print(f"  ratio reference/chance_threshold = {reference_s / ours_s:.0f}x")
    print(f"  ratio target/measured = {THRESHOLD_TARGET_S / ours_s:.1f}x "
          f"(target < {THRESHOLD_TARGET_S:.0f} s: "
          f"{'met' if ours_s < THRESHOLD_TARGET_S else 'NOT met'})")
    return ours_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=10_000)
    parser.add_argument("--reference-draws", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    bench_grading(args.submissions, args.seed)
    bench_thresholds(args.seed, args.reference_draws)


if __name__ == "__main__":
    main()
