"""``spu selfcheck sandbox=NAME | harness=NAME | tools=NAME``: the kit, on any installed plugin.

One line per check as it ends (``PASSED``, ``FAILED`` with what was seen, ``EXPECTED
FAILURE`` with the plugin's reason, ``SKIPPED`` with what is missing), then
``N passed, M failed``; exit 1 when a check failed, 2 when the plugin or its options
cannot be used at all. Settings follow the plugin: ``sandbox.options.KEY=VALUE``,
``tools.options.KEY=VALUE`` (and other ``tools.*`` keys, ``tools.corpus=PATH``), and for a
harness any override of a run (``model=...``, ``harness.options.KEY=VALUE``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class SelfcheckUsageError(ValueError):
    """The plugin or its settings cannot be checked; the message is one line."""


def register(sub: Any) -> None:
    """Add ``selfcheck`` to the ``spu`` parser."""
    p = sub.add_parser(
        "selfcheck", help="run the conformance (and red-team) checks against a plugin",
        description="Run the checks every sandbox backend, harness or tools provider must "
        "pass against an installed one (the repository's own tests run the same checks). "
        "A backend that claims isolation also gets the red-team checks (as root). "
        "Exit 1 when a check fails.")
    p.add_argument("plugin", metavar="KIND=NAME",
                   help="sandbox=NAME, harness=NAME or tools=NAME (tools: the provider)")
    p.add_argument("settings", nargs="*", metavar="KEY=VALUE",
                   help="sandbox.options.KEY=VALUE, tools.options.KEY=VALUE, tools.corpus=PATH, "
                        "or a run's overrides for a harness (model=scripted ...)")
    p.add_argument("--only", action="append", default=None, metavar="CHECK",
                   help="run only this check (repeatable)")
    p.add_argument("--keep", type=Path, default=None, metavar="DIR",
                   help="work in DIR and keep it (default: a temporary folder, removed)")
    p.set_defaults(handler=selfcheck_command)


def selfcheck_command(args: argparse.Namespace) -> int:
    """Run the checks, one line each, and the closing line; 0, 1 (a failure) or 2."""
    from spu.selfcheck import Status, summary

    try:
        kind, name = _plugin(args.plugin)
        plan = _plan(kind, name, args.settings, args.only)
    except SelfcheckUsageError as exc:
        print(f"spu selfcheck: {exc}", file=sys.stderr)
        return 2
    print(plan.header, flush=True)
    results = []
    with _scratch(args.keep) as scratch:
        for result in plan.run(scratch):
            results.append(result)
            print(result.line, flush=True)
    print(summary(results))
    return 1 if any(r.status is Status.failed for r in results) else 0


def _plugin(text: str) -> tuple[str, str]:
    from spu.selfcheck import KINDS

    kind, sep, name = text.partition("=")
    if not sep or kind not in KINDS or not name:
        raise SelfcheckUsageError(f"{text!r}: expected sandbox=NAME, harness=NAME or "
                                  f"tools=NAME")
    return kind, name


@contextlib.contextmanager
def _scratch(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep.resolve()
        return
    from spu.sandbox.disk import remove_tree

    folder = Path(tempfile.mkdtemp(prefix="spu-selfcheck-"))
    try:
        yield folder
    finally:
        remove_tree(folder)  # an agent's tree may be deeper than shutil.rmtree goes


@dataclass
class Plan:
    """The checks to run on one plugin, and how to make each one's target."""

    header: str
    """The first line printed: the plugin, its package and class, the checks."""
    entries: list[Any]
    """The checks that apply."""
    target: Callable[[Any, Path], Any]
    """(check, scratch) -> the target of that check."""
    expected: dict[str, str]
    """The plugin's declared expected failures."""

    def run(self, scratch: Path) -> Iterator[Any]:
        """Each check's result, as it ends (a fresh target for each)."""
        from spu.selfcheck import CheckResult, Status, run_check

        for entry in self.entries:
            if entry.root and os.geteuid() != 0:
                yield CheckResult(entry.name, Status.skipped, "needs root")
                continue
            target = self.target(entry, scratch)
            try:
                yield run_check(entry, target, self.expected)
            finally:
                close = getattr(target, "close", None)
                if callable(close):
                    close()


def _value(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _settings(kind: str, settings: list[str]) -> dict[str, Any]:
    """``<kind>.KEY=VALUE`` settings as a nested mapping (``options`` among them)."""
    prefix = {"sandbox": "sandbox.", "tools": "tools."}[kind]
    out: dict[str, Any] = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key.startswith(prefix) or key == prefix:
            raise SelfcheckUsageError(f"{setting!r}: expected {prefix}KEY=VALUE")
        path = key.removeprefix(prefix).split(".")
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = _value(value)
    return out


def _plan(kind: str, name: str, settings: list[str], only: list[str] | None) -> Plan:
    from spu.registry import RegistryError
    from spu.selfcheck import checks

    entries = checks(kind)
    if only:
        unknown = sorted(set(only) - {e.name for e in entries})
        if unknown:
            raise SelfcheckUsageError(f"--only {unknown[0]}: no such check of {kind} (its "
                                      f"checks: {', '.join(e.name for e in entries)})")
        entries = [e for e in entries if e.name in only]
    try:
        make = {"sandbox": _sandbox_plan, "harness": _harness_plan, "tools": _tools_plan}[kind]
        return make(name, settings, entries)
    except RegistryError as exc:
        raise SelfcheckUsageError(str(exc)) from None


def _header(kind: str, name: str, cls: type, entries: list[Any], note: str = "") -> str:
    from spu.registry import distribution_of

    return (f"spu selfcheck {kind}={name}: {cls.__module__}:{cls.__qualname__} (package "
            f"{distribution_of(cls.__module__)}), {len(entries)} checks{note}")


def _sandbox_plan(name: str, settings: list[str], entries: list[Any]) -> Plan:
    from spu.config import SandboxConfig
    from spu.sandbox.base import get_sandbox
    from spu.sandbox.options import SandboxOptionsError, backend_options
    from spu.selfcheck.targets import SandboxTarget

    cls = get_sandbox(name)
    given = _settings("sandbox", settings)
    extra = sorted(set(given) - {"options"})
    if extra:
        raise SelfcheckUsageError(f"sandbox.{extra[0]}: give backend settings as "
                                  f"sandbox.options.KEY=VALUE")
    try:
        options = backend_options(cls.name, cls.options_model,
                                  SandboxConfig(name=name, options=given.get("options", {})))
    except SandboxOptionsError as exc:
        raise SelfcheckUsageError(str(exc)) from None
    applying = [e for e in entries if not (e.isolating and not cls.isolates)
                and not (e.unisolated and cls.isolates)]
    note = "" if cls.isolates else " (it claims no isolation: no isolation or red-team checks)"
    return Plan(_header("sandbox", name, cls, applying, note), applying,
                lambda entry, scratch: SandboxTarget(name, options, scratch / entry.name,
                                                     task_home=scratch),
                dict(getattr(cls, "selfcheck_expected_failures", {})))


def _harness_plan(name: str, overrides: list[str], entries: list[Any]) -> Plan:
    from spu.harness.base import get_harness
    from spu.selfcheck.harness import HarnessTarget

    cls = get_harness(name)
    return Plan(_header("harness", name, cls, entries), entries,
                lambda entry, scratch: HarnessTarget(name, list(overrides),
                                                     scratch / entry.name, task_home=scratch),
                dict(getattr(cls, "selfcheck_expected_failures", {})))


def _tools_plan(name: str, settings: list[str], entries: list[Any]) -> Plan:
    from spu.config import ToolsConfig
    from spu.selfcheck.tools import ToolsTarget
    from spu.tools.providers import get_provider

    cls = get_provider(name)
    given = _settings("tools", settings)
    known = {f for f in ToolsConfig.__dataclass_fields__ if f not in ("name", "provider")}
    extra = sorted(set(given) - known)
    if extra:
        raise SelfcheckUsageError(f"tools.{extra[0]}: not a key of the tools config (its "
                                  f"keys: {', '.join(sorted(known))})")
    return Plan(_header("tools", name, cls, entries), entries,
                lambda entry, scratch: ToolsTarget(name, given, scratch / entry.name),
                dict(getattr(cls, "selfcheck_expected_failures", {})))
