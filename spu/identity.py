"""Run identity: what ran, the run key hashed from it, its configuration label, its score.

A run is identified by what ran (SPEC section 12), recorded as ``identity`` in its
``run.json`` (:class:`spu.schema.Identity`):

- the configuration: the model's name, ``api_model`` and endpoint (``base_url``), the
  effort, the harness and its pinned CLI version (``harness.version``), and for an
  entrypoint harness (``harness=command``) the SHA-256 of the entrypoint file and its
  arguments (``harness.args``);
- the task: its id, version and ``task_digest``, a SHA-256 over its public files, paths
  and contents (:func:`spu.tasks.digest.task_digest`);
- the audited tools, for a harness that uses them: ``tools.provider`` and the SHA-256 of
  the offline corpus (``tools.corpus``);
- the repeat.

The **run key** is the first 16 hex digits of the SHA-256 of that object written as
canonical JSON (keys sorted, no spaces, UTF-8): :func:`run_key`. Change any field and
the run is another one, with its own key, and runs again; change anything else (limits,
the sandbox backend, the launcher) and a relaunch finds the same key and skips it, saying
in one line which recorded setting differs (:func:`settings_change`). A changed answer
key never changes the key: ``spu regrade`` re-scores the stored submissions.

Runs recorded before ``identity`` existed have keys of the first scheme
(:func:`legacy_run_key`: model, harness and effort names, task id and version, repeat);
a relaunch still finds them (:mod:`spu.launch.resume`, ``docs/upgrading.md``).

The same module holds the two other rules every stage shares: the **configuration
label** a run is counted under in the statistics (:func:`config_label`) and the
**official score** shown for a run (:func:`official_score`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spu.options import merge_flat
from spu.schema import ConfigIdentity, Identity, RunSettings, TaskIdentity, ToolsIdentity

if TYPE_CHECKING:
    from pydantic import BaseModel

KEY_HEX_DIGITS = 16
"""Hex digits of SHA-256 kept in a run key."""

SETTING_LIMITS = ("time_s", "memory_gb", "cpus", "gpus", "disk_gb")
"""The ``limits.*`` a run records in its settings (and a relaunch compares)."""


def _hash_key(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:KEY_HEX_DIGITS]


def key_fields(identity: Identity) -> dict[str, Any]:
    """The JSON object a run key is the hash of: ``identity`` as it is written.

    The identity fields added after keys were first hashed (``harness.env``, the plugins'
    options) are written only when set (:class:`spu.schema.Identity`), so a run that sets
    none of them keeps the key it had.
    """
    data: dict[str, Any] = identity.model_dump(mode="json")
    return data


def run_key(identity: Identity) -> str:
    """The run key: 16 hex digits of the SHA-256 of ``identity`` as canonical JSON.

    Fields added for plugins count only when set (:func:`key_fields`).

    Examples
    --------
    >>> ident = Identity(config=ConfigIdentity(model="random", effort="none",
    ...                                        harness="baseline"),
    ...                  task=TaskIdentity(id="spu-demo-a", version="1.0", task_digest="0" * 64))
    >>> run_key(ident)
    'db3fc737d8c63418'
    >>> run_key(ident.model_copy(update={"repeat": 1})) != run_key(ident)
    True
    """
    return _hash_key(key_fields(identity))


def legacy_run_key(model: str, harness: str, effort: str, task_id: str, task_version: str,
                   repeat: int) -> str:
    """The run key of the first scheme (records without ``identity``): names only.

    Examples
    --------
    >>> legacy_run_key("random", "baseline", "none", "spu-demo-a", "1.0", 0)
    '4181d89605e63c83'
    """
    return _hash_key({"model": model, "harness": harness, "effort": effort,
                      "task_id": task_id, "task_version": task_version, "repeat": int(repeat)})


def identity_legacy_key(identity: Identity) -> str:
    """The first-scheme key of the run ``identity`` names (where older stores keep it)."""
    return legacy_run_key(identity.config.model, identity.config.harness,
                          identity.config.effort, identity.task.id, identity.task.version,
                          identity.repeat)


def harness_uses_tools(harness: str) -> bool:
    """Whether the harness named ``harness`` gets the audited tools (baselines do not).

    A name that cannot be resolved counts as using them: the run fails at its start anyway.
    """
    from spu.harness.base import get_harness

    try:
        return bool(get_harness(harness).uses_tools)
    except (KeyError, ImportError, AttributeError, ValueError):
        return True


def _opt(node: Any, name: str) -> Any:
    """``node.name`` for a dataclass or an OmegaConf node; None where it is absent."""
    getter = getattr(node, "get", None)
    if callable(getter) and not hasattr(type(node), "__dataclass_fields__"):
        return getter(name)
    return getattr(node, name, None)


def identity_for(model: Any, harness: Any, effort: Any, tools: Any, task_dir: str | Path,
                 task_id: str, task_version: str, repeat: int, consensus: Any = None,
                 output_root: str | Path | None = None, sandbox: Any = None) -> Identity:
    """The identity of a run: configuration nodes (typed or OmegaConf) and a task folder.

    Args:
        model: the ``model`` node (:class:`~spu.config.ModelConfig` or its DictConfig).
        harness: the ``harness`` node.
        effort: the ``effort`` node.
        tools: the ``tools`` node.
        task_dir: the trusted task folder, whose public files are digested.
        task_id: the task's id.
        task_version: the task's version.
        repeat: the repeat index.
        consensus: the ``consensus`` node; for ``harness=consensus`` the identity's
            ``args`` name the members' run keys on this task
            (:func:`spu.harness.consensus.identity_args`).
        output_root: where the members' runs are when ``consensus.runs`` is not set.
        sandbox: the ``sandbox`` node, whose backend's options are part of the identity
            (None: no options set).
    """
    from spu.tasks.digest import task_digest

    digest = task_digest(task_dir)
    config = _config_identity(model, harness, effort)
    if str(harness.name) == "consensus":
        from spu.harness.consensus import identity_args

        args = identity_args(consensus, output_root, str(task_id), str(task_version), digest)
        config = config.model_copy(update={"args": args})
    tools_ident = ToolsIdentity()
    if tools is not None and _opt(tools, "enabled") and harness_uses_tools(config.harness):
        tools_ident = _tools_identity(tools)
    return Identity(config=config,
                    task=TaskIdentity(id=str(task_id), version=str(task_version),
                                      task_digest=digest),
                    tools=tools_ident, sandbox_options=_sandbox_options(sandbox),
                    repeat=int(repeat))


def _config_identity(model: Any, harness: Any, effort: Any) -> ConfigIdentity:
    """The configuration: model, effort, harness, entrypoint, arguments, environment, options."""
    from spu.harness.base import get_harness
    from spu.tasks.digest import file_sha256

    entrypoint = _opt(harness, "entrypoint")
    entry_sha = None
    if entrypoint:
        path = Path(str(entrypoint)).expanduser()
        entry_sha = file_sha256(path) if path.is_file() else None
    env = {str(k): str(v) for k, v in _mapping(_opt(harness, "env")).items()}
    return ConfigIdentity(
        model=str(model.name), api_model=_text(_opt(model, "api_model")),
        endpoint=_text(_opt(model, "base_url")), effort=str(effort.name),
        harness=str(harness.name), cli_version=_text(_opt(harness, "version")),
        entrypoint_sha256=entry_sha, args=[str(a) for a in (_opt(harness, "args") or [])],
        env=env, options=plugin_identity_options(get_harness, str(harness.name),
                                                 _mapping(_opt(harness, "options"))))


def _tools_identity(tools: Any) -> ToolsIdentity:
    """The provider, a digest of its corpus (a file or a folder) and its options."""
    from spu.tasks.digest import content_digest
    from spu.tools.providers import FLAT_OPTIONS, get_provider

    provider = _text(_opt(tools, "provider"))
    options = _mapping(_opt(tools, "options"))
    corpus = options.get("corpus") or _opt(tools, "corpus")
    flat = {name: _opt(tools, name) for name in FLAT_OPTIONS}
    found = plugin_identity_options(get_provider, provider or "", options, flat, FLAT_OPTIONS)
    found.pop("corpus", None)  # its contents are corpus_sha256
    return ToolsIdentity(provider=provider,
                         corpus_sha256=content_digest(str(corpus)) if corpus else None,
                         options=found)


def _sandbox_options(sandbox: Any) -> dict[str, Any]:
    """The options of the backend ``sandbox.name`` that belong to the identity."""
    from spu.sandbox.base import get_sandbox
    from spu.sandbox.options import FLAT_OPTIONS

    if sandbox is None:
        return {}
    flat = {name: _opt(sandbox, name) for name in FLAT_OPTIONS}
    return plugin_identity_options(get_sandbox, str(_opt(sandbox, "name") or "local"),
                                   _mapping(_opt(sandbox, "options")), flat, FLAT_OPTIONS)


def plugin_identity_options(get: Callable[[str], Any], name: str, options: Mapping[str, Any],
                            flat: Mapping[str, Any] | None = None,
                            flat_names: Sequence[str] = ()) -> dict[str, Any]:
    """:func:`identity_options` of the plugin ``get(name)``, its flat keys merged in.

    A plugin that does not load, or options it refuses, give the options as set: the run
    refuses them at its start, in one line.
    """
    try:
        model = get(name).options_model
        return identity_options(model, merge_flat(model, flat or {}, options, flat_names))
    except (KeyError, ImportError, AttributeError, ValueError):
        return {str(k): _json_value(v) for k, v in options.items()}


def identity_options(model: type[BaseModel], values: Mapping[str, Any]) -> dict[str, Any]:
    """The options of a plugin that are part of a run's identity.

    Those set to other than the model's default, but for the ones the model declares
    :attr:`~spu.options.PluginOptions.result_neutral` (a log level); an option of its
    :attr:`~spu.options.PluginOptions.content_options` (a file or a folder) is given as
    the SHA-256 of its contents (:func:`spu.tasks.digest.content_digest`).

    Raises:
        pydantic.ValidationError: the model refuses ``values``.

    Examples
    --------
    >>> from spu.options import PluginOptions
    >>> class Options(PluginOptions):
    ...     result_neutral = frozenset({"log_level"})
    ...     strategy: str = "random"
    ...     log_level: str = "info"
    >>> identity_options(Options, {"log_level": "debug"})
    {}
    >>> identity_options(Options, {"strategy": "monotone_prior", "log_level": "debug"})
    {'strategy': 'monotone_prior'}
    """
    from spu.tasks.digest import content_digest

    checked = model.model_validate(dict(values))
    dumped = checked.model_dump(mode="json")
    neutral: frozenset[str] = getattr(model, "result_neutral", frozenset())
    content: frozenset[str] = getattr(model, "content_options", frozenset())
    out: dict[str, Any] = {}
    for name, spec in model.model_fields.items():
        value = getattr(checked, name)
        if name in neutral or (not spec.is_required()
                               and value == spec.get_default(call_default_factory=True)):
            continue
        out[name] = content_digest(str(value)) if name in content and value else dumped[name]
    return out


def _mapping(node: Any) -> dict[str, Any]:
    """A mapping node (a dict or an OmegaConf node) as a plain dict; None as empty."""
    if node is None:
        return {}
    if not isinstance(node, Mapping):
        from omegaconf import OmegaConf

        if OmegaConf.is_config(node):
            data = OmegaConf.to_container(node, resolve=True)
            return {str(k): v for k, v in data.items()} if isinstance(data, dict) else {}
    return {str(k): v for k, v in dict(node).items()}


def _json_value(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def harness_label(harness: Any, consensus: Any = None) -> str | None:
    """The name a harness goes by in configuration labels, where it has its own.

    ``harness.label`` where set; for an entrypoint harness (``harness=command``), the
    entrypoint's file name without its suffix; for ``harness=consensus``, its members'
    (:func:`spu.harness.consensus.consensus_label`); else None (the harness's name is used).

    Examples
    --------
    >>> from spu.config import HarnessConfig
    >>> harness_label(HarnessConfig(name="command", entrypoint="agents/rev_agent.py"))
    'rev_agent'
    >>> harness_label(HarnessConfig(name="command", entrypoint="a.py", label="mine"))
    'mine'
    """
    label = _opt(harness, "label")
    if label:
        return str(label)
    if str(harness.name) == "consensus":
        from spu.harness.consensus import consensus_label

        return consensus_label(consensus)
    entrypoint = _opt(harness, "entrypoint")
    if entrypoint and str(harness.name) == "command":
        return Path(str(entrypoint)).stem or None
    return None


def config_label(model: str, effort: str, harness: str | None = None,
                 default_harness: str | None = None, label: str | None = None) -> str:
    """The configuration a run belongs to in the statistics: a model at an effort in a harness.

    The harness is named only when it is not the model's default, so the paper's
    configurations read ``opus5-max`` and ``astra-medium``; a harness with its own
    label (:func:`harness_label`: ``harness.label``, or a command's entrypoint name) is
    named by it, always.

    Examples
    --------
    >>> config_label("astra", "medium", "codex", "codex")
    'astra-medium'
    >>> config_label("opus5", "max", "command", "claude_code")
    'opus5-max-command'
    >>> config_label("random", "none", "command", "baseline", label="my_agent")
    'random-none-my_agent'
    """
    text = f"{model}-{effort}"
    if label:
        return f"{text}-{label}"
    if harness and default_harness and harness != default_harness:
        text += f"-{harness}"
    return text


def official_score(scored: bool, score_strict: float, score_recovered: float) -> float:
    """The score a run is shown with: the recovered score if it is scored, else the strict.

    Examples
    --------
    >>> official_score(True, -1.0, 0.5), official_score(False, -1.0, 0.5)
    (0.5, -1.0)
    """
    return score_recovered if scored else score_strict


def settings_for(limits: Any, sandbox: str | None, launcher: str | None = None) -> RunSettings:
    """The launch settings recorded beside a run's identity (never part of its key)."""
    values: dict[str, float] = {}
    for name in SETTING_LIMITS:
        value = _opt(limits, name) if limits is not None else None
        if value is not None:
            values[name] = float(value)
    return RunSettings(limits=values, sandbox=sandbox, launcher=launcher)


def settings_change(recorded: RunSettings | None, current: RunSettings) -> str | None:
    """What differs between a run's recorded settings and a command's, in words (or None).

    Examples
    --------
    >>> settings_change(settings_for({"time_s": 600}, "local"),
    ...                 settings_for({"time_s": 28800}, "local"))
    'limits.time_s=600 (this command: 28800)'
    """
    if recorded is None:
        return None
    said = []
    for name in sorted(set(recorded.limits) & set(current.limits)):
        if recorded.limits[name] != current.limits[name]:
            said.append(f"limits.{name}={_num(recorded.limits[name])} "
                        f"(this command: {_num(current.limits[name])})")
    for name in ("sandbox", "launcher"):
        was, now = getattr(recorded, name), getattr(current, name)
        if was and now and was != now:
            key = "hydra/launcher" if name == "launcher" else name
            said.append(f"{key}={was} (this command: {now})")
    return ", ".join(said) or None


def _num(value: float) -> str:
    return f"{value:g}"

