"""Paths and expectations of the recorded CLI sessions in ``tests/golden/cli_sessions``."""

from __future__ import annotations

import json
from pathlib import Path

from spu.schema import Usage
from spu.scripted import reported_usage

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "cli_sessions"


def scenario(harness: str, name: str) -> Path:
    """Folder of one recorded run (``tests/golden/cli_sessions/<harness>/<name>``)."""
    return GOLDEN / harness / name


def server_usage(folder: Path) -> Usage:
    """What the scripted server reported during the recorded run."""
    return reported_usage(folder / "scripted_server.jsonl")


def json_lines(path: Path) -> list[dict]:
    """The JSON lines of a file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
