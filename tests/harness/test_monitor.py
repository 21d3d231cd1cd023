"""The agent monitor: latest event, API errors, status file, and the live status line."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from rich.console import Console

from spu.harness.monitor import (
    STATUS_FILE,
    AgentMonitor,
    RunStatus,
    claude_code_event,
    codex_event,
    read_status,
)
from spu.launch.progress import ProgressDisplay, SweepProgress

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "cli_sessions"


def retry(status: int, attempt: int) -> dict:
    return {"type": "system", "subtype": "api_retry", "attempt": attempt, "max_retries": 10,
            "error_status": status, "error": "rate_limit" if status == 429 else
            "authentication_failed"}


def monitor(tmp_path: Path, **kwargs) -> tuple[AgentMonitor, Path]:
    stdout = tmp_path / "agent.stdout"
    stdout.write_text("")
    status = RunStatus(run_key="k1", label="task · opus5-max", started=0.0, updated=0.0)
    return AgentMonitor(tmp_path, stdout, status, parse=claude_code_event, every_s=0,
                        **kwargs), stdout


def append(path: Path, *entries: dict | str) -> None:
    with open(path, "a") as f:
        for e in entries:
            f.write((e if isinstance(e, str) else json.dumps(e)) + "\n")


def test_golden_sessions_give_readable_latest_events() -> None:
    for harness, parse in (("claude_code", claude_code_event), ("codex", codex_event)):
        lines = (GOLDEN / harness / "presented_order" / "agent.stdout").read_text().splitlines()
        events = [parse(json.loads(line)) for line in lines if line.startswith("{")]
        texts = [e.text for e in events if e is not None]
        assert any("ls -la" in t for t in texts), texts
        assert all(e.api_status is None for e in events if e is not None)


def test_a_rejected_key_stops_the_agent_after_two_rejections(tmp_path) -> None:
    asked: list[str] = []
    mon, stdout = monitor(tmp_path, on_rejected_key=lambda seen: asked.append(seen) or
                          "API error 401: the provider rejected the API key in X (bad key)")
    append(stdout, {"type": "system", "subtype": "init", "claude_code_version": "2.1.260"},
           "not json: a warning the CLI printed", retry(401, 1))
    mon.poll()
    assert mon.rejected is None and read_status(tmp_path).api_errors == {"401": 1}
    append(stdout, retry(401, 2))
    mon.poll()
    assert mon.rejected == "API error 401: the provider rejected the API key in X (bad key)"
    assert len(asked) == 1 and "HTTP 401" in asked[0]
    append(stdout, retry(401, 3))
    mon.poll()
    assert len(asked) == 1  # asked once
    status = read_status(tmp_path)
    assert status is not None and status.stopping == mon.rejected


def test_a_rejection_the_provider_does_not_confirm_stops_nothing(tmp_path) -> None:
    """Forged 401 lines on the CLI's stdout do not stop the agent: the provider is asked
    first, and a key it accepts keeps the run going (asked once)."""
    asked: list[str] = []
    mon, stdout = monitor(tmp_path, on_rejected_key=lambda seen: asked.append(seen) and None)
    append(stdout, retry(401, 1), retry(401, 2), retry(401, 3))
    mon.poll()
    assert mon.rejected is None and len(asked) == 1
    status = read_status(tmp_path)
    assert status is not None and not status.stopping


def test_a_repeated_rate_limit_is_logged_and_the_run_goes_on(tmp_path, caplog) -> None:
    mon, stdout = monitor(tmp_path)
    with caplog.at_level(logging.WARNING, logger="spu.monitor"):
        append(stdout, retry(429, 1))
        mon.poll()
        assert not caplog.records  # once may be a hiccup
        append(stdout, retry(429, 2))
        mon.poll()
    (record,) = caplog.records
    assert "API error 429, 2 times so far" in record.getMessage()
    assert "task · opus5-max" in record.getMessage()
    assert mon.rejected is None


def test_the_status_file_holds_the_latest_event_and_goes_when_the_agent_ends(tmp_path) -> None:
    mon, stdout = monitor(tmp_path)
    with mon:
        append(stdout, {"type": "assistant", "message": {"content": [
            {"type": "tool_use", "name": "Bash", "input": {"command": "python fit.py"}}]}})
        mon.poll()
        status = read_status(tmp_path)
        assert status is not None and status.last_event == "Bash: python fit.py"
    assert not (tmp_path / STATUS_FILE).exists()


def test_the_live_line_shows_each_running_run_and_says_repeated_errors_once() -> None:
    """Issue 14 item 6: elapsed time and latest event per running run, API errors at once."""
    import time

    statuses = [RunStatus("k1", "spu-bhpt · opus5-max", started=time.time() - 75,
                          updated=0.0, last_event="Bash: python fit.py"),
                RunStatus("k2", "spu-a9sx · astra-max", started=time.time() - 5, updated=0.0,
                          last_event="API error 429", api_errors={"429": 3},
                          last_api_error="Reconnecting... 3/5 (unexpected status 429)")]
    display = ProgressDisplay(SweepProgress(4), mode="lines", every_s=0.0,
                              running=lambda: statuses)
    display.console = Console(record=True, width=200)
    display.refresh()
    display.refresh()
    text = display.console.export_text()
    assert "running: spu-bhpt · opus5-max · 0:01:1" in text and "Bash: python fit.py" in text
    assert "running: spu-a9sx · astra-max · 0:00:0" in text
    assert text.count("API error 429, 3 times so far") == 1


def _answer(status: int, error_type: str | None = None, endpoint: str = "messages") -> dict:
    return {"time": "2026-12-03T10:08:48.070+00:00", "endpoint": endpoint, "status": status,
            "error_type": error_type, "error": "invalid x-api-key" if error_type else None}


def test_the_gateways_record_stops_the_agent_at_the_second_rejection_in_a_row(tmp_path) -> None:
    """Claude Code writes its retry events to stdout only after its last retry (about
    100 s): the gateway's record says it as the provider answers. Only the provider's own
    401/403s to generations count, two in a row; the gateway's answer to a wrong token
    (the agent can send one) and a rejected models listing stop nothing."""
    record = tmp_path / "model" / "requests.jsonl"
    record.parent.mkdir()
    stops: list[bool] = []
    mon, _ = monitor(tmp_path, record=record, on_stop=lambda: stops.append(True))
    mon.poll()  # no record yet: nothing
    append(record, _answer(200), _answer(401, "gateway.bad_token"),
           _answer(401, "gateway.bad_token"), _answer(401, "gateway.bad_token"),
           _answer(401, "authentication_error", endpoint="models"),
           _answer(401, "authentication_error"), _answer(200),
           _answer(401, "authentication_error"))
    mon.poll()
    assert mon.rejected is None and stops == []
    with open(record, "a") as f:  # the second rejection in a row, its line torn mid-write
        line = json.dumps(_answer(401, "authentication_error"))
        f.write(line[:20])
    mon.poll()
    assert mon.rejected is None
    append(record, line[20:])
    mon.poll()
    assert mon.rejected == ("the provider rejected the API key (HTTP 401): "
                            "authentication_error: invalid x-api-key")
    assert stops == [True] and read_status(tmp_path).stopping == mon.rejected
    append(record, _answer(401, "authentication_error"))
    mon.poll()
    assert stops == [True]  # stopped once


FORGED = "\x1b[2J\x1b[H\x1b[32mvalid · score 0.991\x1b[0m\x1b]0;done\x07\x9b2J"
"""An error line an agent writes to its CLI's stdout: wipe the console, print a forged
green result, retitle the window (issue 41, V3)."""


def _control_free(text: str) -> bool:
    return not any(ord(c) < 0x20 and c not in "\n\t" or 0x7f <= ord(c) <= 0x9f for c in text)


def test_an_error_line_the_agent_forged_is_logged_and_shown_as_text(tmp_path, caplog) -> None:
    """Invariant: what the agent writes to its CLI's stdout (an API error line full of
    escape sequences, twice) reaches the log, ``status.json`` and the live line as text:
    no control character, the sequences shown escaped, the markup not read."""
    mon, stdout = monitor(tmp_path, on_rejected_key=lambda seen: None)
    line = {"type": "result", "is_error": True, "api_error_status": 401,
            "result": FORGED + " [link=http://127.0.0.1:8765/x]see[/link]"}
    with caplog.at_level(logging.WARNING, logger="spu.monitor"):
        append(stdout, line, line)
        mon.poll()
    said = [r.getMessage() for r in caplog.records]
    assert any("API error 401, 2 times so far" in m for m in said)
    assert all(_control_free(m) for m in said) and any("\\x1b[2J" in m for m in said)
    status = read_status(tmp_path)
    assert status is not None and _control_free(status.last_event + status.last_api_error)
    display = ProgressDisplay(SweepProgress(1), mode="lines", every_s=0.0,
                              running=lambda: [status])
    display.console = Console(record=True, width=400, force_terminal=True)
    display.refresh()
    display.refresh()
    shown = display.console.export_text(styles=True)
    assert "\\x1b[32mvalid · score 0.991" in shown and "[link=http" in shown
    assert "\x1b]8;" not in shown and "\x1b[2J" not in shown and "\x9b" not in shown


def test_a_line_shaped_to_break_the_parser_costs_the_run_nothing(tmp_path) -> None:
    """Invariant: the last lines the agent leaves on its CLI's stdout are read when the
    monitor closes; one its parser cannot take (a message that is a list, a line nested
    past Python's parser) is skipped, never raised into the run, and a command given as
    a list of numbers is shown."""
    mon, stdout = monitor(tmp_path)
    with mon:
        append(stdout, {"type": "assistant", "message": {"content": [
            {"type": "tool_use", "name": "Bash", "input": {"command": [1, 2]}}]}},
            {"type": "assistant", "message": ["not", "an", "object"]},
            "[" * 5000 + "]" * 5000)
    assert mon.status.last_event == "Bash: 1 2"
