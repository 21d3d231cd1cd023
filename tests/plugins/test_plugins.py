"""Plugins by entry point: a harness and a sandbox backend kept outside ``spu/`` and ``conf/``.

The package ``tests/plugins/spu_example_plugin`` (installed editable by ``make test``)
declares ``harness=example`` (effort levels of its own, one more in its config file),
``sandbox=example`` (options of its own) and its config group files; the real command
line sweeps with them.
"""

from __future__ import annotations

import inspect
import json
import shutil
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from spu.config import SandboxConfig
from spu.harness import HarnessError, get_harness
from spu.harness.base import harness_names
from spu.registry import HARNESSES, SANDBOXES, TOOLS_PROVIDERS, Registry, RegistryError
from spu.sandbox.base import Sandbox, get_sandbox, sandbox_names
from spu.sandbox.options import DockerOptions, SandboxOptionsError, backend_options
from spu.tools.providers import get_provider, provider_names
from tests.conftest import EXAMPLE_TASK, REPO, run_module

PLUGIN = Path(__file__).parent / "spu_example_plugin"

try:
    from spu_example_plugin.harness import ExampleHarness
    from spu_example_plugin.sandbox import ExampleOptions, ExampleSandbox
except ImportError:  # pragma: no cover - the test environment installs it
    pytest.skip(f"the example plugin is not installed: pip install -e {PLUGIN}",
                allow_module_level=True)


def test_the_plugin_lives_outside_spu_and_conf() -> None:
    from hydra_plugins.spu_plugins.conf_search_path import plugin_conf_paths

    for cls in (ExampleHarness, ExampleSandbox):
        source = Path(inspect.getfile(cls)).resolve()
        assert PLUGIN in source.parents and REPO / "spu" not in source.parents
    conf = dict(plugin_conf_paths())["spu-plugin-spu_example_plugin"]
    assert conf == f"file://{PLUGIN / 'spu_example_plugin' / 'conf'}"
    assert not (REPO / "conf" / "harness" / "example.yaml").exists()
    assert not (REPO / "conf" / "sandbox" / "example.yaml").exists()


def test_builtins_are_declared_by_spus_own_entry_points() -> None:
    declared = {group: {ep.name: ep.value for ep in entry_points(group=group)
                        if ep.dist is not None and ep.dist.name == "spu"}
                for group in (HARNESSES, SANDBOXES, TOOLS_PROVIDERS)}
    assert declared[HARNESSES] == {
        "baseline": "spu.harness.baseline:BaselineHarness",
        "command": "spu.harness.command:CommandHarness",
        "claude_code": "spu.harness.claude_code:ClaudeCodeHarness",
        "codex": "spu.harness.codex:CodexHarness",
        "consensus": "spu.harness.consensus:ConsensusHarness",
        "recall": "spu.harness.recall:RecallHarness"}
    assert set(declared[SANDBOXES]) == {"local", "subprocess", "docker"}
    assert set(declared[TOOLS_PROVIDERS]) == {"offline", "web"}
    assert get_sandbox("example") is ExampleSandbox and get_harness("example") is ExampleHarness
    assert {"example", "baseline", "codex"} <= set(harness_names())
    assert {"example", "local", "docker"} <= set(sandbox_names())


@pytest.mark.parametrize(("get", "names", "kind"), [
    (get_harness, harness_names, "harness"),
    (get_sandbox, sandbox_names, "sandbox"),
    (get_provider, provider_names, "tools provider"),
])
def test_an_unknown_name_is_one_line_listing_the_known_ones(get, names, kind) -> None:
    with pytest.raises(KeyError) as caught:
        get("nope")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"unknown {kind} 'nope'; known: {', '.join(names())} ")


def test_an_entry_point_must_name_a_subclass_called_by_its_name() -> None:
    from importlib.metadata import EntryPoint

    registry: Registry[Sandbox] = Registry("sandbox", SANDBOXES, Sandbox)
    wrong_name = EntryPoint("other", "spu_example_plugin.sandbox:ExampleSandbox", SANDBOXES)
    with pytest.raises(RegistryError, match="the class says name = 'example'"):
        registry.load(wrong_name)
    not_a_sandbox = EntryPoint("example", "spu_example_plugin.harness:ExampleHarness", SANDBOXES)
    with pytest.raises(RegistryError, match="is not a Sandbox subclass"):
        registry.load(not_a_sandbox)
    missing = EntryPoint("gone", "spu_example_plugin.nowhere:Gone", SANDBOXES)
    with pytest.raises(RegistryError, match="does not load: ModuleNotFoundError"):
        registry.load(missing)


def test_the_harness_efforts_come_from_the_class_and_its_config(compose) -> None:
    from omegaconf import OmegaConf

    def harness(effort: str) -> ExampleHarness:
        cfg = compose("harness=example", "model=presented_order", f"effort={effort}")
        parts = {k: OmegaConf.to_object(cfg[k]) for k in ("harness", "model", "effort")}
        return ExampleHarness(parts["harness"], parts["model"], parts["effort"])

    assert harness("high").effort_value() == "monotone_prior"  # the class's level
    assert harness("turbo").effort_value() == "presented_order"  # conf/harness/example.yaml's
    assert harness("none").effort_value() is None
    with pytest.raises(HarnessError, match="effort=xhigh has no value for harness=example; "
                                           "its efforts: high, low, max, medium, turbo"):
        harness("xhigh").check()


def test_each_backend_checks_its_own_options() -> None:
    cfg = SandboxConfig(name="example", pids_limit=64, options={"motd": "hi"})
    assert backend_options("example", ExampleOptions, cfg) == {
        "pids_limit": 64, "agent_uid": None, "motd": "hi"}
    with pytest.raises(SandboxOptionsError) as caught:
        backend_options("example", ExampleOptions, SandboxConfig(options={"motdd": "hi"}))
    assert str(caught.value) == ("sandbox.options.motdd: not an option of sandbox=example "
                                 "(its options: agent_uid, motd, pids_limit)")
    with pytest.raises(SandboxOptionsError, match=r"sandbox.options.pids_limit: .*'many'"):
        backend_options("example", ExampleOptions, SandboxConfig(options={"pids_limit": "many"}))
    # The flat keys that predate options still reach the built-in backend that has them.
    docker = backend_options("docker", DockerOptions,
                             SandboxConfig(image="img:1", network_mode="bridge"))
    assert (docker["image"], docker["network_mode"], docker["pids_limit"]) == \
        ("img:1", "bridge", 4096)


@pytest.fixture
def one_task_root(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    shutil.copytree(EXAMPLE_TASK, root / EXAMPLE_TASK.name)
    return root


def test_a_bad_backend_name_or_option_stops_the_command_in_one_line(one_task_root,
                                                                    tmp_path) -> None:
    base = ["spu.main", "harness=example", "sandbox=example", "model=presented_order",
            f"task={EXAMPLE_TASK.name}", f"task_root={one_task_root}",
            f"output_root={tmp_path / 'out'}"]
    for override, expected in (
        ("sandbox.name=nope", f"spu: sandbox.name: unknown sandbox 'nope'; known: "
                              f"{', '.join(sandbox_names())} "),
        ("+sandbox.options.motdd=x", "spu: sandbox.options.motdd: not an option of "
                                     "sandbox=example (its options: agent_uid, motd, "
                                     "pids_limit)"),
    ):
        proc = run_module([*base, override], timeout=300)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
        assert lines[0].startswith(expected), lines[0]
    assert not (tmp_path / "out" / "runs").exists()  # refused before any run started


@pytest.mark.slow
def test_the_command_line_sweeps_with_the_plugin_harness_and_backend(one_task_root,
                                                                     tmp_path) -> None:
    ok, why = ExampleSandbox.available()
    if not ok:
        pytest.skip(f"sandbox=example is bubblewrap: {why}")
    out = tmp_path / "outputs"
    proc = run_module(["spu.main", "-m", "harness=example", "sandbox=example",
                       "sandbox.network=false", "model=presented_order", "effort=turbo,high",
                       "task=glob(*)",
                       f"task_root={one_task_root}", f"output_root={out}"], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = {}
    for run in (out / "runs").iterdir():
        record = json.loads((run / "run.json").read_text())
        records[record["effort"]] = (record, run)
    assert sorted(records) == ["high", "turbo"]
    for effort, strategy in (("turbo", "presented_order"), ("high", "monotone_prior")):
        record, run = records[effort]
        assert (record["harness"], record["sandbox"]["backend"]) == ("example", "example")
        assert record["outcome"] == "valid"
        assert record["config"] == f"presented_order-{effort}-example"
        assert f"Strategy: `{strategy}`" in (run / "output" / "report.md").read_text()
        assert (run / "workspace" / "MOTD").read_text() == "hello from conf/sandbox/example.yaml\n"
        assert "network:offline" in record["sandbox"]["isolation"]
    assert (out / "mlflow.db").is_file()


def test_plugins_written_before_options_keep_working(compose, one_task_root, tmp_path) -> None:
    """Invariant: a harness, a tools provider and a backend written against the documented
    API before options (no ``options_model``, the corpus read from ``self.cfg.corpus``)
    still run end to end; an option given to one of them fails in one line, naming it."""
    from spu.main import spec_from_config
    from spu.runner import RunConfigError, run_one

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"url": "https://a.example/1", "title": "t", "text": "amine"}\n')
    old = "tests.plugins.old_style"
    overrides = ["harness=command", f"harness.name={old}:OldHarness", "effort=high",
                 "model=presented_order", f"tools.provider={old}:OldProvider",
                 f"tools.corpus={corpus}", f"sandbox.name={old}:OldSandbox",
                 "sandbox.allow_unisolated=true", "tracking=none",
                 f"task_root={one_task_root}", f"task={EXAMPLE_TASK.name}"]
    record = run_one(spec_from_config(compose(*overrides)))
    assert record.outcome.value == "valid" and record.identity is not None
    assert record.identity.tools.provider == f"{old}:OldProvider"
    assert record.identity.config.options == {} and record.identity.sandbox_options == {}
    # A class named by its path is used, never listed among the names.
    assert f"{old}:OldHarness" not in harness_names()
    report = tmp_path / "outputs" / "runs" / record.run_key / "output" / "report.md"
    assert "Strategy: `monotone_prior`" in report.read_text()
    with pytest.raises(RunConfigError, match=r"^harness.options.fast: not an option of "
                                             r"harness=old \(it takes no options\)$"):
        run_one(spec_from_config(compose(*overrides, "+harness.options.fast=1")))


def test_bind_run_is_a_hook_of_the_base_harness(compose, one_task_root) -> None:
    """Invariant: a harness without ``bind_run`` inherits the base's no-op; a plugin that
    overrides it (as plugins did while the runner looked it up by name) is called with the
    run spec and identity before anything starts, and its HarnessError stops the run in
    one line naming the harness."""
    from spu.harness.base import Harness
    from spu.main import spec_from_config
    from spu.runner import RunConfigError, prepare_agent

    old = "tests.plugins.old_style"
    base = ["harness=command", "model=presented_order", "effort=high", "tracking=none",
            f"task_root={one_task_root}", f"task={EXAMPLE_TASK.name}"]
    plain = prepare_agent(spec_from_config(compose(*base, f"harness.name={old}:OldHarness")))
    assert type(plain.harness).bind_run is Harness.bind_run
    bound = prepare_agent(spec_from_config(compose(*base, f"harness.name={old}:BindingHarness",
                                                   "repeat=2")))
    assert bound.harness.bound == (2, bound.task.id)
    with pytest.raises(RunConfigError, match=r"^harness=tests.plugins.old_style:BindingHarness: "
                                             r"repeat 7 is refused by this plugin$"):
        prepare_agent(spec_from_config(compose(*base, f"harness.name={old}:BindingHarness",
                                               "repeat=7")))


def test_an_option_typo_stops_the_command_in_one_line(one_task_root, tmp_path) -> None:
    """``harness.options`` and ``tools.options`` are checked before anything starts, as
    ``sandbox.options`` are: one line naming the key and the plugin's options, exit 2."""
    base = ["spu.main", "model=presented_order", f"task={EXAMPLE_TASK.name}",
            f"task_root={one_task_root}", f"output_root={tmp_path / 'out'}",
            "sandbox=subprocess", "sandbox.allow_unisolated=true"]
    for overrides, expected in (
        (["harness=example", "+harness.options.strategyy=random"],
         "spu: harness.options.strategyy: not an option of harness=example (its options: "
         "log_level, strategy)"),
        (["harness=example", "harness.options.strategy=best"],
         "spu: harness.options.strategy: Input should be 'random', 'presented_order' or "
         "'monotone_prior' (got 'best'; harness=example) (its options: log_level, strategy)"),
        (["harness=command", f"harness.entrypoint={REPO / 'docs/examples/my_agent.py'}",
          "tools=web", "tools.options.search_api=googel"],
         "spu: tools.options.search_api: Input should be 'searxng' or 'brave' (got 'googel'; "
         "tools.provider=web) (its options: api_key_env, search_api, search_url)"),
    ):
        proc = run_module([*base, *overrides], timeout=300)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and lines == [expected], proc.stderr[-3000:]
    assert not (tmp_path / "out" / "runs").exists()  # refused before any run started
