"""``spu stats`` on a paper-sized runs table against a straightforward reference, same run.

    .venv/bin/python benchmarks/stats_benchmark.py [--resamples 10000] [--reference-resamples 30]

1. A runs table with the paper's structure (1,508 official runs, 145 repeats; the
   simulator of ``spu.stats.simulate``) is written as CSV, and the whole of
   ``spu stats`` runs on it in this process: reading, every analysis of sections 2-4 and
   appendices C, E and F that the table allows with 10,000 bootstrap resamples, 10,000
   permutations and 10,000 simulated reruns (2,000 null tables and 5,000 discipline
   permutations, as in the paper), writing. Target: under 30 s on 2 cores. Wall and CPU
   time are both printed: on a shared machine the wall time includes waiting.
2. Reference: the straightforward task-adjusted bootstrap, which copies the resampled
   tasks into a long table and refits ``statsmodels`` OLS ``y ~ task + config`` for each
   resample (dummy-coded design, ``sm.OLS(...).fit()``, prediction averaged over the tasks).
   It is timed on ``--reference-resamples`` resamples and scaled to ``--resamples`` (the
   cost per resample is constant); its results are checked against ours on those
   resamples first. The reference analysis is ours with that bootstrap swapped in:
   ``total - our bootstrap + reference bootstrap``. Target: at least 20x.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import statsmodels.api as sm

from spu.cli import main as spu_main
from spu.stats.additive import AdditiveDesign, adjusted_means
from spu.stats.resampling import resample_counts, rng_for
from spu.stats.runs_table import official, score_matrix
from spu.stats.simulate import simulate_runs

TOTAL_TARGET_S = 30.0
RATIO_TARGET = 20.0


def reference_adjusted(design: AdditiveDesign, y: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """One resample the straightforward way: copy the drawn tasks (each copy its own task),
    dummy-code ``task + config``, fit ``statsmodels`` OLS, average the fitted values of
    every configuration over the tasks."""
    rows = [np.flatnonzero(design.task_index == t) for t in range(len(design.tasks))]
    take, copy_of = [], []
    for t, count in enumerate(counts):
        for _ in range(int(count)):
            take.append(rows[t])
            copy_of.append(np.full(rows[t].size, len(copy_of)))
    idx, task = np.concatenate(take), np.concatenate(copy_of)
    n_tasks, n_configs = int(task.max()) + 1, len(design.configs)
    x = np.zeros((idx.size, n_tasks + n_configs - 1))
    x[np.arange(idx.size), task] = 1.0  # one column per task copy (no intercept)
    config = design.config_index[idx]
    present = np.unique(config)
    others = present[1:]  # the first present configuration is the reference level
    for k, c in enumerate(others):
        x[config == c, n_tasks + k] = 1.0
    x = x[:, : n_tasks + others.size]
    fit = sm.OLS(y[idx], x).fit()
    mu = fit.params[:n_tasks]
    out = np.full(n_configs, np.nan)
    out[present[0]] = mu.mean()
    out[others] = mu.mean() + fit.params[n_tasks:]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--reference-resamples", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    runs = simulate_runs(seed=args.seed)
    print(f"runs table: {len(runs)} runs ({int((runs['repeat'] == 0).sum())} official, "
          f"{int((runs['repeat'] > 0).sum())} repeats)")
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "runs.csv"
        runs.to_csv(table, index=False)
        start, cpu_start = time.perf_counter(), time.process_time()
        code = spu_main(["stats", str(table), "--out", str(Path(tmp) / "out"), "--seed",
                         str(args.seed), "--resamples", str(args.resamples),
                         "--simulations", str(args.resamples)])
        total = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
        assert code == 0
        configs = pd.read_csv(Path(tmp) / "out" / "configs.csv")
        files = len(list((Path(tmp) / "out").iterdir()))
    print(f"spu stats, {args.resamples:,} resamples and simulated reruns, {files} files: "
          f"{total:.2f} s wall, {cpu:.2f} s CPU (target < {TOTAL_TARGET_S:.0f} s): "
          f"{'PASS' if total < TOTAL_TARGET_S else 'FAIL'}")
    load = os.getloadavg()[0]
    if load > (os.cpu_count() or 1):
        print(f"  note: load average {load:.1f} on {os.cpu_count()} cores while measuring: "
              "the wall time includes waiting for other processes; the CPU time does not")

    public = official(runs)
    order = list(configs["config"])
    matrix = score_matrix(public, order)
    design, y = AdditiveDesign.from_matrix(matrix)
    counts = resample_counts(len(design.tasks), args.resamples, rng_for(args.seed, "bench"))
    start = time.perf_counter()
    ours = adjusted_means(design, y, counts)
    ours_s = time.perf_counter() - start

    k = min(args.reference_resamples, args.resamples)
    start = time.perf_counter()
    reference = np.vstack([reference_adjusted(design, y, counts[b]) for b in range(k)])
    reference_s = (time.perf_counter() - start) * args.resamples / k
    gap = float(np.nanmax(np.abs(reference - ours[:k])))
    assert gap < 1e-8, f"reference and ours differ by {gap}"
    print(f"task-adjusted bootstrap, {args.resamples:,} refits: ours {ours_s:.3f} s, "
          f"statsmodels OLS per resample {reference_s:.1f} s (timed on {k}, scaled; "
          f"max difference {gap:.1e}): {reference_s / ours_s:.0f}x")
    reference_total = total - ours_s + reference_s
    ratio = reference_total / total
    print(f"whole analysis: reference {reference_total:.1f} s / ours {total:.2f} s = "
          f"{ratio:.1f}x (target >= {RATIO_TARGET:.0f}x): "
          f"{'PASS' if ratio >= RATIO_TARGET else 'FAIL'}")
    return 0 if total < TOTAL_TARGET_S and ratio >= RATIO_TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
