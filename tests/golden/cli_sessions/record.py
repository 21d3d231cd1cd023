"""Re-record the golden CLI session files: ``.venv/bin/python tests/golden/cli_sessions/record.py``.

Runs the real Claude Code and Codex CLIs (the versions pinned in ``conf/harness``) in
the default sandbox against the scripted model server, one run per scenario, on the
example task, and keeps what the parsers read: the CLI's session folder, its stdout
and the server's log of the usage it reported. Needs npm (the CLIs install once).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import yaml

from spu.config import EffortConfig, HarnessConfig, LimitsConfig, ModelConfig, PriceConfig
from spu.runner import RunSpec, run_one

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
SCENARIOS = {
    "claude_code": ("presented_order", "subagent", "refusal", "api_error"),
    "codex": ("presented_order", "refusal", "api_error"),
}
SESSION_FOLDERS = {"claude_code": ".claude/projects", "codex": ".codex/sessions"}


def _load(cls: type, path: Path) -> object:
    data = yaml.safe_load(path.read_text())
    if "prices" in data:
        data["prices"] = PriceConfig(**data["prices"])
    return cls(**data)


def record(harness: str, script: str, out_root: Path) -> None:
    """Run one scenario and copy its session files next to this script."""
    model = _load(ModelConfig, REPO / "conf/model/scripted.yaml")
    model.api_model = script
    spec = RunSpec(
        model=model,
        harness=_load(HarnessConfig, REPO / f"conf/harness/{harness}.yaml"),
        effort=_load(EffortConfig, REPO / "conf/effort/max.yaml"),
        task_dir=REPO / "tasks/example-coupling-conditions",
        output_root=out_root,
        limits=LimitsConfig(time_s=300),
    )
    record = run_one(spec)
    run_dir = out_root / "runs" / record.run_key
    dest = HERE / harness / script
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    source = run_dir / "workspace" / SESSION_FOLDERS[harness]
    shutil.copytree(source, dest / Path(SESSION_FOLDERS[harness]).name)
    for name in ("agent.stdout", "scripted_server.jsonl"):
        shutil.copy(run_dir / "logs" / name, dest / name)
    print(f"{harness}/{script}: {record.outcome.value}, usage {record.usage}")


def main() -> int:
    """Record every scenario (or those named on the command line as harness/script)."""
    wanted = set(sys.argv[1:])
    with tempfile.TemporaryDirectory() as tmp:
        for harness, scripts in SCENARIOS.items():
            for script in scripts:
                if not wanted or f"{harness}/{script}" in wanted:
                    record(harness, script, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
