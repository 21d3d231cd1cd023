"""A ledger line torn by a crash mid-append is repaired by the next append, which says so."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from spu.seal.keys import load_public_key, public_key_path, signing_key
from spu.seal.ledger import append_entry, ledger_path
from spu.seal.verify import read_ledger


def _chain(root: Path, n: int) -> None:
    key = signing_key(root)
    for i in range(n):
        append_entry(root, key, run_key=f"r{i}", manifest_sha256="0" * 64, time="t")


def _faults(root: Path) -> tuple[int, list[str]]:
    entries, faults, _ = read_ledger(root, load_public_key(public_key_path(root)))
    return len(entries), faults


def test_a_torn_tail_is_cut_off_kept_aside_and_the_chain_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "outputs"
    _chain(root, 2)
    path = ledger_path(root)
    with open(path, "ab") as f:
        f.write(b'{"seq":3,"run_key":"r2","manif')  # the crash: half a line
    assert _faults(root)[1] == ["ledger.jsonl: the last line is incomplete"]
    with caplog.at_level(logging.WARNING, logger="spu.seal.ledger"):
        _chain(root, 1)
    assert "incomplete (a crash mid-append)" in caplog.text and ".torn" in caplog.text
    assert _faults(root) == (3, [])
    assert (path.with_name("ledger.jsonl.torn").read_bytes()
            == b'{"seq":3,"run_key":"r2","manif\n')


def test_a_whole_last_line_without_its_newline_gets_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "outputs"
    _chain(root, 2)
    path = ledger_path(root)
    path.write_bytes(path.read_bytes()[:-1])  # the newline was never written
    with caplog.at_level(logging.WARNING, logger="spu.seal.ledger"):
        _chain(root, 1)
    assert "lacked its newline" in caplog.text
    assert _faults(root) == (3, [])
    assert not path.with_name("ledger.jsonl.torn").exists()
