"""Sweep logic shared by every launcher: resume, retries, budget, progress.

- :mod:`spu.launch.job`: one job of a sweep (resume check, budget check, attempts with
  retries of ``infra_error``, tracking), called by ``spu.main.run_from_config``;
- :mod:`spu.launch.resume`: which run keys run, retry or are skipped;
- :mod:`spu.launch.budget`: ``budget.max_cost_usd``;
- :mod:`spu.launch.resources`: what a run asks a cluster for, and how many fit;
- :mod:`spu.launch.progress`: counters, streamed results and a live status line;
- :mod:`spu.launch.server`: the sweep's MLflow server (SQLite or PostgreSQL), behind a token
  (:mod:`spu.launch.tracking_gate`);
- :mod:`spu.launch.remote`: a run split between an agent node and the grading side, with no
  storage shared between them;
- :mod:`spu.launch.schedule`: longest expected first, and makespans;
- :mod:`spu.launch.reaper`: no local Ray process outlives a driver killed with SIGKILL;
- :mod:`spu.launch.design`: the task subset of the paper's repeated runs.

The Ray launcher itself is a Hydra plugin (``launchers/hydra_plugins/spu_ray_launcher``).
Nothing here imports Ray; MLflow is imported inside the functions that use it.
"""
