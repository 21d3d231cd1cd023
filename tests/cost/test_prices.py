"""Cost of known usages at the catalogue's list prices, worked by hand (paper 3.5, Table 7)."""

from __future__ import annotations

import pytest

from spu.config import PriceConfig
from spu.cost import costs_disagree, estimate_cost, request_cost, request_usages, run_cost
from spu.cost.catalogue import ModelConfigError, catalogue_models, load_model_config
from spu.schema import TrajectoryStep, Usage

PAPER_MODELS = ("opus55", "opus5", "sonnet55", "fable51", "astra", "sol61", "deepseek",
                "qwen38", "glm53", "doubao", "hy4", "kimi31")

TABLE_7_USD = {
    # model: (input, cache read, cache write 5-minute, cache write 1-hour, output), USD per
    # million tokens as printed in Table 7; None = n/a; Doubao printed converted to USD.
    "astra": (10.00, 1.00, 12.50, 12.50, 50.00),
    "sol61": (2.00, 0.10, 2.50, 2.50, 10.00),
    "opus55": (4.00, 0.20, 5.00, 8.00, 20.00),
    "opus5": (5.00, 0.50, 6.25, 10.00, 25.00),
    "sonnet55": (2.00, 0.10, 2.50, 4.00, 10.00),
    "deepseek": (0.15, 0.003, None, None, 0.60),
    "qwen38": (2.00, 0.17, 2.50, 2.50, 6.00),
    "glm53": (0.15, 0.03, None, None, 0.50),
    "doubao": (0.893, 0.179, None, None, 4.464),
    "hy4": (0.834, 0.042, None, None, 2.501),
    "kimi31": (2.00, 0.20, None, None, 10.00),
    "fable51": (10.00, 0.25, 12.50, 20.00, 50.00),
}

# One usage for every model: 0.12M uncached input, 2.5M cache reads, 0.3M cache writes of
# which 0.1M at the 1-hour rate, 0.04M output.
USAGE = Usage(input=120_000, cache_read=2_500_000, cache_write=300_000, cache_write_1h=100_000,
              output=40_000)

HAND_COSTS = {
    # input + cache read + (5-minute + 1-hour cache writes) + output, USD
    "opus55": 3.58,      # 0.12x4 + 2.5x0.2 + (0.2x5 + 0.1x8) + 0.04x20 = 0.48+0.5+1.8+0.8
    "opus5": 5.10,       # 0.12x5 + 2.5x0.5 + (0.2x6.25 + 0.1x10) + 0.04x25 = 0.6+1.25+2.25+1.0
    "sonnet55": 1.79,    # 0.12x2 + 2.5x0.1 + (0.2x2.5 + 0.1x4) + 0.04x10 = 0.24+0.25+0.9+0.4
    "fable51": 8.325,    # 0.12x10 + 2.5x0.25 + (0.2x12.5 + 0.1x20) + 0.04x50 = 1.2+0.625+4.5+2
    "astra": 9.45,       # 0.12x10 + 2.5x1 + 0.3x12.5 + 0.04x50 = 1.2+2.5+3.75+2.0
    "sol61": 1.64,       # 0.12x2 + 2.5x0.1 + 0.3x2.5 + 0.04x10 = 0.24+0.25+0.75+0.4 (short rates)
    "deepseek": 0.0945,  # 0.12x0.15 + 2.5x0.003 + 0.3x0.15 (n/a: input) + 0.04x0.6
    #                      = 0.018+0.0075+0.045+0.024
    "qwen38": 1.655,     # 0.12x2 + 2.5x0.17 + 0.3x2.5 + 0.04x6 = 0.24+0.425+0.75+0.24
    "glm53": 0.158,      # 0.12x0.15 + 2.5x0.03 + 0.3x0.15 (n/a) + 0.04x0.5 = 0.018+0.075+0.045+0.02
    "doubao": 1.00,      # CNY 6/1.2/n/a/30: 0.12x6 + 2.5x1.2 + 0.3x6 + 0.04x30 = 0.72+3+1.8+1.2
    #                      = 6.72 CNY, at 6.72 CNY per USD = 1.00 USD
    "hy4": 0.55532,      # 0.12x0.834 + 2.5x0.042 + 0.3x0.834 (n/a) + 0.04x2.501
    #                      = 0.10008+0.105+0.2502+0.10004
    "kimi31": 1.74,      # 0.12x2 + 2.5x0.2 + 0.3x2 (n/a) + 0.04x10 = 0.24+0.5+0.6+0.4
}


def test_catalogue_holds_the_papers_twelve_models() -> None:
    assert set(PAPER_MODELS) <= set(catalogue_models())


@pytest.mark.parametrize("model", PAPER_MODELS)
def test_catalogue_prices_are_table_7(model: str) -> None:
    """The YAML prices, converted to USD, are the ones Table 7 prints (to its 3 decimals)."""
    p = load_model_config(model).prices
    usd = [None if v is None else v / p.units_per_usd
           for v in (p.input, p.cache_read, p.cache_write_5m, p.cache_write_1h, p.output)]
    if usd[3] is None and usd[2] is not None:
        usd[3] = usd[2]  # no separate 1-hour rate: the 5-minute one applies
    for got, printed in zip(usd, TABLE_7_USD[model], strict=True):
        if printed is None:
            assert got is None
        else:
            assert got == pytest.approx(printed, abs=5e-4)


@pytest.mark.parametrize("model", PAPER_MODELS)
def test_cost_of_known_usage_equals_hand_computed(model: str) -> None:
    cost = estimate_cost(load_model_config(model).prices, USAGE)
    assert cost.total == pytest.approx(HAND_COSTS[model], rel=1e-12)


def test_buckets_of_doubao_are_converted_from_yuan() -> None:
    cost = estimate_cost(load_model_config("doubao").prices, USAGE)
    # 0.72, 3.0, 1.8 and 1.2 CNY at 6.72 CNY per USD
    assert cost.input == pytest.approx(0.72 / 6.72, rel=1e-12)
    assert cost.cache_read == pytest.approx(3.0 / 6.72, rel=1e-12)
    assert cost.cache_write == pytest.approx(1.8 / 6.72, rel=1e-12)
    assert cost.output == pytest.approx(1.2 / 6.72, rel=1e-12)


def test_sol_requests_above_272k_use_long_context_rates() -> None:
    prices = load_model_config("sol61").prices
    short = Usage(input=10_000, cache_read=200_000, cache_write=2_000, output=3_000)
    long = Usage(input=20_000, cache_read=250_000, cache_write=30_000, output=5_000)
    # short (212,000 prompt tokens): 0.01x2 + 0.2x0.1 + 0.002x2.5 + 0.003x10 = 0.075
    # long (300,000 > 272,000): 0.02x4 + 0.25x0.2 + 0.03x5 + 0.005x15 = 0.355
    cost = estimate_cost(prices, short + long, [short, long])
    assert cost.total == pytest.approx(0.43, rel=1e-12)
    assert cost.long_context_requests == 1
    # The same usage as one aggregate has no request to compare: short rates throughout,
    # 0.03x2 + 0.45x0.1 + 0.032x2.5 + 0.008x10 = 0.06+0.045+0.08+0.08 = 0.265.
    assert estimate_cost(prices, short + long).total == pytest.approx(0.265, rel=1e-12)


def test_threshold_is_exclusive() -> None:
    prices = load_model_config("sol61").prices
    at = Usage(input=22_000, cache_read=250_000)  # exactly 272,000: short rates
    above = Usage(input=22_001, cache_read=250_000)
    assert request_cost(prices, at).long_context_requests == 0
    assert request_cost(prices, above).long_context_requests == 1
    # 0.022x2 + 0.25x0.1 = 0.069; 0.022001x4 + 0.25x0.2 = 0.138004
    assert request_cost(prices, at).total == pytest.approx(0.069, rel=1e-12)
    assert request_cost(prices, above).total == pytest.approx(0.138004, rel=1e-12)


def test_usage_beyond_the_recorded_requests_is_billed_at_short_rates() -> None:
    prices = load_model_config("sol61").prices
    long = Usage(input=300_000, output=1_000)  # 0.3x4 + 0.001x15 = 1.215
    total = long + Usage(input=100_000)        # + 0.1x2 = 0.2
    assert estimate_cost(prices, total, [long]).total == pytest.approx(1.415, rel=1e-12)


def test_one_hour_cache_writes_use_their_rate() -> None:
    prices = load_model_config("opus5").prices
    five = Usage(cache_write=1_000_000)
    hour = Usage(cache_write=1_000_000, cache_write_1h=1_000_000)
    assert estimate_cost(prices, five).total == pytest.approx(6.25)
    assert estimate_cost(prices, hour).total == pytest.approx(10.0)


def test_no_cache_write_price_bills_writes_as_input() -> None:
    """Table 7 n/a: tokens not read from the cache are billed at the input price."""
    prices = load_model_config("kimi31").prices
    writes = estimate_cost(prices, Usage(cache_write=1_000_000, cache_write_1h=400_000))
    assert writes.cache_write == pytest.approx(2.0)


def test_full_input_price_variant() -> None:
    """Paper 3.5 sensitivity: every prompt token at the full input price."""
    opus5 = load_model_config("opus5").prices
    # 2.92M prompt tokens x 5 + 0.04M x 25 = 14.6 + 1.0 = 15.6
    assert estimate_cost(opus5, USAGE, full_input_price=True).total == pytest.approx(15.6)
    doubao = load_model_config("doubao").prices
    # 2.92 x 6 + 0.04 x 30 = 18.72 CNY = 18.72 / 6.72 USD
    assert estimate_cost(doubao, USAGE, full_input_price=True).total == pytest.approx(
        18.72 / 6.72, rel=1e-12)
    sol = load_model_config("sol61").prices
    long = Usage(input=20_000, cache_read=250_000, cache_write=30_000, output=5_000)
    # long request: 0.3M x 4 + 0.005 x 15 = 1.275
    assert estimate_cost(sol, long, [long], full_input_price=True).total == pytest.approx(1.275)


def test_baselines_cost_nothing() -> None:
    assert estimate_cost(PriceConfig(), USAGE).total == 0.0


def test_request_usages_count_a_message_once() -> None:
    u1, u2 = Usage(input=1, output=1), Usage(input=5, output=9)
    steps = [
        TrajectoryStep(index=0, message_id="a", usage=Usage(input=1, output=1)),
        TrajectoryStep(index=1, message_id="a", usage=u1),   # same request, final usage
        TrajectoryStep(index=2, usage=None),
        TrajectoryStep(index=3, message_id=None, usage=u2),
    ]
    assert request_usages(steps) == [u1, u2]


@pytest.mark.parametrize(("ours", "cli", "flag"), [
    (1.0, 1.0, False), (1.0099, 1.0, False), (1.0101, 1.0, True), (0.98, 1.0, True),
    (0.0, 0.0, False), (0.1, 0.0, True),
])
def test_cli_cost_disagreement_above_one_percent(ours: float, cli: float, flag: bool) -> None:
    assert costs_disagree(ours, cli) is flag


def test_run_cost_flags_disagreement_and_request_mismatch() -> None:
    prices = load_model_config("sonnet55").prices
    usage = Usage(input=1_000_000)  # 2.00 USD
    agreed = run_cost(prices, usage, [usage], cli_cost_usd=2.01)
    assert not agreed.disagreement and agreed.notes == ()
    off = run_cost(prices, usage, [Usage(input=500_000)], cli_cost_usd=2.5)
    assert off.disagreement
    assert any("differs from the CLI" in n for n in off.notes)
    assert any("differs from its total" in n for n in off.notes)
    assert off.estimate.total == pytest.approx(2.0)


def test_model_config_errors_name_file_and_key(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nprovider: y\nprices:\n  inptu: 3\n")
    with pytest.raises(ModelConfigError, match=r"bad\.yaml: key 'prices\.inptu'"):
        load_model_config(str(bad))
    with pytest.raises(ModelConfigError, match="no such model configuration"):
        load_model_config("no-such-model")
    zero = tmp_path / "zero.yaml"
    zero.write_text("name: x\nprovider: y\nprices:\n  currency: CNY\n  units_per_usd: 0\n")
    with pytest.raises(ModelConfigError, match=r"zero\.yaml: key 'prices\.units_per_usd'"):
        load_model_config(str(zero))
