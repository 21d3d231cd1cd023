"""``hydra.launcher.placement=actors``: each run on a long-lived actor owning one GPU.

:class:`ActorPlacement` is the :class:`~._driver.Driver`'s placement strategy. It starts
one :class:`~._worker.RunActor` per GPU of the cluster (one per sandbox slot on nodes
without GPUs: :func:`spu.launch.actors.actor_count`), each asking for the run's request
(``num_gpus``, CPUs, memory, a sandbox slot) for its whole life. Runs go, longest
expected first, to the first free actor; an actor runs one at a time.

- **Health.** An actor checks its device when it starts and after each run; a device
  found unhealthy retires its actor: it takes no more runs but stays alive until the
  sweep ends, holding the bad GPU so that Ray gives it to no one else. The status line
  and the summary name it.
- **Faults.** An actor that dies mid-run (its worker or its node lost) has its attempt
  recorded as lost, with what it had spent, and run again on another actor; a new actor
  is asked for in its place and joins when the cluster has room (an autoscaling cluster
  may add a node for it). An actor that dies before its run started puts the run back,
  costing no attempt. With no actor left and none starting within
  ``hydra.launcher.actor_start_timeout_s``, the runs left fail, each saying why.
- **Accounting.** Per actor: runs, busy and idle seconds, GPU seconds measured by the
  run's sampler; the summary prints each GPU's utilization.

A relaunch starts fresh actors (their names carry the launch's id); what tracking
holds decides, as ever, which runs are left to do.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import ray
from hydra_plugins.spu_ray_launcher._driver import Attempt, Driver, PendingAttempt, job_return
from hydra_plugins.spu_ray_launcher._worker import RunActor
from ray.exceptions import RayActorError, RayError, RayTaskError

from spu.launch.actors import ActorAccount, actor_count, load_probe, utilization_lines
from spu.launch.resources import SANDBOX_SLOT, RunRequest
from spu.printable import printable_markup

log = logging.getLogger(__name__)


def cli_of(config: Any) -> tuple[str, str, str | None] | None:
    """The agent CLI a job's harness installs (package, version, tools folder), or None."""
    from omegaconf import OmegaConf

    package = OmegaConf.select(config, "harness.cli_package", default=None)
    version = OmegaConf.select(config, "harness.version", default=None)
    if not package or not version:
        return
    folder = OmegaConf.select(config, "harness.tools_dir", default=None)
    return str(package), str(version), str(folder) if folder else None


@dataclass
class Held:
    """One actor of the sweep: its handle and its account."""

    handle: Any
    account: ActorAccount
    asked_at: float
    """When it was asked for (monotonic seconds)."""


class ActorPlacement:
    """The driver's placement on actors: each attempt on a free actor of the sweep."""

    def __init__(self, nodes: list[dict[str, float]]) -> None:
        self.nodes = nodes
        """The resource totals of the cluster's alive nodes (how many actors fit)."""

    def attach(self, driver: Driver) -> None:
        """Ask for the sweep's actors, as many as fit and the jobs need (the window)."""
        self.driver = driver
        self.launch_id = secrets.token_hex(3)
        self.probe = self.driver.launcher.health_probe or None
        load_probe(self.probe)  # a bad path fails here, in one line, before any actor
        first = self.driver.pending[0].job if self.driver.pending else None
        self.request: RunRequest = first.request if first is not None else RunRequest(1, 0, 0, 1)
        self.sandbox = str(first.config.sandbox.name) if first is not None else None
        self.cli = cli_of(first.config) if first is not None else None
        self.actor_class = ray.remote(RunActor)
        self.accounts: list[ActorAccount] = []
        self.starting: dict[Any, Held] = {}
        """Ready refs of actors asked for and not answered yet."""
        self.free: deque[Held] = deque()
        self.placed: dict[Any, Held] = {}
        """The actor of each attempt in flight, by its result's ref."""
        self.retired: list[Held] = []
        self.said: set[str] = set()
        self.next_index = 0
        count = actor_count(self.request, self.nodes, len(self.driver.pending),
                            int(self.driver.launcher.max_concurrent))
        self.driver.window = count
        for _ in range(count):
            self.ask()
        plural = "s" if count != 1 else ""
        self.driver.display.say(f"placement on actors: {count} actor{plural}, each "
                                f"{self.request.describe()} for its life (launch "
                                f"{self.launch_id})")

    # -- the actors ----------------------------------------------------------------------

    def ask(self) -> None:
        """Ask Ray for one more actor; it joins once the cluster has room for it."""
        index = self.next_index
        self.next_index += 1
        name = f"spu-{self.launch_id}-{index}"
        req = self.request
        options: dict[str, Any] = {"num_cpus": req.cpus, "num_gpus": req.gpus, "name": name,
                                   "max_restarts": 0, "max_task_retries": 0}
        if req.memory_bytes:
            options["memory"] = req.memory_bytes
        if req.sandbox_slots:
            options["resources"] = {SANDBOX_SLOT: req.sandbox_slots}
        handle = self.actor_class.options(**options).remote(name, index, self.probe,
                                                            self.sandbox, self.cli)
        held = Held(handle, ActorAccount(name, index), time.monotonic())
        self.starting[handle.ready.remote()] = held

    def alive(self) -> int:
        """Actors that take runs now or will: free, busy or starting."""
        return len(self.free) + len(self.placed) + len(self.starting)

    def joined(self, ref: Any) -> None:
        """An actor answered (or failed to start)."""
        held = self.starting.pop(ref)
        try:
            info = ray.get(ref, timeout=self.driver.launcher.get_timeout_s)
        except (RayError, TimeoutError) as exc:
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            held.account.lost = f"did not start: {reason}"
            held.account.stop()
            self.accounts.append(held.account)
            self.driver.display.say(f"[red]actor {held.account.name} did not start: "
                                    f"{printable_markup(reason)}[/red]")
            return
        account = held.account
        account.node, account.devices = str(info["node"]), list(info["devices"])
        account.visible_devices, account.uuid = info["visible_devices"], info["uuid"]
        account.started = time.monotonic()
        self.accounts.append(account)
        self.say_notes(info["notes"])
        if info["problem"]:
            self.retire(held, str(info["problem"]))
            return
        self.free.append(held)

    def say_notes(self, notes: list[str]) -> None:
        """Say each actor note once per sweep (every actor without NVML says the same).

        Said on the display only: it is the console, where a log record would say it twice.
        """
        for note in notes:
            if note not in self.said:
                self.said.add(note)
                self.driver.display.say(f"[yellow]actors: {note}[/yellow]")

    def retire(self, held: Held, problem: str) -> None:
        """Take an unhealthy device out of the sweep; its actor stays, holding the GPU."""
        account = held.account
        account.retired = problem
        account.stop()
        self.retired.append(held)
        shown = f"{account.name} ({account.device()}): {problem}"
        self.driver.progress.retired.append(shown)
        self.driver.display.say(f"[bold red]device retired: {shown}[/bold red]")

    def replace_lost(self, held: Held, reason: str) -> None:
        """An actor died: count it lost and ask for another in its place."""
        held.account.lost = reason
        held.account.stop()
        self.driver.display.say(f"[yellow]actor {held.account.name} lost "
                                f"({printable_markup(reason)}); asking for a "
                                f"new one[/yellow]")
        self.ask()

    # -- the driver's hooks --------------------------------------------------------------

    def can_submit(self) -> bool:
        """A free actor, and (under a budget) no more places taken than actors."""
        if not self.free:
            return False
        return self.driver.ledger.limit_usd is None or self.driver.busy() < self.alive()

    def tend(self) -> None:
        """Take in the actors that answered; give up on the runs left when none can come."""
        driver = self.driver
        if self.starting:
            idle = not driver.in_flight and not driver.settling and not self.free
            refs = list(self.starting)
            ready, _ = ray.wait(refs, num_returns=len(refs),
                                timeout=driver.launcher.poll_s if idle and driver.pending else 0,
                                fetch_local=False)
            if idle and not ready:
                ready, _ = ray.wait(refs, num_returns=1, timeout=0, fetch_local=False)
            for ref in ready:
                self.joined(ref)
        if not driver.pending or self.free or driver.in_flight or driver.settling:
            return
        timeout = float(driver.launcher.actor_start_timeout_s)
        waiting = [h for h in self.starting.values()
                   if time.monotonic() - h.asked_at < timeout]
        if waiting:
            return
        for ref, held in list(self.starting.items()):
            self.starting.pop(ref)
            held.account.lost = f"not started within {timeout:.0f} s"
            self.accounts.append(held.account)
            ray.kill(held.handle)
        reason = (f"no actor left to run it ({len(self.retired)} retired, "
                  f"{sum(1 for a in self.accounts if a.lost)} lost, none started within "
                  f"hydra.launcher.actor_start_timeout_s={timeout:g})")
        driver.display.say(f"[red]{len(driver.pending)} runs not run: {reason}[/red]")
        while driver.pending:
            job = driver.pending.popleft().job
            driver.progress.launched()
            driver.progress.finished(None)
            driver.returns[job.idx] = job_return(job, RuntimeError(reason), failed=True)

    def dispatch(self, att: Attempt, options: dict[str, Any], job: Any, task_files: Any) -> Any:
        """Hand the attempt to the free actor that has waited longest."""
        del options
        held = self.free.popleft()
        att.held = held
        ref = held.handle.run.remote(job, task_files, self.driver.monitor)
        self.placed[ref] = held
        return ref

    def placement_of(self, att: Attempt) -> Any:
        """The actor and device the attempt was placed on."""
        from spu.schema import GpuPlacement

        if att.held is None:
            return None
        a = att.held.account
        return GpuPlacement(actor=a.name, devices=list(a.devices),
                            visible_devices=a.visible_devices, uuid=a.uuid)

    def collect(self, ref: Any, att: Attempt) -> Any:
        """An actor's run ended: what it returned (None: handled here); free or retire it."""
        held = self.placed.pop(ref)
        try:
            returned, problem, notes = ray.get(ref, timeout=self.driver.launcher.get_timeout_s)
        except RayActorError as exc:
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            self.replace_lost(held, reason)
            if not self.driver.monitor_lookup(att).get("started"):
                # Dead before the run began: put it back, no attempt spent.
                self.driver.progress.running -= 1
                self.driver.pending.appendleft(PendingAttempt(att.job, att.number, att.last,
                                                             att.retried_from))
                return None
            self.driver.lost(att, exc)
            return None
        except RayTaskError as exc:
            self.free.append(held)
            self.driver.progress.finished(None)
            self.driver.display.say(f"[red]job #{att.job.idx} failed on its actor "
                                    f"{held.account.name}: {printable_markup(str(exc))}[/red]")
            self.driver.returns[att.job.idx] = job_return(att.job, exc, failed=True)
            return None
        except (RayError, TimeoutError) as exc:
            self.replace_lost(held, f"{type(exc).__name__}")
            ray.kill(held.handle)
            self.driver.lost(att, exc)
            return None
        gpu = returned.phase.gpu
        held.account.ran(returned.finished - returned.started,
                         gpu.gpu_seconds if gpu is not None else None)
        self.say_notes(notes)
        if problem:
            self.retire(held, str(problem))
        else:
            self.free.append(held)
        return returned

    # -- the end -------------------------------------------------------------------------

    def finish(self) -> None:
        """After the sweep: print what each actor did and stop every actor."""
        now = time.monotonic()
        for held in [*self.free, *self.placed.values(), *self.retired]:
            held.account.stop(now)
        lines = utilization_lines(sorted(self.accounts, key=lambda a: a.index), now)
        if lines:
            self.driver.display.say("GPU actors (utilization per GPU):")
            for line in lines:
                self.driver.display.say(f"  {line}")
        if self.driver.progress.retired:
            self.driver.display.say("retired devices: "
                                    + "; ".join(self.driver.progress.retired))
        for held in [*self.free, *self.placed.values(), *self.retired,
                     *self.starting.values()]:
            try:
                ray.kill(held.handle)
            except Exception:  # noqa: BLE001 - Ray's shutdown ends them too
                pass
