"""The model catalogue, the efforts and how the CLI harnesses turn them into a command."""

from __future__ import annotations

import dataclasses
import json
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from omegaconf import OmegaConf

from spu.gateway.session import GatewaySession
from spu.harness import HarnessError, get_harness
from spu.harness.cli_agent import TOOLS_MOUNT
from spu.harness.npm_tools import InstalledTool, install_prefix, installed
from spu.tools.session import ToolEndpoints
from tests.conftest import EXAMPLE_TASK

CATALOGUE = {
    # name: (provider, default harness) of the paper's configurations (section 3.1)
    "opus55": ("anthropic", "claude_code"), "opus5": ("anthropic", "claude_code"),
    "sonnet55": ("anthropic", "claude_code"), "fable51": ("anthropic", "claude_code"),
    "astra": ("openai", "codex"), "sol61": ("openai", "codex"),
    "deepseek": ("deepseek", "claude_code"), "qwen38": ("alibaba", "claude_code"),
    "glm53": ("zhipu", "claude_code"), "doubao": ("bytedance", "claude_code"),
    "hy4": ("tencent", "claude_code"), "kimi31": ("moonshot", "claude_code"),
}
EFFORTS = ("low", "medium", "high", "xhigh", "max")


def typed(cfg: Any) -> SimpleNamespace:
    """The typed model, harness and effort of a composed config (no task selected)."""
    return SimpleNamespace(**{k: OmegaConf.to_object(cfg[k])
                              for k in ("model", "harness", "effort")})


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_catalogue_model_composes_with_its_default_harness(compose, name: str) -> None:
    provider, harness = CATALOGUE[name]
    conf = typed(compose(f"model={name}", f"harness={harness}", "effort=max"))
    model = conf.model
    assert (model.provider, model.default_harness) == (provider, harness)
    assert model.api_model and model.api_key_env and model.api_key_env.endswith("_KEY")
    if provider != "anthropic":  # Anthropic models use Claude Code's default endpoint
        assert model.base_url and model.base_url.startswith("https://")
    assert model.prices.input > 0 and model.prices.output > 0


@pytest.mark.parametrize("effort", EFFORTS)
@pytest.mark.parametrize("name", ["claude_code", "codex"])
def test_effort_maps_to_both_clis(compose, effort: str, name: str) -> None:
    conf = typed(compose(f"harness={name}", f"effort={effort}"))
    assert get_harness(name)(conf.harness, conf.model, conf.effort).effort_value() == effort
    none = typed(compose(f"harness={name}", "effort=none"))
    assert get_harness(name)(none.harness, none.model, none.effort).effort_value() is None


def test_an_effort_a_harness_lacks_is_refused_and_its_config_can_add_it(compose) -> None:
    conf = typed(compose("model=opus5", "harness=claude_code", "effort=max"))
    conf.effort.name = "ultra"
    harness = get_harness("claude_code")(conf.harness, conf.model, conf.effort)
    with pytest.raises(HarnessError, match="effort=ultra has no value for harness=claude_code; "
                                           "its efforts: high, low, max, medium, xhigh"):
        harness.effort_value()
    conf.harness.efforts = {"ultra": "max"}
    assert harness.effort_value() == "max"


def test_scripted_model_needs_no_key(compose) -> None:
    conf = typed(compose("model=scripted", "harness=codex"))
    assert conf.model.provider == "scripted" and conf.model.api_key_env is None
    harness = get_harness("codex")(conf.harness, conf.model, conf.effort)
    assert harness.api_key()


def test_missing_api_key_is_named(compose, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    conf = typed(compose("model=deepseek", "harness=claude_code", "effort=max"))
    harness = get_harness("claude_code")(conf.harness, conf.model, conf.effort)
    with pytest.raises(HarnessError, match="DEEPSEEK_API_KEY"):
        harness.check()


def test_baseline_model_is_refused(compose) -> None:
    conf = typed(compose("model=random", "harness=codex"))
    with pytest.raises(HarnessError, match="harness=baseline"):
        get_harness("codex")(conf.harness, conf.model, conf.effort).check()


def _with_tool(harness, tmp_path: Path) -> None:
    # The install folder only names paths here; no CLI runs in these tests.
    cfg = harness.cfg
    harness.tool = InstalledTool(cfg.cli_package, cfg.version,
                                 install_prefix(tmp_path, cfg.cli_package, cfg.version))
    harness.cli_root = harness.mount_point()


class _Ctx:
    """The parts of an AgentContext the command needs."""

    def __init__(self, tmp_path: Path, tools: object = None) -> None:
        from spu.sandbox.base import SandboxPaths

        self.paths = SandboxPaths(task="/task", workspace="/workspace", output="/output")
        self.task = type("T", (), {"path": Path("tasks/example-coupling-conditions"),
                                   "id": "t", "version": "1"})()
        self.seed = 1
        self.gpu_ids: list[str] = []
        self.tools = tools

    def base_env(self) -> dict[str, str]:
        return {"SPU_TASK_DIR": "/task", "PATH": "/usr/bin:/bin"}

    def proxy_env(self) -> dict[str, str]:
        from spu.harness.base import AgentContext

        return AgentContext.proxy_env(self)  # type: ignore[arg-type]


TOOLS = ToolEndpoints(url="http://10.0.2.2:41000/s3cret/mcp", proxy_url="http://10.0.2.2:41001",
                      host_address="10.0.2.2")


def test_claude_code_gets_the_audited_tools_and_never_its_own_web_tools(
        compose, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    conf = typed(compose("model=opus5", "harness=claude_code", "effort=max"))
    harness = get_harness("claude_code")(conf.harness, conf.model, conf.effort)
    _with_tool(harness, tmp_path)
    argv = harness.command(_Ctx(tmp_path)).argv  # type: ignore[arg-type]
    assert argv[argv.index("--disallowedTools") + 1] == "WebSearch,WebFetch"
    assert "--mcp-config" not in argv  # no service, no MCP server
    command = harness.command(_Ctx(tmp_path, TOOLS))  # type: ignore[arg-type]
    argv = command.argv
    assert argv[argv.index("--disallowedTools") + 1] == "WebSearch,WebFetch"
    # A file, not the JSON: the service's secret URL stays off the host's process table.
    assert argv[argv.index("--mcp-config") + 1] == "/workspace/.spu-mcp.json"
    assert TOOLS.url not in " ".join(argv)
    assert json.loads(harness.mcp_config(_Ctx(tmp_path, TOOLS))) == {  # type: ignore[arg-type]
        "mcpServers": {"spu": {"type": "http", "url": TOOLS.url}}}
    assert "--strict-mcp-config" in argv
    # Every connection goes through the egress proxy, except to the host's address.
    env = command.env
    assert env["HTTPS_PROXY"] == env["https_proxy"] == env["HTTP_PROXY"] == TOOLS.proxy_url
    assert env["NO_PROXY"].split(",") == ["10.0.2.2", "127.0.0.1", "localhost"]
    assert harness.api_hosts() == {"api.anthropic.com"}


def test_codex_gets_the_audited_tools_as_its_mcp_server_and_no_web_search(
        compose, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    conf = typed(compose("model=astra", "harness=codex", "effort=medium"))
    harness = get_harness("codex")(conf.harness, conf.model, conf.effort)
    parsed = tomllib.loads(harness.config_toml(TOOLS.url))
    assert parsed["web_search"] == "disabled"
    assert parsed["mcp_servers"] == {"spu": {"url": TOOLS.url, "tool_timeout_sec": 180}}
    assert "mcp_servers" not in tomllib.loads(harness.config_toml())
    assert tomllib.loads(harness.config_toml())["web_search"] == "disabled"
    assert harness.api_hosts() == {"api.openai.com"}


def test_claude_code_command_for_a_compatible_endpoint(compose, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-deepseek")
    conf = typed(compose("model=deepseek", "harness=claude_code", "effort=max"))
    harness = get_harness("claude_code")(conf.harness, conf.model, conf.effort)
    _with_tool(harness, tmp_path)
    command = harness.command(_Ctx(tmp_path))  # type: ignore[arg-type]
    argv, env = command.argv, command.env
    assert argv[0] == f"{TOOLS_MOUNT}/@anthropic-ai+claude-code@2.1.260/node_modules/.bin/claude"
    assert argv[1:2] == ["-p"] and "rankings.json" in argv[2]
    assert argv[argv.index("--output-format") + 1] == "stream-json" and "--verbose" in argv
    assert argv[argv.index("--model") + 1] == "deepseek-v4.1-flash-0910"
    assert argv[argv.index("--effort") + 1] == "max"
    assert "--dangerously-skip-permissions" in argv
    assert env["IS_SANDBOX"] == "1" and env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["ANTHROPIC_BASE_URL"] == "https://api.deepseek.com/anthropic"
    assert env["ANTHROPIC_AUTH_TOKEN"] == "sk-deepseek" and "ANTHROPIC_API_KEY" not in env
    assert env["CLAUDE_CODE_SUBAGENT_MODEL"] == env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == \
        "deepseek-v4.1-flash-0910"


def test_claude_code_command_for_anthropic(compose, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    conf = typed(compose("model=opus5", "harness=claude_code", "effort=max",
                         "+harness.env.EXTRA=1"))
    harness = get_harness("claude_code")(conf.harness, conf.model, conf.effort)
    _with_tool(harness, tmp_path)
    env = harness.command(_Ctx(tmp_path)).env  # type: ignore[arg-type]
    assert env["ANTHROPIC_API_KEY"] == "sk-ant" and "ANTHROPIC_BASE_URL" not in env
    assert env["EXTRA"] == "1"


def test_codex_config_declares_the_provider_and_effort(compose, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    conf = typed(compose("model=astra", "harness=codex", "effort=medium"))
    harness = get_harness("codex")(conf.harness, conf.model, conf.effort)
    parsed = tomllib.loads(harness.config_toml())
    assert parsed["model"] == "gpt-6-astra"
    assert parsed["model_reasoning_effort"] == "medium"
    provider = parsed["model_providers"][parsed["model_provider"]]
    assert provider == {"name": "openai", "base_url": "https://api.openai.com/v1",
                        "env_key": "OPENAI_API_KEY", "wire_api": "responses"}
    _with_tool(harness, tmp_path)
    command = harness.command(_Ctx(tmp_path))  # type: ignore[arg-type]
    assert command.argv[1:8] == ["exec", "--json", "--skip-git-repo-check",
                                 "--dangerously-bypass-approvals-and-sandbox", "-c",
                                 "analytics.enabled=false", "--disable"]
    assert command.env["OPENAI_API_KEY"] == "sk-openai"
    assert command.env["CODEX_HOME"] == "/workspace/.codex"


def test_a_partial_install_is_not_taken_for_an_install(tmp_path: Path) -> None:
    prefix = install_prefix(tmp_path, "@openai/codex", "0.171.0")
    manifest = prefix / "node_modules" / "@openai" / "codex" / "package.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text('{"version": "0.171.0"}')
    assert installed("@openai/codex", "0.171.0", tmp_path) is None  # no completion marker
    (prefix / ".spu-installed.json").write_text("{}")
    assert installed("@openai/codex", "0.171.0", tmp_path) is not None
    assert installed("@openai/codex", "0.172.0", tmp_path) is None


def test_an_unknown_script_is_a_config_error(compose) -> None:
    conf = typed(compose("model=scripted", "harness=claude_code",
                         "model.api_model=/nonexistent/script.json"))
    with pytest.raises(HarnessError, match=r"model.api_model: .*script.json: no such script"):
        get_harness("claude_code")(conf.harness, conf.model, conf.effort).check()


def _prepared_sandbox(name: str, tmp_path: Path, network: bool,
                      host_ports: list[int] | None = None) -> tuple[Any, Any]:
    """A prepared sandbox on the example task and the agent context of a run in it."""
    from spu.harness.base import AgentContext
    from spu.sandbox import RunLimits, SandboxRequest, get_sandbox
    from spu.tasks import load_task
    from spu.tasks.package import stage_public_files

    ok, why = get_sandbox(name).available()
    if not ok:
        pytest.skip(f"sandbox={name} unavailable: {why}")
    task = load_task(EXAMPLE_TASK)
    run_dir = tmp_path / "run"
    limits = RunLimits(time_s=60, memory_gb=1, cpus=1, gpus=0, grace_s=1)
    sandbox = get_sandbox(name)()
    paths = sandbox.prepare(SandboxRequest(
        task_dir=stage_public_files(task, run_dir / "task"), run_dir=run_dir, limits=limits,
        network=network, host_ports=host_ports or []))
    ctx = AgentContext(task=task, paths=paths, run_dir=run_dir, run_key="k", limits=limits,
                       seed=1)
    return sandbox, ctx


def _gateway(conf: Any, harness: Any, tmp_path: Path) -> GatewaySession:
    """The run's model gateway, with the scripted server as its upstream (as the runner opens)."""
    return GatewaySession(conf.model, harness.model_api(), tmp_path / "run").start()


@pytest.mark.parametrize("harness_name", ["claude_code", "codex"])
def test_scripted_model_is_refused_where_the_agent_has_its_own_network(
        compose, tmp_path: Path, harness_name: str) -> None:
    """The gateway on the host's 127.0.0.1 is unreachable from an offline network namespace."""
    conf = typed(compose("model=scripted", f"harness={harness_name}"))
    harness = get_harness(harness_name)(conf.harness, conf.model, conf.effort)
    _with_tool(harness, tmp_path)
    gateway = _gateway(conf, harness, tmp_path)
    sandbox, ctx = _prepared_sandbox("local", tmp_path, network=False)
    try:
        assert "network-namespace" in sandbox.info().isolation
        ctx = dataclasses.replace(ctx, model=gateway.open_endpoint(ctx.paths.host_address))
        with pytest.raises(HarnessError, match=r"sandbox=local .*sandbox\.network=true"):
            harness.prepare(ctx, sandbox)
    finally:
        harness.cleanup()
        sandbox.cleanup()
        gateway.close()


@pytest.mark.parametrize("harness_name", ["claude_code", "codex"])
def test_scripted_model_runs_where_its_port_is_a_host_port_of_the_sandbox(
        compose, tmp_path: Path, harness_name: str) -> None:
    """The gateway's port is a host port of the sandbox (same port inside); the CLI gets it."""
    conf = typed(compose("model=scripted", f"harness={harness_name}"))
    harness = get_harness(harness_name)(conf.harness, conf.model, conf.effort)
    _with_tool(harness, tmp_path)
    gateway = _gateway(conf, harness, tmp_path)
    ports = gateway.host_ports()
    sandbox, ctx = _prepared_sandbox("local", tmp_path, network=True, host_ports=ports)
    try:
        ctx = dataclasses.replace(ctx, model=gateway.open_endpoint(ctx.paths.host_address))
        harness.prepare(ctx, sandbox)
        assert harness.endpoint() == f"http://{ctx.paths.host_address}:{ports[0]}"
        assert harness.api_key() == gateway.gateway.token != "scripted-model-key"
    finally:
        harness.cleanup()
        sandbox.cleanup()
        gateway.close()


def test_scripted_model_behind_an_undeclared_port_names_the_fix(compose, tmp_path: Path) -> None:
    """A sandbox that does not forward the gateway's port is refused with the way out."""
    from spu.sandbox.base import Sandbox
    from spu.sandbox.docker import DockerSandbox
    from spu.schema import SandboxInfo

    conf = typed(compose("model=scripted", "harness=claude_code"))
    harness = get_harness("claude_code")(conf.harness, conf.model, conf.effort)
    gateway = _gateway(conf, harness, tmp_path)
    harness.gateway = gateway.open_endpoint("127.0.0.1")
    try:
        bridged = SandboxInfo(backend="docker", isolation=["container", "network-namespace"],
                              network="docker-bridge")
        with pytest.raises(HarnessError, match=r"sandbox\.network_mode=pasta"):
            harness.check_gateway_reachable(cast(Sandbox, SimpleNamespace(
                info=lambda: bridged, unreachable_port_fix=DockerSandbox.unreachable_port_fix)))
        on_host = SandboxInfo(backend="docker", isolation=["container"], network="host")
        harness.check_gateway_reachable(cast(Sandbox, SimpleNamespace(info=lambda: on_host)))
        forwarded = SandboxInfo(backend="local", isolation=["network-namespace"],
                                network="pasta-filtered", host_ports=gateway.host_ports())
        harness.check_gateway_reachable(cast(Sandbox, SimpleNamespace(info=lambda: forwarded)))
    finally:
        harness.cleanup()
        gateway.close()


def test_agent_env_layers_proxies_extra_and_harness_env(compose, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """One rule for every harness: base, host proxies (both spellings), extra, harness.env."""
    monkeypatch.setenv("https_proxy", "http://proxy:1")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:2")
    monkeypatch.setenv("no_proxy", "internal")
    monkeypatch.delenv("NO_PROXY", raising=False)
    agent = tmp_path / "agent.sh"
    agent.write_text("#!/bin/sh\n")
    conf = typed(compose("harness=command", f"harness.entrypoint={agent}",
                         "+harness.env.HTTPS_PROXY=http://mine", "+harness.env.MY=1"))
    command = get_harness("command")(conf.harness, conf.model, conf.effort)
    command._inside = "/workspace/.agent/agent.sh"  # what prepare would set
    env = command.command(_Ctx(tmp_path)).env  # type: ignore[arg-type]
    assert env["SPU_TASK_DIR"] == "/task"
    assert env["https_proxy"] == "http://proxy:1" and env["no_proxy"] == "internal"
    assert env["HTTPS_PROXY"] == "http://mine" and env["MY"] == "1"  # harness.env wins
    assert "NO_PROXY" not in env and "CUDA_VISIBLE_DEVICES" not in env

    conf = typed(compose("model=scripted", "harness=codex", "+harness.env.MY=2"))
    codex = get_harness("codex")(conf.harness, conf.model, conf.effort)
    _with_tool(codex, tmp_path)
    env = codex.command(_Ctx(tmp_path)).env  # type: ignore[arg-type]
    assert env["https_proxy"] == "http://proxy:1" and env["HTTPS_PROXY"] == "http://proxy:2"
    assert env["TMPDIR"] == "/workspace/.tmp" and env["MY"] == "2"
    assert env["CODEX_HOME"] == "/workspace/.codex"


def test_base_env_carries_no_gpu_variables(tmp_path: Path) -> None:
    """The sandbox hands over the GPU placement; the harness environment never does."""
    from spu.harness.base import AgentContext
    from spu.sandbox import LAYOUT, RunLimits
    from spu.tasks import load_task

    ctx = AgentContext(task=load_task(EXAMPLE_TASK), paths=LAYOUT, run_dir=tmp_path,
                       run_key="k", limits=RunLimits(gpus=1), seed=1, gpu_ids=["3"])
    env = ctx.base_env()
    assert env["SPU_TASK_DIR"] == "/task"
    assert not {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"} & set(env)


class _Refusing(BaseHTTPRequestHandler):
    """A provider that refuses every key (401, in Anthropic's error shape) and logs nothing."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = json.dumps({"type": "error", "error": {"type": "authentication_error",
                                                      "message": "invalid x-api-key"}})
        self.send_response(401 if self.path == "/v1/models" else 404)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


def test_a_refused_key_is_named_with_the_providers_words(compose, monkeypatch) -> None:
    """One request before the agent starts: a 401 becomes one line naming the variable."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-wrong")
        conf = typed(compose("model=opus5", "harness=claude_code", "effort=max",
                             f"model.base_url=http://127.0.0.1:{server.server_port}"))
        harness = get_harness("claude_code")(conf.harness, conf.model, conf.effort)
        assert harness.key_rejection() == (
            "API error 401: the provider rejected the API key in ANTHROPIC_API_KEY "
            "(authentication_error: invalid x-api-key); check the key, or use model=scripted "
            "to run offline")
    finally:
        server.shutdown()
        server.server_close()
    # Nothing answers any more: the check lets the run go ahead (the CLI will say why).
    assert harness.key_rejection() is None
