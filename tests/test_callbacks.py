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


def test_a_row_carries_no_control_sequence_and_no_markup() -> None:
    """Invariant (issue 41, V3): a cell of the results table (a task folder's name, a
    note of why a run failed) prints as text: control characters escaped, markup shown."""
    from spu.callbacks import summary_table

    row = _row("baseline", "cfg[link=http://127.0.0.1:8765/x]")
    row.update(task="t\x1b[2J\x1b]0;pwned\x07", status="not_launched",
               note="lost: \x1b[32mvalid · score 0.991\x9b2J")
    console = Console(width=400, record=True, force_terminal=True)
    console.print(results_table([row], "run"))
    console.print(summary_table([row]))
    styled = console.export_text(styles=True, clear=False)
    assert "\x1b[2J" not in styled and "\x1b]" not in styled and "\x9b" not in styled
    text = console.export_text()
    assert "t\\x1b[2J\\x1b]0;pwned\\x07" in text and "\\x1b[32mvalid" in text
    assert "cfg[link=http://127.0.0.1:8765/x]" in text
