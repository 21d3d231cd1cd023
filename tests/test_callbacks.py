"""The results table printed when a run or a sweep ends."""

from __future__ import annotations

from rich.console import Console

from spu.callbacks import results_table


def _row(harness: str, config: str) -> dict:
    return {"task": "example-coupling-conditions", "model": "scripted", "effort": "none",
            "harness": harness, "config": config, "repeat": 0, "outcome": "valid",
            "score": 0.214, "threshold": 0.643, "runtime_s": 12.0, "status": "ran"}


def test_results_table_tells_harnesses_apart_by_column_and_config_label() -> None:
    """Issue 14 item 7: scripted Claude Code and Codex runs must not look identical."""
    rows = [_row("claude_code", "scripted-none"), _row("codex", "scripted-none-codex")]
    console = Console(width=200, record=True)
    console.print(results_table(rows, "sweep"))
    text = console.export_text()
    header = next(line for line in text.splitlines() if "task" in line and "outcome" in line)
    assert "harness" in header and "config" in header
    lines = [line for line in text.splitlines() if "example-coupling-conditions" in line]
    assert len(lines) == 2 and lines[0] != lines[1]
    assert any("claude_code" in line and "scripted-none " in line for line in lines)
    assert any("codex" in line and "scripted-none-codex" in line for line in lines)


def test_rows_without_a_config_label_fall_back_to_model_and_effort() -> None:
    row = _row("baseline", "")
    del row["config"]
    console = Console(width=200, record=True)
    console.print(results_table([row], "run"))
    assert "scripted-none" in console.export_text()
