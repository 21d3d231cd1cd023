"""Makespan of the paper's sweep on 100 GPUs: longest expected first vs task order.

Usage::

    .venv/bin/python benchmarks/makespan.py [--gpus 100] [--seed 0] [--trials 20]

The simulated sweep has the paper's shape (sections 3.1 and 3.6): 13 configurations x
116 tasks (1,508 official runs) plus 145 repeated runs of one configuration, 1,653 runs
in all. Each configuration's run times are log-normal around its median; the medians
are spread log-evenly from 0.26 h to 3.59 h (the range the paper reports), each task
is harder or easier for every configuration alike (a task factor), each run has its
own noise, and no run exceeds the 8 h limit.

Three submission orders are replayed on ``--gpus`` identical GPUs, each run starting on
the first GPU free (:func:`spu.launch.schedule.list_schedule`):

- task order (reference): the order of ``-m task='glob(*)'``, configurations within a task;
- longest expected first, expected = the configuration's median (a first sweep);
- longest expected first, expected = an earlier run of the same configuration and task
  (a relaunch, or a second sweep: what tracking holds).

Each is printed against the lower bound max(total GPU hours / GPUs, longest run), the
target being within 5% of it, and against task order. Figures are means over
``--trials`` seeded sweeps.

Then the two placements of ``hydra.launcher.placement``, both longest first from
earlier runs: ``tasks`` pays a worker's start and warm-up (the Ray worker, the imports,
the sandbox's probe and seccomp filter) on every run, ``--warmup-s`` each; ``actors``
pays it once per GPU, before the actor's first run, and a device health check between
runs (``--check-s``). Both costs are inputs of the model, not measurements: pass what
``benchmarks/launcher_overhead.py`` measures on the cluster.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from spu.launch.schedule import list_schedule, longest_expected_first, makespan_lower_bound

CONFIGS = 13
TASKS = 116
REPEAT_RUNS = 145
MEDIANS_H = np.geomspace(0.26, 3.59, CONFIGS)
LIMIT_H = 8.0


def simulated_sweep(rng: np.random.Generator) -> tuple[list[float], list[float], list[float]]:
    """Run times (hours) of one sweep in task order, and two expectations of each.

    Returns:
        The run times, the configuration medians, and an earlier run's time of the same
        configuration on the same task.
    """
    task_factor = rng.lognormal(0.0, 0.5, TASKS)
    durations, by_median, by_history = [], [], []

    def draw(config: int, task: int) -> float:
        return float(min(LIMIT_H, MEDIANS_H[config] * task_factor[task]
                         * rng.lognormal(0.0, 0.35)))

    for task in range(TASKS):
        for config in range(CONFIGS):
            durations.append(draw(config, task))
            by_median.append(float(MEDIANS_H[config]))
            by_history.append(draw(config, task))
    # The repeated runs: one configuration, 29 tasks, 5 repeats each, after the rest.
    repeat_config = CONFIGS - 1
    for task in rng.choice(TASKS, size=REPEAT_RUNS // 5, replace=False):
        for _ in range(5):
            durations.append(draw(repeat_config, int(task)))
            by_median.append(float(MEDIANS_H[repeat_config]))
            by_history.append(draw(repeat_config, int(task)))
    return durations, by_median, by_history


def main() -> int:
    """Simulate, schedule, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--warmup-s", type=float, default=20.0,
                        help="seconds a worker takes to start and warm up (model input)")
    parser.add_argument("--check-s", type=float, default=0.5,
                        help="seconds of an actor's device check between runs (model input)")
    args = parser.parse_args()
    warmup_h, check_h = args.warmup_s / 3600, args.check_s / 3600
    rng = np.random.default_rng(args.seed)
    rows: dict[str, list[float]] = {"bound": [], "task order": [],
                                    "longest first (config medians)": [],
                                    "longest first (earlier runs)": [],
                                    "placement=tasks": [], "placement=actors": []}
    started = time.perf_counter()
    for _ in range(args.trials):
        durations, by_median, by_history = simulated_sweep(rng)
        rows["bound"].append(makespan_lower_bound(durations, args.gpus))
        rows["task order"].append(list_schedule(durations, args.gpus))
        rows["longest first (config medians)"].append(
            list_schedule(durations, args.gpus, longest_expected_first(by_median)))
        history_order = longest_expected_first(by_history)
        rows["longest first (earlier runs)"].append(
            list_schedule(durations, args.gpus, history_order))
        rows["placement=tasks"].append(
            list_schedule(durations, args.gpus, history_order, per_run_s=warmup_h))
        rows["placement=actors"].append(
            list_schedule(durations, args.gpus, history_order, start_s=warmup_h,
                          per_run_s=check_h))
    elapsed = time.perf_counter() - started
    n_runs = len(durations)
    bound = statistics.fmean(rows["bound"])
    reference = statistics.fmean(rows["task order"])
    print(f"makespan of a paper-shaped sweep: {n_runs} runs on {args.gpus} GPUs, medians "
          f"{MEDIANS_H[0]:.2f}-{MEDIANS_H[-1]:.2f} h, mean of {args.trials} seeded sweeps "
          f"(seed {args.seed}), scheduled in {elapsed / args.trials * 1000:.0f} ms each")
    print(f"  lower bound max(GPU hours / GPUs, longest run): {bound:7.2f} h")
    for name in ("task order", "longest first (config medians)", "longest first (earlier runs)"):
        value = statistics.fmean(rows[name])
        worst = max(m / b for m, b in zip(rows[name], rows["bound"], strict=True))
        print(f"  {name:<32} {value:7.2f} h  ratio to bound {value / bound:.3f} "
              f"(worst {worst:.3f})  ratio to task order {value / reference:.3f}")
    print("  target: within 5% of the bound (ratio <= 1.050)")
    print(f"placements (longest first, earlier runs; model inputs: {args.warmup_s:g} s to "
          f"start and warm a worker, {args.check_s:g} s to check a device between runs):")
    runs = len(durations)
    for name, what, overhead_s in (
            ("placement=tasks", "a worker started and warmed per run", runs * args.warmup_s),
            ("placement=actors", "one actor per GPU, warmed once, checked between runs",
             args.gpus * args.warmup_s + runs * args.check_s)):
        value = statistics.fmean(rows[name])
        print(f"  {name:<17} {value:7.3f} h  ratio to bound {value / bound:.4f}  ({what}; "
              f"{overhead_s / 3600:.2f} GPU h of overhead a sweep)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
