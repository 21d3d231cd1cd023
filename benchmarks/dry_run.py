"""Listing a sweep of about a thousand jobs: the dry run against Hydra's per-job composition.

Usage::

    .venv/bin/python benchmarks/dry_run.py [--tasks 77] [--sample 15]

``experiment=paper`` on ``--tasks`` copies of an example task (77 x 13 configurations =
1,001 jobs) is listed with ``dry_run=true`` (:func:`spu.plan.plan_command`, one Hydra
composition per configuration). The reference is what listing costs when every job is
composed, as Hydra's basic sweeper does before it launches anything and as the Ray
driver does for each job: ``--sample`` jobs are composed one by one in the same process,
and the time per job is multiplied by the number of jobs. Prints both times and the
ratio reference / dry run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASK = REPO / "tasks" / "example-coupling-conditions"


def task_root(folder: Path, n: int) -> Path:
    root = folder / "tasks"
    for i in range(n):
        dest = root / f"t{i:03d}"
        shutil.copytree(TASK, dest)
        meta = (dest / "task.yaml").read_text().replace(TASK.name, dest.name)
        (dest / "task.yaml").write_text(meta)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=77)
    parser.add_argument("--sample", type=int, default=15)
    args = parser.parse_args()
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from spu.plan import plan_command

    with tempfile.TemporaryDirectory(prefix="spu-dry-run-") as tmp:
        root = task_root(Path(tmp), args.tasks)
        os.environ["SPU_TASK_ROOT"] = str(root)
        argv = ["experiment=paper", f"task_root={root}", f"output_root={tmp}/out"]
        start = time.perf_counter()
        plan = plan_command([*argv, "dry_run=true"])
        dry = time.perf_counter() - start
        jobs = [list(j.overrides) for j in plan.jobs[: args.sample]]
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            start = time.perf_counter()
            for overrides in jobs:
                compose("config", overrides=[*argv, *overrides])
            per_job = (time.perf_counter() - start) / len(jobs)
        GlobalHydra.instance().clear()
    reference = per_job * len(plan.jobs)
    print(f"{len(plan.jobs)} jobs ({plan.composed} configs composed): dry run {dry:.1f} s; "
          f"every job composed {reference:.1f} s ({per_job * 1000:.0f} ms per job, "
          f"{len(jobs)} measured); ratio {reference / dry:.1f}x")


if __name__ == "__main__":
    main()
