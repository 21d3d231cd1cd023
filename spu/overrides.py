"""The command line of ``python -m spu.main``: normalized for Hydra, checked, explained.

Hydra's parser takes ``-m`` only before the overrides, and answers a mistyped key or
option with a stack of lines (and, for a key, the advice to add it with ``+``). This
module sits in front of it:

- :func:`normalize_argv` moves ``-m``/``--multirun`` to the front wherever it was typed,
  and turns ``+key=value`` into ``key=value`` for a key the schema already has;
- :func:`check_overrides` refuses, before Hydra starts, what Hydra would accept and
  then ignore or run wrongly: an unknown top-level key added with ``+``, a ``task``
  glob that matches no task package, an ``output_root`` that cannot be written;
- :func:`explain` turns an error Hydra raised into one line that names the override,
  the nearest valid key or option ("did you mean model=random?") and, for tasks, the
  ``task_root`` they were looked up in.

Every message is one line meant for ``spu: <message>`` on stderr and exit status 2.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import typing
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from spu.project import PACKAGED_CONF, is_group

MULTIRUN_FLAGS = ("-m", "--multirun")
"""Hydra's multirun switch, accepted anywhere on the command line."""

FREE_KEYS = ("hydra", "extra")
"""Top-level keys under which anything may be set (Hydra's own, plugins' free values)."""

CONF_DIR = PACKAGED_CONF
"""The packaged config groups (:mod:`spu.project` says where each config is read from)."""


class OverrideError(ValueError):
    """An override that cannot work; the message is one line saying what to do."""


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """Hydra's command line, with ``-m``/``--multirun`` first wherever it was typed.

    Hydra's parser reads the overrides as one run of positional arguments, so
    ``model=opus5 -m task='glob(*)'`` fails on ``task=...``. A ``-m`` token is never an
    option's value (argparse would not take it as one), so moving it is safe. A
    ``+key=value`` for a key the schema already has (``+dry_run=true``) would fail in
    Hydra with "an item is already at"; it means ``key=value``.

    Examples:
        >>> normalize_argv(["model=opus5", "-m", "task=glob(*)", "repeat=0,1"])
        ['-m', 'model=opus5', 'task=glob(*)', 'repeat=0,1']
        >>> normalize_argv(["--cfg", "job", "+dry_run=true", "+resume=off"])
        ['--cfg', 'job', 'dry_run=true', '+resume=off']
    """
    flags = [a for a in argv if a in MULTIRUN_FLAGS]
    rest = [_unplus(a) for a in argv if a not in MULTIRUN_FLAGS]
    return [*flags[:1], *rest]


HELP_FLAGS = ("--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc",
              "--version")
"""Hydra's flags that only print something: no check is made before them."""

CONFIG_FLAGS = ("--cfg", "-c")
"""Hydra's flags that print the composed config and run nothing."""

TRUE = ("true", "yes", "on", "1")


@dataclasses.dataclass(frozen=True)
class CommandLine:
    """The command line of ``python -m spu.main``, read once (Hydra's and SPU's checks)."""

    args: tuple[str, ...]
    """Hydra's arguments, normalized (:func:`normalize_argv`)."""
    values: dict[str, str]
    """The last value typed for each ``key=value`` (``+key=value`` included)."""
    flags: frozenset[str]
    """The ``-x``/``--xx`` tokens."""

    @classmethod
    def parse(cls, argv: Sequence[str]) -> CommandLine:
        """Read ``argv`` once.

        Examples:
            >>> line = CommandLine.parse(["task_root=t", "-m", "dry_run=True", "+x=1"])
            >>> line.args, line.dry_run, line.values["x"]
            (('-m', 'task_root=t', 'dry_run=True', '+x=1'), True, '1')
        """
        args = tuple(normalize_argv(argv))
        values: dict[str, str] = {}
        for arg in args:
            key, sep, value = arg.lstrip("+").partition("=")
            if sep and not arg.startswith("-"):
                values[key] = value
        return cls(args, values, frozenset(a for a in args if a.startswith("-")))

    @property
    def only_prints(self) -> bool:
        """A help, info, completion or version flag: Hydra prints something, runs nothing."""
        return any(f in self.flags for f in HELP_FLAGS)

    @property
    def shows_config(self) -> bool:
        """``--cfg``: Hydra prints the composed config and runs nothing."""
        return any(f in self.flags for f in CONFIG_FLAGS)

    @property
    def dry_run(self) -> bool:
        """``dry_run=true``: list the jobs, run none."""
        return self.values.get("dry_run", "").strip().lower() in TRUE

    @property
    def task_root(self) -> Path | None:
        """``task_root=PATH``, resolved, when typed."""
        value = self.values.get("task_root")
        return None if value is None else Path(value).expanduser().resolve()

    @property
    def output_root(self) -> Path:
        """``output_root=PATH`` (default ``outputs``), resolved."""
        return Path(self.values.get("output_root", "outputs")).expanduser().resolve()


def _unplus(arg: str) -> str:
    if not arg.startswith("+") or arg.startswith("++") or "=" not in arg:
        return arg
    key = arg[1:].partition("=")[0]
    if "/" in key or "@" in key or is_group_name(key):
        return arg  # a config group (+experiment/configuration=...)
    return arg[1:] if schema_field(key.split(".")) else arg


def schema_field(path: Sequence[str]) -> bool:
    """True when every part of ``path`` is a field of the schema (not a key of a mapping).

    Examples:
        >>> schema_field(["dry_run"]), schema_field(["limits", "time_s"])
        (True, True)
        >>> schema_field(["harness", "env", "X"]), schema_field(["modle"])
        (False, False)
    """
    cls: Any = _schema()
    for i, part in enumerate(path):
        fields = schema_fields(cls)
        if part not in fields:
            return False
        if i < len(path) - 1:
            cls = _dataclass_of(fields[part])
            if cls is None:
                return False
    return True


# ---------------------------------------------------------------------- the schema


def _schema() -> type:
    from spu.config import SPUConfig

    return SPUConfig


def _dataclass_of(tp: Any) -> type | None:
    """The dataclass a field holds (``X``, ``X | None``), or None for a leaf or a dict."""
    if dataclasses.is_dataclass(tp):
        return tp if isinstance(tp, type) else type(tp)
    for arg in typing.get_args(tp):
        if dataclasses.is_dataclass(arg) and isinstance(arg, type):
            return arg
    return None


def _is_mapping(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    return tp is dict or origin is dict or any(
        a is dict or typing.get_origin(a) is dict for a in typing.get_args(tp))


def schema_fields(cls: type) -> dict[str, Any]:
    """Field name -> resolved type of a schema dataclass."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def unknown_key(path: Sequence[str]) -> tuple[str, list[str]] | None:
    """The first unknown part of a dotted key and the keys valid at that level.

    Returns None when the key exists (or lies under a free-form mapping).
    """
    if path and path[0] in FREE_KEYS:
        return None
    cls: Any = _schema()
    for i, part in enumerate(path):
        fields = schema_fields(cls)
        if part not in fields:
            return ".".join(path[: i + 1]), sorted(fields)
        tp = fields[part]
        if _is_mapping(tp):
            return None
        cls = _dataclass_of(tp)
        if cls is None:
            return None if i == len(path) - 1 else (".".join(path[: i + 2]), [])
    return None


def is_group_name(name: str) -> bool:
    """True for a config group of ``conf/`` or ``task`` (a group, not a plain key)."""
    return name == "task" or is_group(name)


def nearest(word: str, choices: Sequence[str], cutoff: float = 0.6) -> str | None:
    """The choice closest to ``word``, if one is close enough.

    Examples:
        >>> nearest("modle", ["model", "harness", "effort"])
        'model'
        >>> nearest("zzz", ["model", "harness"]) is None
        True
    """
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return found[0] if found else None


# ---------------------------------------------------------------------- config groups


class Groups:
    """The config groups Hydra sees (``conf/``, plugins, the task packages), by name."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def is_group(self, name: str) -> bool:
        """True when ``name`` is a config group (``model``, ``hydra/launcher``...)."""
        return bool(self.loader.repository.group_exists(name))

    def options(self, name: str) -> list[str]:
        """The options of group ``name``."""
        return sorted(self.loader.get_group_options(name))

    def top_groups(self) -> list[str]:
        """Group names at the top level (``model``, ``task``, ``hydra``...)."""
        from hydra.core.object_type import ObjectType

        return sorted(self.loader.get_group_options("", results_filter=ObjectType.GROUP))


@contextmanager
def config_groups() -> Iterator[Groups]:
    """The config groups, from Hydra's running instance or a fresh one on ``conf/``."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    import spu.config
    from spu.project import CONFIG_MODULE

    spu.config.register_configs()
    instance = GlobalHydra.instance()
    if instance.is_initialized():
        yield Groups(instance.config_loader())
        return
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        yield Groups(GlobalHydra.instance().config_loader())


# ---------------------------------------------------------------------- overrides


def parse(overrides: Sequence[str]) -> list[Any]:
    """Hydra's parsed overrides (no config loader: globs stay unexpanded)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return list(OverridesParser.create().parse_overrides(list(overrides)))


def task_root_of(argv: Sequence[str]) -> Path:
    """The task root the command line selects (``task_root=``, else ``$SPU_TASK_ROOT``, tasks)."""
    root = os.environ.get("SPU_TASK_ROOT", "tasks")
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if sep and key == "task_root":
            root = value
    return Path(root).expanduser().resolve()


def output_root_of(argv: Sequence[str]) -> Path:
    """The output root the command line selects (``output_root=``, else ``outputs``)."""
    root = "outputs"
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if sep and key == "output_root":
            root = value
    return Path(root).expanduser().resolve()


def _value_text(override: Any) -> str:
    """The value as typed, quoted like a shell user would type a glob."""
    line = override.input_line or ""
    text = line.partition("=")[2] if "=" in line else str(override.get_value_element_as_str())
    return f"'{text}'" if "(" in text and not text.startswith("'") else text


def task_problem(value: str, task_root: Path, options: Sequence[str]) -> str:
    """Why ``task=value`` selects nothing under ``task_root``, in one line."""
    if not task_root.is_dir():
        where = "does not exist" if not task_root.exists() else "is not a folder"
        return (f"task={value}: task_root={task_root} {where}; task packages are read from "
                f"task_root (default: tasks/ in the current folder): run from the repository "
                f"root or pass task_root=PATH")
    if not options:
        return (f"task={value}: no task package (a folder with task.yaml) under "
                f"task_root={task_root}; pass task_root=PATH")
    listing = f"{len(options)} tasks there: spu list tasks --task-root {task_root}"
    if "glob(" in value:
        return f"task={value} matches no task package under task_root={task_root} ({listing})"
    guess = nearest(value, options)
    hint = f"; did you mean task={guess}?" if guess else ""
    return f"task={value}: no task package {value!r} under task_root={task_root}{hint} ({listing})"


def option_problem(group: str, value: str, options: Sequence[str]) -> str:
    """Why ``group=value`` names no option, with the nearest one."""
    guess = nearest(value, options)
    hint = f"; did you mean {group}={guess}?" if guess else ""
    shown = ", ".join(options[:20]) + (", ..." if len(options) > 20 else "")
    return f"{group}={value}: no such option of {group}{hint} (options: {shown})"


def key_problem(override_text: str, key: str, value: str, valid: Sequence[str],
                groups: Sequence[str]) -> str:
    """Why ``key`` is not a key of the configuration, with the nearest valid key."""
    parent, _, last = key.rpartition(".")
    candidates = sorted(set(valid) | (set(groups) if not parent else set()))
    guess = nearest(last, candidates)
    if guess is not None:
        fixed = f"{parent}.{guess}" if parent else guess
        return f"{override_text}: unknown key {key!r}; did you mean {fixed}={value}?"
    where = f"keys of {parent}" if parent else "keys"
    shown = ", ".join(candidates)
    extra = "; free-form values go under extra (extra.NAME=...)" if not parent else ""
    return f"{override_text}: unknown key {key!r} ({where}: {shown}){extra}"


def _sweep_values(override: Any) -> list[str] | None:
    """The values of a discrete sweep or a plain value; None for a glob or a range."""
    if override.is_sweep_override():
        if override.is_discrete_sweep():
            return [str(v) for v in override.sweep_string_iterator()]
        return None
    value = override.value()
    return None if value is None else [str(override.get_value_element_as_str())]


def _glob_of(override: Any) -> Any:
    from hydra.core.override_parser.types import Glob

    value = override.value()
    return value if isinstance(value, Glob) else None


def diagnose(overrides: Sequence[str], groups: Groups, task_root: Path) -> str | None:
    """The first override that names no key or option, explained; None if all do."""
    try:
        parsed = parse(overrides)
    except Exception as exc:  # Hydra's grammar errors
        return f"cannot read the overrides: {str(exc).splitlines()[0]}"
    tops = groups.top_groups()
    for override in parsed:
        key = str(override.key_or_group)
        text = override.input_line or key
        if override.is_delete():
            continue
        if groups.is_group(key):
            problem = _group_problem(override, key, groups, task_root)
            if problem:
                return problem
            continue
        if key.split(".")[0] in FREE_KEYS or "/" in key:
            continue
        found = unknown_key(key.split("."))
        if found is not None:
            bad, valid = found
            return key_problem(text, bad, _value_text(override), valid, tops)
    return None


def _group_problem(override: Any, group: str, groups: Groups, task_root: Path) -> str | None:
    options = groups.options(group)
    glob = _glob_of(override)
    if glob is not None:
        if glob.filter(options):
            return None
        if group == "task":
            return task_problem(_value_text(override), task_root, options)
        return f"{group}={_value_text(override)} matches no option of {group} " \
               f"(options: {', '.join(options)})"
    for value in _sweep_values(override) or []:
        if value in options or value == "null":
            continue
        if group == "task":
            return task_problem(value, task_root, options)
        return option_problem(group, value, options)
    return None


def check_overrides(argv: Sequence[str]) -> None:
    """Refuse, before Hydra starts, overrides Hydra would accept and then run wrongly.

    - ``+key=value`` for a top-level key that is neither in the schema nor a group:
      Hydra adds it and the run ignores it (``+modle=random`` runs the default model);
    - a ``task`` glob that matches no task package: Hydra would launch no job;
    - an ``output_root`` that cannot hold folders (under a file, or not writable).

    Raises:
        OverrideError: the one-line reason.
    """
    overrides = [a for a in argv if not a.startswith("-")]
    added = [a for a in overrides if a.startswith("+") and not a.startswith("++")]
    globbed = [a for a in overrides if a.lstrip("+").startswith("task=")
               and "glob(" in a]
    if added or globbed:
        with config_groups() as groups:
            tops = groups.top_groups()
            for arg in added:
                key, _, value = arg[1:].partition("=")
                if groups.is_group(key) or key.split(".")[0] in FREE_KEYS:
                    continue
                found = unknown_key(key.split("."))
                if found is not None:
                    bad, valid = found
                    raise OverrideError(key_problem(arg, bad, value, valid, tops))
            problem = diagnose(globbed, groups, task_root_of(argv))
            if problem:
                raise OverrideError(problem)
    check_output_root(output_root_of(argv))


def folder_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot be created and written, or None when it can.

    Examples:
        >>> folder_problem(Path("/proc/version/out"))
        '/proc/version is a file, not a folder'
    """
    folder = Path(folder).expanduser().absolute()
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this user"
    return None


def check_output_root(root: Path) -> None:
    """Refuse an ``output_root`` under a file, or in a folder this user cannot write.

    Raises:
        OverrideError: the one-line reason.
    """
    problem = folder_problem(root)
    if problem:
        raise OverrideError(f"output_root={root}: {problem}; pass output_root=PATH (a folder "
                            f"you can create and write)")


def explain(exc: BaseException, argv: Sequence[str]) -> str | None:
    """One line for an error Hydra raised while composing or starting, or None.

    The overrides are checked one by one against the schema and the config groups,
    so the message names the override at fault and the nearest valid spelling; an
    ``OSError`` under ``output_root`` names the folder. Anything else returns None
    (a bug: the caller lets the traceback through).
    """
    from hydra.errors import ConfigCompositionException, HydraException
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(exc, OSError) and exc.filename:
        root = output_root_of(argv)
        path = Path(str(exc.filename)).resolve()
        if path == root or root in path.parents:
            return (f"output_root={root}: cannot create {path} ({exc.strerror}); "
                    f"pass output_root=PATH (a folder you can write)")
        return None
    if not isinstance(exc, (HydraException, OmegaConfBaseException)):
        return None
    overrides = [a for a in argv if not a.startswith("-")]
    added = _free_key_advice(str(exc))
    if added:
        return added
    if isinstance(exc, (ConfigCompositionException, OmegaConfBaseException)):
        with config_groups() as groups:
            problem = diagnose(overrides, groups, task_root_of(argv))
        if problem:
            return problem
    said = _first_lines(exc)
    return _value_type_advice(said) or said


_TYPE_WORDS = {"Float": "a number (float)", "Integer": "a whole number (int)",
               "bool": "true or false (bool)"}
"""How a schema type is said to the user, from the names OmegaConf's errors use."""


def _value_type_advice(message: str) -> str | None:
    r"""A value of the wrong type for its key, said with the key, the type and the fix.

    Hydra says "Value 'abc' of type 'str' could not be converted to Float" and "str is
    not a ListConfig, list or tuple"; a list key given one item gets the bracket form.

    Examples:
        >>> _value_type_advice("Error merging override limits.time_s=abc; Value 'abc' of "
        ...                    "type 'str' could not be converted to Float")
        "limits.time_s=abc: limits.time_s takes a number (float), not 'abc'"
        >>> _value_type_advice("Error merging override harness.args=--fast; Invalid value "
        ...                    "assigned: str is not a ListConfig, list or tuple.")
        'harness.args=--fast: harness.args takes a list; write harness.args=[--fast]'
    """
    import re

    found = re.search(r"Error merging override ([^=\s]+)=(\S*?);", message)
    if not found:
        return None
    key, value = found.group(1).lstrip("+~"), found.group(2)
    if "is not a ListConfig, list or tuple" in message:
        return f"{key}={value}: {key} takes a list; write {key}=[{value}]"
    converted = re.search(r"could not be converted to (\w+)", message)
    kind = converted.group(1) if converted else ("bool" if "is not a valid bool" in message
                                                 else None)
    if kind is None:
        return None
    return f"{key}={value}: {key} takes {_TYPE_WORDS.get(kind, kind)}, not {value!r}"


def _free_key_advice(message: str) -> str | None:
    r"""For a new key of a free-form mapping (``harness.env``, ``extra``), the ``+`` form.

    Hydra's advice to add a key with ``+`` is right there, and only there: a mapping has
    no schema to check its keys against.

    Examples:
        >>> _free_key_advice("Could not override 'harness.env.X'.\n"
        ...                  "To append to your config use +harness.env.X=1")
        "harness.env.X=1: harness.env has no key 'X' yet; add it with +harness.env.X=1"
    """
    import re

    found = re.search(r"Could not override '([^']+)'.*To append to your config use "
                      r"(\+(\S+?)=(\S*))", message, re.S)
    if not found:
        return None
    key = found.group(1)
    path = key.split(".")
    if schema_field(path) or unknown_key(path) is not None or len(path) < 2:
        return None  # a schema key: never the + form
    parent = ".".join(path[:-1])
    return (f"{found.group(3)}={found.group(4)}: {parent} has no key {path[-1]!r} yet; "
            f"add it with {found.group(2)}")


def _first_lines(exc: BaseException) -> str:
    """Hydra's own message, without its advice to add a key with ``+``."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("To append to your config")]
    cause = exc.__cause__
    if cause is not None and str(cause).strip():
        lines.append(str(cause).strip().splitlines()[0])
    return "; ".join(lines[:2]) or type(exc).__name__
