"""Backend options: each sandbox backend checks its own settings (``sandbox.options``).

The ``sandbox`` config holds what every run asks of any backend (``network``,
``host_ports``, ``allowed_networks``, ``gpu_ids``, ``grader_isolation``) and a mapping
``options`` that only the selected backend reads, as Harbor hands keyword arguments
to its environments. A backend names a pydantic model in its ``options_model``; the
runner validates ``sandbox.options`` against it before anything starts, so a typo fails
in one line naming the key and the backend's options. A new backend adds its own
model, never a field of :class:`~spu.config.SandboxConfig`.

The built-in backends' settings that predate ``options`` (``sandbox.pids_limit``,
``sandbox.image``, ``sandbox.network_mode``) are still read from their flat keys, for
the backends whose model has them; a value under ``options`` wins. Harnesses and tools
providers take options the same way (:mod:`spu.options`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spu.options import OptionsError, PluginOptions, merge_flat
from spu.options import check_options as check_plugin_options

if TYPE_CHECKING:
    from spu.config import SandboxConfig

FLAT_OPTIONS = ("pids_limit", "image", "network_mode")
"""Keys of the flat ``sandbox`` config handed to the backends whose options have them."""


class SandboxOptionsError(OptionsError):
    """``sandbox.options`` does not suit the backend; the message is one line."""


class SandboxOptions(PluginOptions):
    """The options every backend takes; a backend's own model adds fields to it."""

    pids_limit: int | None = 4096
    """Most processes the agent may run at once (None: no limit)."""


class LocalOptions(SandboxOptions):
    """``sandbox=local`` (bubblewrap)."""

    agent_uid: int | None = None
    """User id the agent runs as under root (None: one drawn from the run folder)."""


class DockerOptions(SandboxOptions):
    """``sandbox=docker``."""

    image: str | None = None
    """Container image (None: ``spu-agent:latest``)."""
    network_mode: str = "pasta"
    """``pasta`` (the filtered network of ``sandbox=local``) or a Docker network mode."""
    agent_uid: int | None = None
    """User id the agent runs as in the container, and so on the host (None: one drawn from
    the run folder, as ``sandbox=local`` does; 0: the image's own user, root, loudly)."""


def check_options(name: str, model: type[SandboxOptions],
                  values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` checked by ``model``, as a plain mapping with every option set.

    Raises:
        SandboxOptionsError: an unknown key or a wrong value, in one line that names
            the key and the backend's options.

    Examples:
        >>> check_options("docker", DockerOptions, {"image": "x"})["network_mode"]
        'pasta'
        >>> check_options("local", LocalOptions, {"imagee": "x"})
        Traceback (most recent call last):
        ...
        spu.sandbox.options.SandboxOptionsError: sandbox.options.imagee: not an option of \
sandbox=local (its options: agent_uid, pids_limit)
    """
    return check_plugin_options("sandbox.options", f"sandbox={name}", model, values,
                                SandboxOptionsError)


def backend_options(name: str, model: type[SandboxOptions],
                    cfg: SandboxConfig) -> dict[str, Any]:
    """The options for backend ``name``: the flat keys its model has, then ``cfg.options``.

    Raises:
        SandboxOptionsError: as :func:`check_options`.
    """
    flat = {key: getattr(cfg, key, None) for key in FLAT_OPTIONS}
    return check_options(name, model, merge_flat(model, flat, cfg.options, FLAT_OPTIONS))
