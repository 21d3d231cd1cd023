"""The jobs a command line runs: Hydra's expansion, then who runs each job.

Hydra's basic sweeper makes one job per combination of the sweep's values: the
experiment's ``hydra.sweeper.params``, with the command line's overrides of the same
keys over them. Two defaults then make each job what the command line meant:

1. **A model runs in its own harness.** A job that chooses no harness (no
   ``harness=...``, and no chosen config such as ``+experiment/configuration=...``
   whose defaults choose one) runs in its model's ``default_harness``, the harness
   ``spu list models`` shows: ``model=opus55 task=T`` runs Claude Code (``opus55-none``),
   not ``conf/config.yaml``'s baseline harness.
2. **An experiment's model sweep belongs to its models' harness.** The default
   experiment sweeps the three baselines, which run in the baseline harness. A job whose
   harness is chosen outside the experiment's sweep (``harness=command ...`` on the
   command line) and is not the swept model's default harness leaves the swept model
   out: the harness runs once per task and repeat, under its own configuration label,
   not once per baseline under three labels that differ only by an unused model.

The sweeper (``launchers/hydra_plugins/spu_sweeper``), the dry run (:mod:`spu.plan`)
and a single run (:mod:`spu.main`) all take their jobs from here, so what a dry run
lists is what a launch runs. The lookups read config files from Hydra's repository
(a model's ``default_harness``, a config's defaults list); nothing is composed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hydra.errors import HydraException

MODEL = "model"
HARNESS = "harness"
TASK = "task"


class NothingToRun(HydraException):
    """A command line that selects no job; the message is one line saying what to do."""


def override_key(text: str) -> str:
    """The key or group of an override as typed (``+experiment/configuration=x``).

    Examples:
        >>> override_key("+experiment/configuration=x"), override_key("~model")
        ('experiment/configuration', 'model')
    """
    return text.partition("=")[0].lstrip("+~")


def override_value(text: str) -> str:
    """The value of an override as typed (empty for a deletion)."""
    return text.partition("=")[2]


class ConfigChoices:
    """What the config files choose, read (and cached) from Hydra's config repository.

    Args:
        loader: Hydra's config loader (``hydra_context.config_loader``, or a
            :class:`spu.overrides.Groups`' ``loader``).
    """

    def __init__(self, loader: Any) -> None:
        self.repository = loader.repository
        self._loaded: dict[str, Any] = {}

    def load(self, path: str) -> Any:
        """Hydra's ``ConfigResult`` of config ``path`` (``model/opus55``), None if none."""
        if path not in self._loaded:
            try:
                self._loaded[path] = self.repository.load_config(path)
            except Exception:  # noqa: BLE001 (a bad option fails at composition, said there)
                self._loaded[path] = None
        return self._loaded[path]

    def default_harness(self, model: str | None) -> str | None:
        """``default_harness`` of model option ``model`` (None: not found or unset)."""
        if not model:
            return None
        found = self.load(f"{MODEL}/{model}")
        value = None if found is None else found.config.get("default_harness")
        return None if value is None else str(value)

    def chosen_by(self, path: str, group: str) -> str | None:
        """The option of ``group`` that config ``path``'s defaults list chooses, if any."""
        found = self.load(path)
        for default in getattr(found, "defaults_list", None) or []:
            if str(getattr(default, "group", "") or "").strip("/") == group:
                value = getattr(default, "value", None)
                return None if value is None else str(value)
        return None

    def is_group(self, key: str) -> bool:
        """True when ``key`` names a config group (``model``, ``experiment/configuration``)."""
        try:
            return bool(self.repository.group_exists(key))
        except Exception:  # noqa: BLE001
            return False

    def primary(self, group: str) -> str | None:
        """The option of ``group`` that ``conf/config.yaml`` chooses."""
        return self.chosen_by("config", group)

    def choice(self, job: Sequence[str], group: str) -> tuple[str | None, str]:
        """The option of ``group`` a job runs, and where it comes from.

        Hydra's precedence: an override of the group itself (``typed``), then a chosen
        config whose defaults override the group (``config``: the experiment, a
        ``+experiment/configuration``), then ``conf/config.yaml`` (``default``).
        """
        for text in reversed(job):
            if override_key(text) == group and not text.startswith("~"):
                return override_value(text) or None, "typed"
        chosen = [(override_key(t), override_value(t)) for t in job
                  if not t.startswith("~") and override_key(t) not in (group, TASK)]
        if not any(key == "experiment" for key, _ in chosen):
            chosen.insert(0, ("experiment", self.primary("experiment") or ""))
        for key, value in reversed(chosen):
            if value and "/" not in value and self.is_group(key):
                found = self.chosen_by(f"{key}/{value}", group)
                if found is not None:
                    return found, "config"
        return self.primary(group), "default"


def job_defaults(job: Sequence[str], swept: Iterable[str], choices: ConfigChoices) -> list[str]:
    """One job's overrides, with the two defaults of the module docstring applied.

    Args:
        job: the job's overrides (``model=random``, ``task=t``...).
        swept: the keys the experiment's sweep gave this job (not typed over).
        choices: the config lookups.
    """
    swept = set(swept)
    harness, source = choices.choice(job, HARNESS)
    model, _ = choices.choice(job, MODEL)
    if source != "default":
        if (MODEL in swept and HARNESS not in swept
                and choices.default_harness(model) not in (None, harness)):
            return [t for t in job if override_key(t) != MODEL]
        return list(job)
    own = choices.default_harness(model)
    if own is None or own == harness:
        return list(job)
    return [*job, f"{HARNESS}={own}"]


def apply_defaults(jobs: Iterable[Sequence[str]], swept: Iterable[str],
                   choices: ConfigChoices) -> list[list[str]]:
    """Every job with :func:`job_defaults` applied; jobs that become equal run once.

    Examples:
        The default experiment's three baselines, swept over a command agent, are one
        job per task (a stand-in for the config repository):

        >>> class Files:
        ...     def load_config(self, path):
        ...         return None
        ...     def group_exists(self, key):
        ...         return key in ("model", "harness", "experiment")
        >>> class Loader:
        ...     repository = Files()
        >>> choices = ConfigChoices(Loader())
        >>> choices.default_harness = lambda model: {"random": "baseline",
        ...                                           "opus55": "claude_code"}.get(model)
        >>> choices.primary = lambda group: {"harness": "baseline"}.get(group)
        >>> jobs = [[f"model={m}", "harness=command", "task=t"] for m in ("random", "opus55")]
        >>> apply_defaults(jobs, {"model"}, choices)
        [['harness=command', 'task=t']]
        >>> apply_defaults([["model=opus55", "task=t"]], (), choices)
        [['model=opus55', 'task=t', 'harness=claude_code']]
    """
    out: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    for job in jobs:
        resolved = job_defaults(job, swept, choices)
        if tuple(resolved) not in seen:
            seen.add(tuple(resolved))
            out.append(resolved)
    return out


def swept_keys(params: Mapping[str, Any], arguments: Sequence[str]) -> set[str]:
    """The keys the experiment's sweep sets and the command line leaves to it."""
    typed = {override_key(a) for a in arguments}
    return {override_key(f"{k}=") for k in params} - typed


def sweep_jobs(params: Mapping[str, Any], arguments: Sequence[str], loader: Any,
               max_batch_size: int | None = None) -> list[list[list[str]]]:
    """The batches of jobs of a sweep: Hydra's basic sweeper's, then the two defaults.

    Args:
        params: the experiment's ``hydra.sweeper.params``.
        arguments: the command line's overrides.
        loader: Hydra's config loader (globs are expanded over its config groups).
        max_batch_size: jobs per batch (None: one batch).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from spu.internals import split_sweep_arguments

    lines = [f"{k}={v}" for k, v in params.items()] + list(arguments)
    parsed = OverridesParser.create(config_loader=loader).parse_overrides(lines)
    jobs = [job for batch in split_sweep_arguments(parsed, None) for job in batch]
    resolved = apply_defaults(jobs, swept_keys(params, arguments), ConfigChoices(loader))
    if not max_batch_size or max_batch_size < 0:
        return [resolved] if resolved else []
    return [resolved[i:i + max_batch_size] for i in range(0, len(resolved), max_batch_size)]


def single_job(arguments: Sequence[str], loader: Any) -> list[str]:
    """The overrides of a single run (``hydra.mode=RUN``), with the two defaults applied."""
    return job_defaults(list(arguments), (), ConfigChoices(loader))


def is_multirun(arguments: Sequence[str], flags: Iterable[str], choices: ConfigChoices) -> bool:
    """Whether Hydra runs the command line as a sweep: ``-m``, else ``hydra.mode``.

    ``hydra.mode`` is the command line's, else the chosen experiment's (the default
    experiment sweeps; ``experiment=single`` does not).
    """
    if any(f in ("-m", "--multirun") for f in flags):
        return True
    typed = [override_value(a) for a in arguments if override_key(a) == "hydra.mode"]
    if typed:
        return typed[-1].upper().endswith("MULTIRUN")
    from omegaconf import OmegaConf

    experiment, _ = choices.choice(arguments, "experiment")
    found = choices.load(f"experiment/{experiment}") if experiment else None
    mode = None if found is None else OmegaConf.select(found.config, "hydra.mode", default=None)
    return str(mode).upper().endswith("MULTIRUN")


def prepare_single_run(arguments: Sequence[str], flags: Iterable[str],
                       task_root: str) -> list[str] | None:
    """A single run's overrides with its model's default harness; None for a sweep.

    The sweeper applies the defaults to a sweep's jobs; a single run has no sweeper, so
    its command line gets them before Hydra starts.

    Raises:
        NothingToRun: a single run that selects no task (before Hydra makes its folder).
    """
    from spu.overrides import config_groups

    with config_groups() as groups:
        choices = ConfigChoices(groups.loader)
        if is_multirun(arguments, flags, choices):
            return None
        task, _ = choices.choice(arguments, TASK)
        if not task or task == "null":
            raise NothingToRun(f"no task selected: pass task=<id> or -m task='glob(*)' "
                               f"(task packages are read from task_root={task_root}); "
                               f"nothing was run or written")
        return job_defaults(list(arguments), (), choices)
