"""Conformance checks of a harness (``harness=NAME``).

The harness is composed as a run would compose it (its config file where it has one,
else ``harness=command harness.name=NAME``), with the overrides it declares in
``Harness.selfcheck_overrides`` (a model it can run offline: ``model=scripted`` by
default) and those given on the command line. The checks make it, ask it for the
command of a run in a real (unisolated, ``subprocess``) sandbox, then run it end to end
on the kit's task with ``run_one``, in the strongest sandbox this machine has.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spu.selfcheck import CheckSkipped, check, expect
from spu.selfcheck.targets import (
    SMALL,
    TASK_ID,
    SandboxTarget,
    compose_spec,
    environment,
    selfcheck_task,
)


@dataclass
class HarnessTarget:
    """One harness with the overrides it is checked under, in ``scratch``."""

    name: str
    """``harness.name`` (a config option of that name is used where there is one)."""
    overrides: list[str] = field(default_factory=list)
    """Hydra overrides of the command line (``model=...``, ``harness.options.x=...``)."""
    scratch: Path = Path(".")
    task_home: Path | None = None
    """Where the kit's task package is written (None: in ``scratch``)."""

    @property
    def cls(self) -> Any:
        """The harness's class."""
        from spu.harness.base import get_harness

        return get_harness(self.name)

    @property
    def task_dir(self) -> Path:
        """The kit's task package."""
        return selfcheck_task(self.task_home or self.scratch)

    def spec(self, *extra: str) -> Any:
        """The run spec of the harness on the kit's task (output under ``scratch``)."""
        from spu.sandbox.local import LocalSandbox

        selected = [f"harness={self.name}"] if _has_config(self.name) else \
            ["harness=command", f"harness.name={self.name}"]
        sandbox = ["sandbox=local"] if LocalSandbox.available()[0] else \
            ["sandbox=subprocess", "sandbox.allow_unisolated=true"]
        return compose_spec(self.task_dir, self.scratch / "outputs", *selected, *sandbox,
                            "limits.time_s=300", "limits.gpus=0", "limits.cpus=1",
                            *self.cls.selfcheck_overrides, *self.overrides, *extra)

    def harness(self, spec: Any) -> Any:
        """The harness of ``spec``, made (its options checked)."""
        return self.cls(spec.harness, spec.model, spec.effort)

    def runnable(self, spec: Any) -> Any:
        """The harness, or CheckSkipped when its own check says it cannot run here."""
        from spu.harness.base import HarnessError

        harness = self.harness(spec)
        try:
            harness.check()
        except HarnessError as exc:
            raise CheckSkipped(f"it cannot run here: {exc}") from None
        return harness


def _has_config(name: str) -> bool:
    from spu.overrides import config_groups

    with config_groups() as groups:
        return name in groups.options("harness")


@check("harness")
def loads_and_checks_its_options(target: HarnessTarget) -> None:
    """The harness loads, takes its options, and refuses an unknown one in one line."""
    from spu.harness.base import Harness, HarnessOptionsError

    expect(issubclass(target.cls, Harness), "not a Harness")
    spec = target.spec()
    target.harness(spec)
    wrong = replace(spec.harness, options={**spec.harness.options, "selfcheck_unknown": 1})
    try:
        target.cls(wrong, spec.model, spec.effort)
    except HarnessOptionsError as exc:
        said = str(exc)
        expect("\n" not in said and said.startswith("harness.options.selfcheck_unknown: "),
               f"the refusal does not name the key in one line: {said!r}")
        return
    raise CheckSkipped("it takes any option (its options_model allows extra keys)")


@check("harness")
def efforts_are_its_own_settings(target: HarnessTarget) -> None:
    """Each effort level the harness declares gives its setting, as a text."""
    from spu.config import EffortConfig

    spec = target.spec()
    levels = target.harness(spec).effort_levels()
    for level, value in levels.items():
        expect(isinstance(level, str) and isinstance(value, str),
               f"effort {level!r} -> {value!r} is not text to text")
        made = target.cls(spec.harness, spec.model, EffortConfig(name=level))
        expect(made.effort_value() == value, f"effort={level} gives {made.effort_value()!r}")


@check("harness")
def command_gets_the_run_environment(target: HarnessTarget) -> None:
    """The agent's command gets the run's variables and ``harness.env``, nothing of the host.

    Neither a variable of the host's environment nor the provider's key reaches it.
    """
    token = uuid.uuid4().hex
    spec = target.spec()
    spec = replace(spec, harness=replace(spec.harness,
                                         env={**spec.harness.env, "SPU_SELFCHECK_ENV": token}))
    harness = target.runnable(spec)
    key_env = spec.model.api_key_env or "SPU_SELFCHECK_PROVIDER_KEY"
    secrets = {"SPU_SELFCHECK_HOST_SECRET": f"host-{token}", key_env: f"key-{token}"}
    box_target = SandboxTarget("subprocess", {}, target.scratch / "sandbox",
                               task_home=target.task_home or target.scratch)
    try:
        with environment(**secrets):
            command, ctx = _command(harness, box_target)
    finally:
        harness.cleanup()
        box_target.close()
    expect(command.argv and all(isinstance(a, str) for a in command.argv),
           f"argv {command.argv!r}")
    env = command.env
    expect(all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()),
           "the environment is not text to text")
    for name, value in (("SPU_TASK_DIR", ctx.paths.task), ("SPU_OUTPUT_DIR", ctx.paths.output),
                        ("SPU_TASK_ID", TASK_ID), ("SPU_SELFCHECK_ENV", token)):
        expect(env.get(name) == value, f"{name}={env.get(name)!r}, not {value!r}")
    expect("SPU_TIME_LIMIT_S" in env, "no SPU_TIME_LIMIT_S")
    leaked = [name for name, secret in secrets.items() if secret in " ".join(
        [*env.values(), *command.argv])]
    expect(not leaked, f"the agent's command holds the host's {leaked}")
    if ctx.model is not None:
        expect(env.get("SPU_MODEL_TOKEN") == ctx.model.token, "not the run's model token")


def _command(harness: Any, box_target: SandboxTarget) -> tuple[Any, Any]:
    """The harness's command for a run in a prepared ``subprocess`` sandbox."""
    from spu.gateway.session import ModelEndpoint
    from spu.harness.base import AgentContext
    from spu.tasks.package import load_task

    box = box_target.open(SMALL)
    api = harness.model_api()
    model = None if api is None else ModelEndpoint(
        url="http://127.0.0.1:9/", token="spu-selfcheck-run-token", api=api,
        host_url="http://127.0.0.1:9/")
    ctx = AgentContext(task=load_task(box_target.task_dir), paths=box.paths,
                       run_dir=box.run_dir, run_key="selfcheck", limits=SMALL, seed=1,
                       model=model)
    harness.start_services(ctx.log_dir)
    harness.prepare(ctx, box.sandbox)
    return harness.command(ctx), ctx


@check("harness")
def runs_a_task_end_to_end(target: HarnessTarget) -> None:
    """``run_one`` runs the harness on a task: a record, no infrastructure error."""
    from spu.runner import run_one

    spec = target.spec()
    target.runnable(spec)
    record = run_one(spec)
    run_dir = spec.output_root / "runs" / record.run_key
    expect((run_dir / "run.json").is_file(), "no run.json")
    expect(record.outcome.value != "infra_error",
           f"infra_error: {record.process.error or record.notes}")
    expect(record.identity is not None and record.identity.config.harness == spec.harness.name,
           "the record's identity does not name the harness")


@check("harness")
def an_unknown_option_stops_the_run_before_it_starts(target: HarnessTarget) -> None:
    """A misspelt ``harness.options`` key stops ``run_one`` in one line; nothing is run."""
    from spu.runner import RunConfigError, run_one

    spec = target.spec()
    spec = replace(spec, harness=replace(spec.harness, options={"selfcheck_unknown": 1}))
    try:
        run_one(spec)
    except RunConfigError as exc:
        expect(str(exc).startswith("harness.options.selfcheck_unknown: ") and
               "\n" not in str(exc), f"said {str(exc)!r}")
        expect(not (spec.output_root / "runs").exists(), "a run folder was made")
        return
    raise CheckSkipped("it takes any option (its options_model allows extra keys)")
