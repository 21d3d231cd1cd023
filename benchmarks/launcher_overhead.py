"""Sweep overhead: where a no-op run's time goes, and the fast path against the current one.

Usage::

    .venv/bin/python benchmarks/launcher_overhead.py [--runs 300] [--reference-runs 40]
        [--docker-runs RUNS] [--profile-runs 10] [--slots CPUS] [--no-full] [--skip-docker]
        [--skip-bubblewrap]

A no-op agent (``harness=command``, a shell script that exits at once: every run is
graded ``no_file``) on one example task, with **bubblewrap isolation, isolated grading
and tracking on** (MLflow on SQLite under the output root): the bare path, as the first
target was set, without the sandbox network, the tools service and the disk image that a
default run also has (``sandbox.network=false tools.enabled=false limits.disk_gb=0``) and
without a model (``model=random``: no gateway). With ``--full`` (the default) the same
sweeps run again with **everything a default run has**: the network through pasta and its
filter, the tools service and the egress proxy, a disk image, and the run's model gateway
(``model=scripted``: the agent gets ``SPU_MODEL_*`` and the gateway starts and stops
around it, as :func:`spu.runner.open_gateway` runs its
:class:`~spu.gateway.session.GatewaySession`, with the scripted model server behind it).

1. Profiles: ``--profile-runs`` runs taken apart in this process, step by step. The bare
   path: Hydra composition, the run spec, loading the task and key, staging, the sandbox
   with the agent, grading in a process of its own against the sweep's grading service,
   the 4,000-draw chance threshold drawn again against cached, the record, and tracking.
   The default run (``--full``): :func:`spu.runner.run_one` with each of its parts timed
   where it is called (the tools session, the gateway session, the network, the disk
   image, the sandbox's start and end).
2. Sweeps, each one ``python -m spu.main`` call timed from start to exit (start-up is
   spread over the runs, as in a real sweep): the current path, the basic launcher
   (``run_one`` per Hydra job: composition, a grading process, the threshold and a
   tracking call per run; the reference), against the fast path, ``hydra/launcher=ray_local``
   (agents on Ray; one composition per configuration, one grading service, cached
   thresholds and tracking in threads on the driver). Prints runs per minute, seconds
   per run, the machine's CPU seconds per run and the ratio; target: at least 300
   runs/min, for the default run too.
3. The same sweeps with ``sandbox=docker`` (one container per run, with init and limits;
   the bare path without a network, the default run with the pasta network, the tools,
   the disk image and the gateway), where a Docker engine answers; target: at most
   0.5 s per run with everything on. The fast sweep has as many runs as the first
   (``--docker-runs``), so that both carry the same share of the sweep's start-up: each
   line also prints when the first run was recorded and the seconds per run after it.

The closing table puts, for bubblewrap and Docker, the default run's runs per minute
(``ray_local``) beside the bare path's, with the ratio.

Both references are measured in the same call, on the same machine; the load the
machine carried (``os.getloadavg``) is printed with them. The CPU is the whole
machine's, so run it on an idle one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASK = REPO / "tasks" / "example-coupling-conditions"
NOOP_AGENT = "#!/bin/sh\nexit 0\n"
BARE = ("model=random", "sandbox.network=false", "tools.enabled=false", "limits.disk_gb=0")
"""What the bare path leaves out of a default run: bubblewrap, isolated grading and
tracking stay; no network, tools, disk image or model (so no gateway)."""
DEFAULT = ("model=scripted",)
"""Everything a default run has: network, tools, egress proxy, disk image, and a model
reached through the run's gateway (the scripted model server behind it)."""


def timed(step: Callable[[], object], times: list[float]) -> object:
    """Run ``step``, append its seconds to ``times``, return its value."""
    start = time.perf_counter()
    value = step()
    times.append(time.perf_counter() - start)
    return value


def profile(work: Path, runs: int) -> None:
    """Time each step of ``runs`` no-op runs in this process and print the medians."""
    from hydra import compose, initialize_config_dir

    from spu.config import register_configs
    from spu.grading.chance import chance_threshold
    from spu.grading.isolated import GradingService, grade_isolated
    from spu.main import spec_from_config
    from spu.runner import RunGrades, collect, prepare_run, price, record, run_agent, screen, stage
    from spu.tracking.store import TrackingTarget, log_run

    register_configs()
    os.environ["SPU_TASK_ROOT"] = str(work / "tasks")
    out = work / "profile"
    target = TrackingTarget(uri=f"sqlite:///{out / 'mlflow.db'}",
                            artifact_root=(out / "mlartifacts").as_uri(), experiment="bench")
    steps: dict[str, list[float]] = {name: [] for name in (
        "hydra composition", "run spec", "load task and key", "stage public files",
        "sandbox + no-op agent (bwrap)", "grading process (per run)",
        "grading service (per run)", "chance threshold (4,000 draws)",
        "chance threshold (cached)", "record (grade.json, run.json)", "tracking (log_run)")}
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"), \
            GradingService() as service:
        for i in range(runs):
            cfg = timed(lambda i=i: compose("config", overrides=[
                f"task={TASK.name}", "model=random", "harness=command",
                f"harness.entrypoint={work / 'noop_agent'}", "sandbox=local",
                f"output_root={out}", f"repeat={i}"]), steps["hydra composition"])
            spec = timed(lambda cfg=cfg: spec_from_config(cfg), steps["run spec"])
            run = timed(lambda spec=spec: prepare_run(spec), steps["load task and key"])
            staged = timed(lambda run=run: stage(run), steps["stage public files"])
            phase = timed(lambda run=run, staged=staged: run_agent(run, staged),
                          steps["sandbox + no-op agent (bwrap)"])
            phase.submission = collect(run.run_dir)
            timed(lambda run=run, phase=phase: grade_isolated(
                run.task.contract, run.answers, phase.submission),
                steps["grading process (per run)"])
            graded = timed(lambda run=run, phase=phase: service.grade(
                run.task.id, run.task.contract, run.answers, phase.submission),
                steps["grading service (per run)"])
            timed(lambda run=run: chance_threshold(run.task.contract, run.answers),
                  steps["chance threshold (4,000 draws)"])
            from spu.runner import task_threshold

            timed(lambda run=run: task_threshold(run.task, run.answers),
                  steps["chance threshold (cached)"])
            grades = RunGrades(graded.strict, graded.recovered)  # type: ignore[attr-defined]
            rec = timed(lambda run=run, phase=phase, grades=grades: record(
                run, phase, grades, price(run, phase.result), screen(run, phase.result)),
                steps["record (grade.json, run.json)"])
            timed(lambda run=run, rec=rec: log_run(rec, run.run_dir, target),
                  steps["tracking (log_run)"])
    print(f"where a no-op run's time goes: median of {runs} runs, milliseconds")
    for name, values in steps.items():
        # The first run pays imports and start-up; the median leaves it out.
        print(f"  {name:<32} {statistics.median(values) * 1000:8.1f} ms")


DEFAULT_PARTS = (
    ("spu.runner", "open_tools", "tools session start (service + egress proxy)"),
    ("spu.tools.session", "ToolsSession.close", "tools session stop"),
    ("spu.runner", "open_gateway", "gateway session start"),
    ("spu.gateway.session", "GatewaySession.close", "gateway session stop"),
    ("spu.sandbox.disk", "RunDisk.set_up", "disk image set-up"),
    ("spu.sandbox.disk", "RunDisk.release", "disk image release"),
    ("spu.sandbox.network", "UserNetwork.attach", "network attach (pasta, filter, relay)"),
    ("spu.sandbox.network", "UserNetwork.close", "network close"),
    ("spu.sandbox.base", "Sandbox.exec", "sandbox exec (bwrap + agent, network in it)"),
    ("spu.runner", "stage", "stage public files"),
    ("spu.runner", "record", "record (grade.json, run.json)"),
    ("spu.runner", "seal", "seal and ledger line"),
)
"""The parts of a default run timed where they are called: (module, attribute, label)."""


def _timed_parts(times: dict[str, list[float]]) -> list[tuple[object, str, object]]:
    """Wrap each of :data:`DEFAULT_PARTS` to add its seconds to ``times``; the originals."""
    import importlib

    originals = []
    for module_name, attribute, label in DEFAULT_PARTS:
        owner: object = importlib.import_module(module_name)
        name = attribute
        if "." in attribute:
            cls, name = attribute.split(".")
            owner = getattr(owner, cls)
        original = getattr(owner, name)

        def wrapper(*args: object, __f: object = original, __label: str = label,
                    **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return __f(*args, **kwargs)  # type: ignore[operator]
            finally:
                times[__label].append(time.perf_counter() - start)

        setattr(owner, name, wrapper)
        originals.append((owner, name, original))
    return originals


def profile_default(work: Path, runs: int) -> None:
    """Time the parts of ``runs`` default runs (``run_one``, gateway included) in this process."""
    from hydra import compose, initialize_config_dir

    from spu.config import register_configs
    from spu.main import spec_from_config
    from spu.runner import run_one

    register_configs()
    os.environ["SPU_TASK_ROOT"] = str(work / "tasks")
    out = work / "profile-default"
    times: dict[str, list[float]] = {label: [] for _, _, label in DEFAULT_PARTS}
    whole: list[float] = []
    originals = _timed_parts(times)
    try:
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            for i in range(runs):
                cfg = compose("config", overrides=[
                    f"task={TASK.name}", *DEFAULT, "harness=command",
                    f"harness.entrypoint={work / 'noop_agent'}", "sandbox=local",
                    f"output_root={out}", f"repeat={i}"])
                spec = spec_from_config(cfg)
                timed(lambda spec=spec: run_one(spec), whole)
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    # The first run pays imports and start-up; the median leaves it out.
    print(f"where a default run's time goes (run_one, bubblewrap, every guard and the "
          f"gateway): median of {runs} runs, milliseconds")
    print(f"  {'run_one, in all':<48} {statistics.median(whole) * 1000:8.1f} ms")
    for label, values in times.items():
        if values:
            print(f"  {label:<48} {statistics.median(values) * 1000:8.1f} ms")


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has been busy (``/proc/stat``: all but idle and I/O
    wait): Ray's workers, the servers, the sandboxes and the kernel's work for them."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Sweep:
    """One timed sweep."""

    runs: int
    seconds: float
    """From the command's start to its exit."""
    cpu: float
    """The whole machine's CPU seconds meanwhile."""
    first: float
    """Seconds until the first run's record was written (the sweep's start-up)."""

    def line(self) -> str:
        """Runs per minute, seconds per run, CPU per run, and the start-up apart."""
        after = (self.seconds - self.first) / max(1, self.runs - 1)
        return (f"{self.runs:4d} runs in {self.seconds:7.1f} s = "
                f"{self.runs / self.seconds * 60:7.1f} runs/min ({self.seconds / self.runs:.3f} "
                f"s/run); CPU {self.cpu / self.runs:.3f} s/run (the machine's); first run "
                f"recorded after {self.first:.1f} s, then {after:.3f} s/run")


def sweep_seconds(launcher: str, runs: int, work: Path, sandbox: str,
                  extra: tuple[str, ...] = ()) -> Sweep:
    """Wall time and CPU time of one sweep of ``runs`` no-op runs under ``launcher``.

    The CPU time is the whole machine's (:func:`busy_cpu_seconds`), a Docker engine's
    included: run it on an otherwise idle machine.
    """
    out = work / f"out-{launcher.replace('/', '_')}-{sandbox}-{len(extra)}"
    shutil.rmtree(out, ignore_errors=True)
    argv = [sys.executable, "-m", "spu.main", f"hydra/launcher={launcher}",
            f"task_root={work / 'tasks'}", f"output_root={out}", f"task={TASK.name}",
            "harness=command", f"harness.entrypoint={work / 'noop_agent'}",
            f"sandbox={sandbox}", f"repeat=range(0,{runs})", *extra]
    if launcher.startswith("ray"):
        argv.append("hydra.launcher.progress=off")
    before = busy_cpu_seconds()
    start = time.perf_counter()
    sweep = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    first = None
    while first is None and sweep.poll() is None:
        if next((out / "runs").glob("*/run.json"), None) is not None:
            first = time.perf_counter() - start
        else:
            time.sleep(0.1)
    stdout, stderr = sweep.communicate()
    seconds = time.perf_counter() - start
    cpu = busy_cpu_seconds() - before
    if sweep.returncode != 0:
        sys.exit(f"{launcher} sweep failed:\n{stdout[-2000:]}\n{stderr[-2000:]}")
    finished = len(list((out / "runs").glob("*/run.json")))
    if finished != runs:
        sys.exit(f"{launcher} sweep left {finished} runs, not {runs}")
    shutil.rmtree(out, ignore_errors=True)
    return Sweep(runs, seconds, cpu, seconds if first is None else first)


def compare(title: str, reference_runs: int, runs: int, work: Path, sandbox: str,
            fast_extra: tuple[str, ...], common: tuple[str, ...] = ()) -> Sweep:
    """Time the current path and the fast path; print both and the ratio; the fast one."""
    load = os.getloadavg()[0]
    current = sweep_seconds("basic", reference_runs, work, sandbox, common)
    fast = sweep_seconds("ray_local", runs, work, sandbox, (*common, *fast_extra))
    load = max(load, os.getloadavg()[0])
    cpus = os.cpu_count() or 1
    print(f"{title} (load average up to {load:.1f} on {cpus} CPUs)")
    print(f"  {'current: basic (reference)':<28} {current.line()}")
    print(f"  {'fast: ray_local':<28} {fast.line()}")
    ratio = current.seconds / current.runs / (fast.seconds / fast.runs)
    print(f"  ratio fast / current (runs per minute): {ratio:.2f}; "
          f"(CPU per run): {(fast.cpu / fast.runs) / (current.cpu / current.runs):.2f}",
          flush=True)
    return fast


def closing_table(rates: dict[str, dict[str, Sweep]]) -> None:
    """For each backend, the default run's rate beside the bare path's, with the ratio."""
    print("every guard and the gateway against the bare path (ray_local)")
    print(f"  {'backend':<12} {'bare runs/min':>14} {'default runs/min':>17} {'ratio':>6} "
          f"{'default s/run':>14}  target")
    for backend, sweeps in rates.items():
        bare, default = sweeps.get("bare"), sweeps.get("default")
        if bare is None or default is None:
            continue
        bare_rate, rate = bare.runs / bare.seconds * 60, default.runs / default.seconds * 60
        per_run = default.seconds / default.runs
        target = (f">= 300 runs/min: {'met' if rate >= 300 else 'NOT met'}"
                  if backend == "bubblewrap" else
                  f"<= 0.5 s/run: {'met' if per_run <= 0.5 else 'NOT met'}")
        print(f"  {backend:<12} {bare_rate:14.1f} {rate:17.1f} {rate / bare_rate:6.2f} "
              f"{per_run:14.3f}  {target}")


def main() -> int:
    """Profile, then the sweeps, with their ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300, help="runs of the fast-path sweep")
    parser.add_argument("--reference-runs", type=int, default=40,
                        help="runs of the current-path sweep (it is slow)")
    parser.add_argument("--docker-runs", type=int, default=None,
                        help="runs of the fast-path sweep with sandbox=docker (default: "
                             "--runs, so that both carry the same share of start-up)")
    parser.add_argument("--profile-runs", type=int, default=10)
    parser.add_argument("--full", action=argparse.BooleanOptionalAction, default=True,
                        help="also profile and time the default run (network, tools, disk "
                             "image and the model gateway)")
    parser.add_argument("--slots", type=int, default=os.cpu_count() or 1,
                        help="sandboxes at once in the fast path (ray_local; default: one "
                             "per CPU, as each no-op run keeps a CPU busy and each Ray "
                             "worker more costs 1.5 s of CPU to start)")
    parser.add_argument("--skip-docker", action="store_true")
    parser.add_argument("--skip-bubblewrap", action="store_true",
                        help="only the Docker sweeps (the profiles too are left out)")
    args = parser.parse_args()
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    fast_extra = (f"hydra.launcher.init.sandbox_slots={args.slots}",
                  f"hydra.launcher.init.num_cpus={args.slots}")
    with tempfile.TemporaryDirectory(prefix="spu-bench-") as tmp:
        work = Path(tmp)
        shutil.copytree(TASK, work / "tasks" / TASK.name)
        (work / "noop_agent").write_text(NOOP_AGENT)
        (work / "noop_agent").chmod(0o755)
        rates: dict[str, dict[str, Sweep]] = {"bubblewrap": {}, "docker": {}}
        if not args.skip_bubblewrap:
            bubblewrap_sweeps(args, work, fast_extra, rates)
        if not args.skip_docker:
            docker_sweeps(args, work, fast_extra, rates)
        closing_table(rates)
    return 0


def bubblewrap_sweeps(args: argparse.Namespace, work: Path, fast_extra: tuple[str, ...],
                      rates: dict[str, dict[str, Sweep]]) -> None:
    """The profiles, then the bare and the default sweeps with ``sandbox=local``."""
    if args.profile_runs:
        profile(work, args.profile_runs)
        if args.full:
            profile_default(work, args.profile_runs)
    rates["bubblewrap"]["bare"] = bare = compare(
        "sweeps: no-op agent, sandbox=local (bubblewrap), isolated grading, tracking on "
        "(the bare path: no network, tools, disk image or gateway)",
        args.reference_runs, args.runs, work, "local", fast_extra, BARE)
    rate = bare.runs / bare.seconds * 60
    print(f"  target >= 300 runs/min: {'met' if rate >= 300 else 'NOT met'} ({rate:.0f})")
    if args.full:
        rates["bubblewrap"]["default"] = default = compare(
            "sweeps: the same with everything a default run has (network through pasta "
            "and its filter, tools service and egress proxy, a disk image, the model "
            "gateway)", args.reference_runs, args.runs, work, "local", fast_extra, DEFAULT)
        rate = default.runs / default.seconds * 60
        print(f"  target >= 300 runs/min: {'met' if rate >= 300 else 'NOT met'} ({rate:.0f})")


def docker_sweeps(args: argparse.Namespace, work: Path, fast_extra: tuple[str, ...],
                  rates: dict[str, dict[str, Sweep]]) -> None:
    """The bare and the default sweeps with ``sandbox=docker``, where an engine answers."""
    from spu.sandbox.docker import DockerSandbox

    ok, why = DockerSandbox.available()
    if not ok:
        print(f"sweeps with sandbox=docker: skipped ({why}; start dockerd and build "
              f"spu-agent:latest, as the test suite does)")
        return
    runs, reference = args.docker_runs or args.runs, max(5, args.reference_runs // 2)
    rates["docker"]["bare"] = compare(
        "sweeps: no-op agent, sandbox=docker (container with init, limits, no network), "
        "isolated grading, tracking on", reference, runs, work, "docker", fast_extra, BARE)
    if args.full:
        rates["docker"]["default"] = default = compare(
            "sweeps: sandbox=docker with everything a default run has (pasta network, "
            "tools service and egress proxy, a disk image, the model gateway)",
            reference, runs, work, "docker", fast_extra, DEFAULT)
        per_run = default.seconds / default.runs
        print(f"  target <= 0.5 s/run: {'met' if per_run <= 0.5 else 'NOT met'} "
              f"({per_run:.3f} s/run)")


if __name__ == "__main__":
    raise SystemExit(main())
