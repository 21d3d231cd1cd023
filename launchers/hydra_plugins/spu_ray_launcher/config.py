"""Typed schema of ``hydra/launcher=ray`` (and ``ray_local``, ``ray_cluster``).

Stored in Hydra's ConfigStore as ``hydra/launcher/spu_ray_schema``; the YAML files in
``conf/hydra/launcher/`` extend it, so a misspelt key fails at composition.
"""

# No ``from __future__ import annotations``: Hydra's plugin scan runs this module before
# it is in ``sys.modules``, where dataclasses cannot resolve string annotations.
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass
class RayInitConf:
    """Arguments of ``ray.init``: start a local Ray, or join a cluster."""

    address: str | None = None
    """None: start a Ray on this machine; ``auto``: join the cluster this node is part of;
    ``ray://host:10001`` or ``host:6379``: join that cluster."""
    num_cpus: int | None = None
    """Local Ray only: logical CPUs to offer (None: every core)."""
    num_gpus: int | None = None
    """Local Ray only: GPUs to offer (None: those detected; a count on a machine without
    GPUs makes fake ones, for tests)."""
    sandbox_slots: int | None = None
    """Local Ray only: sandbox slots to offer (custom resource ``sandbox_slot``); None:
    one per logical CPU."""
    object_store_memory: int | None = 100_000_000
    """Local Ray only: bytes of shared memory for the object store (runs return little)."""
    include_dashboard: bool = False
    """Start Ray's dashboard (local Ray)."""
    log_to_driver: bool = False
    """Copy worker output to this console; off: each job logs to its own folder."""
    namespace: str = "spu"
    """Ray namespace of the sweep."""
    runtime_env: dict[str, Any] = field(default_factory=dict)
    """Ray runtime environment for the workers (e.g. ``env_vars`` for API keys)."""
    temp_dir: str | None = None
    """Local Ray only: Ray's temporary folder (sockets, logs); None: Ray's default."""
    auth_token_path: str | None = None
    """Joining a cluster: a file holding the cluster's token (sets ``RAY_AUTH_MODE=token``
    and ``RAY_AUTH_TOKEN_PATH``); None: this process's ``RAY_AUTH_*`` variables."""
    verify_auth: bool = True
    """Joining a cluster: check that it turns away a client without the token."""


@dataclass
class RunResourcesConf:
    """The Ray resources one run asks for; None takes the run's own ``limits``."""

    cpus: float | None = None
    """``num_cpus`` per run; None: the run's ``limits.cpus`` (after task overrides)."""
    gpus: float | None = None
    """``num_gpus`` per run; None: the run's ``limits.gpus``."""
    memory_gb: float | None = None
    """Ray ``memory`` per run in GiB; None: the run's ``limits.memory_gb``."""
    sandbox_slots: float = 1.0
    """Units of the custom resource ``sandbox_slot`` per run; 0 to not use it."""
    fit_to_cluster: bool = True
    """Shrink a request to the largest node alive at launch (a machine that has less gets
    what it has); false on autoscaling clusters, whose large nodes may not exist yet."""


@dataclass
class SPURayLauncherConf:
    """``hydra/launcher=ray``: every run a Ray task with the resources of its config."""

    _target_: str = "hydra_plugins.spu_ray_launcher.ray_launcher.SPURayLauncher"
    init: RayInitConf = field(default_factory=RayInitConf)
    resources: RunResourcesConf = field(default_factory=RunResourcesConf)
    max_concurrent: int = 0
    """Runs at once at most; 0: as many as the cluster's resources hold."""
    tracking_server: str = "auto"
    """For a local SQLite store: ``always`` starts an MLflow server in front of it;
    ``auto`` and ``never`` log to the file from the driver, one run at a time."""
    tracking_server_workers: int = 1
    """Worker processes of that server."""
    progress: str = "auto"
    """``live`` (rich live line), ``lines`` (a status line every ``progress_every_s``),
    ``off``, ``auto`` (live on a terminal, else lines)."""
    progress_every_s: float = 30.0
    """Seconds between status lines in ``lines`` mode."""
    poll_s: float = 1.0
    """Seconds the driver waits for a run to finish before refreshing the display."""
    get_timeout_s: float = 600.0
    """Timeout of ``ray.get`` on a finished run's result."""
    shutdown: bool = True
    """Shut Ray down at the end when this launcher started it."""
    insecure: bool = False
    """Start or join Ray without token authentication; every run record then says so."""
    join_local: bool = True
    """A local sweep (no ``init.address``) joins this user's Ray started by ``ray start``
    where one runs here; false: it always starts a Ray of its own."""
    settle_threads: int = 4
    """Threads of the driver that grade, record and track finished attempts."""
    report_every_s: float = 10.0
    """Seconds between an agent node's reports of a run's spending."""
    placement: str = "actors"
    """``actors``: one long-lived actor per GPU (per sandbox slot on nodes without GPUs)
    runs one run at a time, its device health-checked between runs; ``tasks``: every
    attempt a Ray task of its own."""
    health_probe: str | None = None
    """``module:function`` checking an actor's device between runs besides NVML (given the
    actor's context, returns why the device is unhealthy, or None)."""
    actor_start_timeout_s: float = 600.0
    """With runs left, no actor free or busy: seconds to wait for one asked for to start
    before the runs left fail."""


ConfigStore.instance().store(group="hydra/launcher", name="spu_ray_schema",
                             node=SPURayLauncherConf, provider="spu")
