"""Hydra launcher plugin: the runs of a sweep as Ray tasks (``hydra/launcher=ray``).

- ``config.py``: the typed launcher config (ConfigStore ``hydra/launcher/spu_ray_schema``);
- ``ray_launcher.py``: the :class:`~hydra.plugins.launcher.Launcher` Hydra instantiates;
- ``_driver.py``: the sweep driver (Ray imported here, only when a sweep launches);
- ``_worker.py``: what runs in a Ray worker: one Hydra job, with its GPU ids.

Hydra's plugin scan imports every module of this package whose name does not start
with ``_``; those stay light, so ``python -m spu.main`` does not load Ray unless it
launches on Ray.
"""
