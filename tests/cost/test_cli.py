"""``spu cost estimate`` (SPEC section 6)."""

from __future__ import annotations

import json

import pytest

from spu.cli import main
from tests.conftest import run_module


def _estimate(capsys, *args: str) -> dict:
    assert main(["cost", "estimate", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_output_is_model_cost_and_breakdown(capsys) -> None:
    # Opus 5: 1M input x 5 + 2M cache reads x 0.5 + 0.1M writes x 6.25 + 0.2M output x 25
    #       = 5 + 1 + 0.625 + 5 = 11.625 USD
    out = _estimate(capsys, "--model", "opus5", "--input", "1000000", "--cache-read",
                    "2000000", "--cache-write", "100000", "--output", "200000")
    assert set(out) == {"model", "cost_usd", "breakdown"}
    assert out["model"] == "opus5"
    assert out["cost_usd"] == pytest.approx(11.625, rel=1e-12)
    assert out["breakdown"] == pytest.approx(
        {"input": 5.0, "cache_read": 1.0, "cache_write": 0.625, "output": 5.0}, rel=1e-12)


def test_one_hour_ttl_long_context_and_full_price(capsys) -> None:
    # 0.1M cache writes at the 1-hour rate of Opus 5 (10.00) = 1.0
    out = _estimate(capsys, "--model", "opus5", "--cache-write", "100000",
                    "--cache-write-ttl", "1h")
    assert out["cost_usd"] == pytest.approx(1.0)
    # Sol long-context: 0.1M x 4 + 0.2M x 0.2 + 0.01M x 5 + 0.005M x 15 = 0.4+0.04+0.05+0.075
    out = _estimate(capsys, "--model", "sol61", "--input", "100000", "--cache-read", "200000",
                    "--cache-write", "10000", "--output", "5000", "--long-context")
    assert out["cost_usd"] == pytest.approx(0.565, rel=1e-12)
    # Doubao, every prompt token at 6 CNY: 3M x 6 = 18 CNY = 18 / 6.72 USD
    out = _estimate(capsys, "--model", "doubao", "--input", "1000000", "--cache-read",
                    "2000000", "--full-input-price")
    assert out["cost_usd"] == pytest.approx(18 / 6.72, rel=1e-12)


def test_errors_exit_2_with_a_reason(capsys) -> None:
    assert main(["cost", "estimate", "--model", "nope", "--input", "1"]) == 2
    assert "nope.yaml: no such model configuration" in capsys.readouterr().err
    assert main(["cost", "estimate", "--model", "opus5", "--long-context"]) == 2
    assert "no long-context rates" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["cost", "estimate", "--model", "opus5", "--input", "-5"])


def test_console_script_prints_a_table() -> None:
    out = run_module(["spu", "cost", "estimate", "--model", "kimi31", "--input", "1,000,000"])
    assert out.returncode == 0, out.stderr
    assert "2.000000 USD" in out.stdout
