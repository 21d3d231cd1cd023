"""``hydra/sweeper=spu``: the basic sweeper's jobs, validated once per configuration."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hydra.errors import ConfigCompositionException
from hydra.utils import get_class

from spu.overrides import config_groups


class CountingLoader:
    """Hydra's real config loader, counting the compositions asked of it."""

    def __init__(self, loader) -> None:
        self.loader = loader
        self.composed: list[list[str]] = []

    def load_sweep_config(self, config, overrides):
        self.composed.append(list(overrides))
        return self.loader.load_sweep_config(config, overrides)

    def get_group_options(self, name):
        return self.loader.get_group_options(name)


def test_one_composition_per_configuration_and_every_task_checked(compose) -> None:
    cfg = compose("task=example-coupling-conditions", return_hydra_config=True)
    # As Hydra instantiates it: after its plugin scan has (re)loaded the plugin modules.
    sweeper_class = get_class(cfg.hydra.sweeper._target_)
    with config_groups() as groups:
        loader = CountingLoader(groups.loader)
        sweeper = sweeper_class(max_batch_size=None)
        sweeper.hydra_context = SimpleNamespace(config_loader=loader)  # type: ignore[assignment]
        sweeper.config = cfg
        tasks = ["example-coupling-conditions", "example-electrolytes-and-films"]
        batch = [[f"model={m}", f"task={t}", f"repeat={r}"]
                 for m in ("random", "presented_order") for t in tasks for r in (0, 1)]
        sweeper.validate_batch_is_legal(batch)
        assert len(loader.composed) == 2  # one per model: not per repeat, not per task
        # A repeat that is not a whole number from 0 is composed, for Hydra's message.
        loader.composed.clear()
        sweeper.validate_batch_is_legal([*batch, ["model=random", "task=" + tasks[0],
                                                  "repeat=${oc.env:HOME}"]])
        assert ["model=random", "task=" + tasks[0], "repeat=${oc.env:HOME}"] in loader.composed
        with pytest.raises(ConfigCompositionException, match="task/no-such-task"):
            sweeper.validate_batch_is_legal([*batch, ["model=random", "task=no-such-task",
                                                      "repeat=0"]])


def test_the_default_config_uses_it(compose) -> None:
    cfg = compose("task=example-coupling-conditions", return_hydra_config=True)
    assert cfg.hydra.sweeper._target_ == "hydra_plugins.spu_sweeper.SPUSweeper"
