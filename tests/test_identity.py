"""Run identity (SPEC section 12): what each field of ``identity`` does to the run key."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from spu.config import EffortConfig, HarnessConfig, LimitsConfig, ModelConfig, ToolsConfig
from spu.identity import (
    config_label,
    harness_label,
    identity_for,
    key_fields,
    official_score,
    run_key,
    settings_change,
    settings_for,
)
from spu.launch.resume import legacy_record_matches
from spu.schema import RunRecord
from spu.tasks.digest import task_digest
from tests.conftest import EXAMPLE_TASK, REPO

LEGACY_RUN = REPO / "tests" / "golden" / "legacy_store" / "outputs" / "runs" / "a2e8630eb98759a8"


@pytest.fixture
def task(tmp_path: Path) -> Path:
    return Path(shutil.copytree(EXAMPLE_TASK, tmp_path / "task"))


def key_of(task: Path, model: ModelConfig | None = None, harness: HarnessConfig | None = None,
           effort: str = "none", tools: ToolsConfig | None = None, repeat: int = 0) -> str:
    return run_key(identity_for(model or ModelConfig(name="opus5", provider="anthropic"),
                                harness or HarnessConfig(name="claude_code"),
                                EffortConfig(name=effort), tools or ToolsConfig(), task,
                                "t", "1.0", repeat))


def test_every_identity_field_changes_the_key(task: Path, tmp_path: Path) -> None:
    """Invariant: a change to anything that ran is another run key."""
    agent = tmp_path / "agent.py"
    agent.write_text("print(1)\n")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"url": "u", "title": "t", "text": "x"}\n')
    base = key_of(task)
    assert base == key_of(task) and len(base) == 16
    variants = [
        key_of(task, model=ModelConfig(name="opus5", provider="anthropic", api_model="x")),
        key_of(task, model=ModelConfig(name="opus5", provider="anthropic",
                                       base_url="http://127.0.0.1:1")),
        key_of(task, effort="max"),
        key_of(task, harness=HarnessConfig(name="claude_code", version="9.9.9")),
        key_of(task, harness=HarnessConfig(name="command", entrypoint=str(agent))),
        key_of(task, harness=HarnessConfig(name="command", entrypoint=str(agent),
                                           args=["--fast"])),
        key_of(task, tools=ToolsConfig(provider="web")),
        key_of(task, tools=ToolsConfig(corpus=str(corpus))),
        key_of(task, repeat=1),
    ]
    assert base not in variants and len(set(variants)) == len(variants)
    before = key_of(task, harness=HarnessConfig(name="command", entrypoint=str(agent)))
    agent.write_text("print(2)\n")
    assert key_of(task, harness=HarnessConfig(name="command", entrypoint=str(agent))) != before
    (task / "files").mkdir()
    (task / "files" / "s.pdb").write_text("ATOM\n")
    assert key_of(task) != base


def test_labels_tools_of_a_baseline_and_times_leave_the_key(task: Path) -> None:
    """A display label, the tools of a harness that has none, file times: same run."""
    command = HarnessConfig(name="command", entrypoint=str(REPO / "docs/examples/my_agent.py"))
    labelled = HarnessConfig(name="command", entrypoint=command.entrypoint, label="mine")
    assert key_of(task, harness=command) == key_of(task, harness=labelled)
    baseline = HarnessConfig(name="baseline")
    assert key_of(task, harness=baseline) == key_of(task, harness=baseline,
                                                    tools=ToolsConfig(provider="web"))
    digest = task_digest(task)
    os.utime(task / "targets.csv", ns=(1, 1))
    assert task_digest(task) == digest
    (task / "hidden" / "answers.json").write_text("{}")  # not public: never in the digest
    (task / "review.yaml").write_text("verdict: accepted\n")
    assert task_digest(task) == digest


def test_config_labels_and_the_official_score() -> None:
    assert harness_label(HarnessConfig(name="command", entrypoint="/x/rev_agent.py")) == \
        "rev_agent"
    assert harness_label(HarnessConfig(name="codex")) is None
    assert config_label("opus5", "max", "claude_code", "claude_code") == "opus5-max"
    assert config_label("random", "none", "command", "baseline", "rev_agent") == \
        "random-none-rev_agent"
    assert official_score(True, -1.0, 0.25) == 0.25
    assert official_score(False, -1.0, 0.25) == -1.0


def test_settings_are_compared_but_not_hashed() -> None:
    recorded = settings_for(LimitsConfig(), "local")
    assert settings_change(recorded, settings_for(LimitsConfig(), "local")) is None
    changed = settings_change(recorded, settings_for(LimitsConfig(cpus=2), "subprocess"))
    assert changed == "limits.cpus=8 (this command: 2), sandbox=local (this command: subprocess)"
    assert settings_change(None, recorded) is None


def test_a_first_scheme_record_matches_only_what_it_ran(tmp_path: Path) -> None:
    """The golden run of ``docs/examples/my_agent.py`` (written before identity) is found
    for that agent on that task, never for another agent or an edited task."""
    task = Path(shutil.copytree(REPO / "tests/golden/legacy_store/tasks/"
                                "example-coupling-conditions", tmp_path / "task"))
    record = RunRecord.model_validate_json((LEGACY_RUN / "run.json").read_text())
    assert record.identity is None and record.settings is None

    def ident(entrypoint: Path) -> object:
        return identity_for(ModelConfig(name="random", provider="baseline"),
                            HarnessConfig(name="command", entrypoint=str(entrypoint)),
                            EffortConfig(name="none"), ToolsConfig(), task, record.task_id,
                            record.task_version, 0)

    mine = tmp_path / "my_agent.py"
    shutil.copy(REPO / "tests/golden/legacy_store/my_agent.py", mine)
    assert legacy_record_matches(LEGACY_RUN, ident(mine))  # type: ignore[arg-type]
    other = tmp_path / "rev_agent.py"
    other.write_text(mine.read_text() + "\n# another agent\n")
    assert not legacy_record_matches(LEGACY_RUN, ident(other))  # type: ignore[arg-type]
    (task / "experiment.md").write_text("edited\n")
    assert not legacy_record_matches(LEGACY_RUN, ident(mine))  # type: ignore[arg-type]


def test_what_a_plugin_changes_is_part_of_the_identity(task: Path, tmp_path: Path) -> None:
    """Invariant (issue 42, item 2): ``harness.env``, a harness's, a provider's and a
    backend's options, and a corpus folder's contents are part of the run key; an option
    the plugin declares result-neutral, and the options left at their defaults, are not,
    so every run that sets none of them keeps the key it had."""
    from spu.config import SandboxConfig

    pytest.importorskip("spu_example_plugin", reason="the example plugin is not installed")

    def key(harness: str = "command", tools: ToolsConfig | None = None,
            sandbox: SandboxConfig | None = None, **fields: object) -> str:
        cfg = HarnessConfig(name=harness, entrypoint=str(REPO / "docs/examples/my_agent.py"),
                            **fields)  # type: ignore[arg-type]
        return run_key(identity_for(ModelConfig(name="random", provider="baseline"), cfg,
                                    EffortConfig(name="none"), tools or ToolsConfig(), task,
                                    "t", "1.0", 0, sandbox=sandbox))

    base = key()
    assert base == key(sandbox=SandboxConfig()) == key(sandbox=SandboxConfig(name="docker"))
    assert key(env={"X": "1"}) not in (base, key(env={"X": "2"}))
    assert key(sandbox=SandboxConfig(options={"pids_limit": 64})) != base
    assert key(sandbox=SandboxConfig(pids_limit=64)) == \
        key(sandbox=SandboxConfig(options={"pids_limit": 64}))  # the flat spelling
    assert key(sandbox=SandboxConfig(options={"pids_limit": 4096})) == base  # its default
    example = key("example")
    assert key("example", options={"strategy": "random"}) != example
    assert key("example", options={"log_level": "debug"}) == example  # result-neutral
    assert key(tools=ToolsConfig(provider="web", options={"search_url": "http://a"})) != \
        key(tools=ToolsConfig(provider="web", options={"search_url": "http://b"}))
    assert key(tools=ToolsConfig(provider="web", options={"api_key_env": "MY_KEY"})) == \
        key(tools=ToolsConfig(provider="web"))  # where the key is, not what is found
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / "sub" / "a.txt").write_text("Amine boranes\n")
    folder = ToolsConfig(provider="example", corpus=str(notes))
    before = key(tools=folder)
    assert before != key(tools=ToolsConfig(provider="example"))
    (notes / "sub" / "a.txt").write_text("Amine boranes, revised\n")
    assert key(tools=folder) != before
    assert key(tools=ToolsConfig(provider="example", corpus=str(notes),
                                 options={"snippet_chars": 50})) != key(tools=folder)


def test_keys_of_runs_that_set_nothing_new_are_unchanged(task: Path) -> None:
    """The fields added for plugins are written, hashed and signed only when set: a
    record without them is the same bytes as before they existed (its run key, its
    seal's signature)."""
    ident = identity_for(ModelConfig(name="random", provider="baseline"),
                         HarnessConfig(name="baseline"), EffortConfig(name="none"),
                         ToolsConfig(), EXAMPLE_TASK, "spu-demo-a", "1.0", 0)
    assert ident.config.env == {} and ident.sandbox_options == {}
    hashed = key_fields(ident)
    assert "env" not in hashed["config"] and "options" not in hashed["config"]
    assert "sandbox_options" not in hashed and "options" not in hashed["tools"]
    assert run_key(ident) == run_key(ident.model_copy(update={"sandbox_options": {}}))


def test_what_a_plugin_changes_is_an_mlflow_param_where_set() -> None:
    """The MLflow params name what the run key hashes: the plugin fields too, where set."""
    from spu.schema import ConfigIdentity, Identity, TaskIdentity
    from spu.tracking.store import identity_params

    task = TaskIdentity(id="t", version="1", task_digest="0" * 64)
    plain = Identity(config=ConfigIdentity(model="m", effort="e", harness="h"), task=task)
    assert not any(k in identity_params(RunRecord.model_construct(identity=plain)) for k in (
        "identity.env", "identity.options", "identity.sandbox_options"))
    changed = plain.model_copy(update={
        "config": ConfigIdentity(model="m", effort="e", harness="h", env={"A": "1"},
                                 options={"strategy": "random"}),
        "sandbox_options": {"pids_limit": 64}})
    params = identity_params(RunRecord.model_construct(identity=changed))
    assert (params["identity.env"], params["identity.options"],
            params["identity.sandbox_options"]) == ('{"A":"1"}', '{"strategy":"random"}',
                                                    '{"pids_limit":64}')
