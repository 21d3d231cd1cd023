"""GPU placement: which devices a run gets (paper 2.1: one GPU per agent).

The launcher may assign device ids (from a Ray placement); those are handed over as
they are. Otherwise the run asks for a count (``limits.gpus``) and gets the first
devices of the machine. A machine with fewer GPUs than asked gives what it has and
says so; nothing fails for want of a GPU. Each backend hands the placement over its
own way: ``CUDA_VISIBLE_DEVICES`` and the ``/dev/nvidia*`` nodes for ``local``,
``device_requests`` for ``docker``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

NVIDIA_CONTROL_DEVICES: tuple[str, ...] = (
    "nvidiactl",
    "nvidia-uvm",
    "nvidia-uvm-tools",
    "nvidia-modeset",
)
"""Device nodes every CUDA process needs besides its ``/dev/nvidiaN``."""


@dataclass(frozen=True)
class GpuPlacement:
    """The GPUs handed to one run, and what could not be given."""

    ids: tuple[str, ...] = ()
    """Device ids (indices or UUIDs) the agent gets."""
    warnings: tuple[str, ...] = ()
    """Shortfalls, e.g. a GPU asked for on a machine without one."""
    machine_has_gpus: bool = False
    """Whether this machine shows any NVIDIA GPU."""

    def env(self) -> dict[str, str]:
        """Environment that restricts CUDA to the placed devices.

        On a machine with GPUs a run that was given none gets an empty
        ``CUDA_VISIBLE_DEVICES``, so that it cannot use the others' devices.
        """
        if not self.ids and not self.machine_has_gpus:
            return {}
        visible = ",".join(self.ids)
        return {"CUDA_VISIBLE_DEVICES": visible, "NVIDIA_VISIBLE_DEVICES": visible or "void"}


def detect_gpus(dev: Path = Path("/dev")) -> tuple[str, ...]:
    """Indices of the NVIDIA GPUs of this machine, from its ``/dev/nvidiaN`` nodes."""
    try:
        names = [p.name for p in dev.iterdir()]
    except OSError:
        return ()
    indices = sorted(int(m.group(1)) for n in names if (m := re.fullmatch(r"nvidia(\d+)", n)))
    return tuple(str(i) for i in indices)


def place_gpus(wanted: int, assigned: Sequence[str], present: Sequence[str]) -> GpuPlacement:
    """Decide the GPUs of a run.

    Args:
        wanted: GPUs asked for (``limits.gpus``).
        assigned: Device ids given by the launcher; they win over ``wanted``.
        present: GPUs this machine has (:func:`detect_gpus`).

    Returns:
        The placement, with a warning for every shortfall.

    Examples:
        >>> place_gpus(1, [], ["0", "1"]).ids
        ('0',)
        >>> place_gpus(1, [], []).warnings
        ('asked for 1 GPU(s), this machine has none: running without a GPU',)
        >>> place_gpus(1, ["1"], ["0", "1"]).ids
        ('1',)
    """
    has = bool(present)
    if assigned:
        ids = tuple(str(g) for g in assigned)
        missing = [g for g in ids if g.isdigit() and g not in present]
        warnings: tuple[str, ...] = ()
        if missing:
            warnings = (
                f"launcher assigned GPU(s) {','.join(missing)}, which this machine does not "
                f"show (present: {','.join(present) or 'none'}): handed over as assigned",
            )
        return GpuPlacement(ids=ids, warnings=warnings, machine_has_gpus=has)
    if wanted <= 0:
        return GpuPlacement(machine_has_gpus=has)
    if not present:
        return GpuPlacement(
            warnings=(f"asked for {wanted} GPU(s), this machine has none: running without a GPU",),
        )
    ids = tuple(present[:wanted])
    shortfall: tuple[str, ...] = ()
    if wanted > len(present):
        shortfall = (f"asked for {wanted} GPU(s), this machine has {len(present)}: using all",)
    return GpuPlacement(ids=ids, warnings=shortfall, machine_has_gpus=True)
