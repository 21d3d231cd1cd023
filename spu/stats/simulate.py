"""Runs tables with the paper's structure, drawn from known parameters.

The simulator checks the statistics (their estimates must recover the parameters within
their intervals at the stated rate) and feeds the benchmark and the report demo. Its
default parameters follow the paper: thirteen configurations with the task-adjusted
means of Table 1, the outcomes of Table 6 (coverage gaps: Opus 5.5 scored on 44 public
tasks, Fable 5.1 on 30, refusing mostly medicine, biology and chemistry), the private
coverage of Table 2, the costs of Table 3, 100 public tasks (39 chemistry, 29 materials
science, 20 biology, 12 medicine) and 16 private ones, and five repeats of Astra Max on
one task of each of the 29 subfields (137 of 145 scored).

The score model is ``y_tc = alpha_c + mu_t + g_tc + e_tcr`` with task effects
``mu_t ~ N(0, task_sd)``, configuration-by-task effects ``g_tc ~ N(0, interaction_sd)``
(shared by the repeats of a configuration on a task) and run noise
``e ~ N(0, within_sd)``, clipped to [-1, 1]; the official run and the repeats of a
configuration on a task share ``g_tc``. With ``interaction_sd = 0`` (the default)
the additive model holds, the task-adjusted mean of a configuration estimates
``alpha_c``, and the repeats have within-task SD ``within_sd``, task SD ``task_sd`` and
intraclass correlation ``task_sd^2 / (task_sd^2 + within_sd^2)``.

Planted effects, each zero by default, let a test check that a statistic finds what was
put in at its nominal rate: ``recovered_effect`` (recovered files score higher, paper 3.2),
``exposure_effect`` (flagged runs score higher, 3.7), ``refusal_difficulty`` (refusals fall
on easier or harder tasks, 3.3), ``discipline_effects`` (a configuration does better in one
discipline, 4.6), ``interaction_sd`` (configuration-by-task interaction, 4.4) and
``stop_clustering`` (policy stops of the repeats concentrate on some tasks, 3.6).

``python -m spu.stats.simulate OUT.csv [--seed S] [--study DIR]`` writes one table, in the
runs-table format of :mod:`spu.schema` (the format ``spu runs export`` writes); with
``--study`` also the task packages and run folders its scores come from
(:func:`simulate_study`), each scored run folder with a seeded trajectory that
``spu analyze`` reads.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from spu.stats.resampling import rng_for

REFUSAL_WEIGHT = (("chemistry", 0.6), ("materials science", 0.05), ("biology", 0.9),
                  ("medicine", 1.0))
"""Relative propensity to refuse a task of each discipline (paper 3.2, Figure 7b)."""


@dataclass(frozen=True)
class SimulatedConfig:
    """One configuration of the simulation and its true parameters."""

    label: str
    """Configuration label (the ``config`` column)."""
    model: str
    """Model name (``conf/model``)."""
    harness: str
    """Harness name."""
    effort: str
    """Reasoning effort."""
    mean: float
    """True task-adjusted mean ``alpha_c`` (the task effects average 0)."""
    excluded_public: tuple[tuple[str, int], ...] = ()
    """Unscored official public runs by outcome (Table 6)."""
    recovered_public: int = 0
    """Scored public runs whose file was rejected for format and recovered (Table 6)."""
    private_scored: int = 16
    """Scored private tasks (Table 2)."""
    private_excluded_outcome: str = "refusal"
    """Outcome of the unscored private runs."""
    cost_usd: float = 1.0
    """Mean cost of a scored run (Table 3)."""
    prompt_mtokens: float = 10.0
    """Mean prompt tokens of a scored run, millions."""
    cache_read_share: float = 0.95
    """Share of prompt tokens read from the cache."""
    output_mtokens: float = 0.2
    """Mean output tokens, millions."""
    runtime_h: float = 2.0
    """Mean run time, hours."""
    flagged_public: int = 0
    """Official public runs flagged by the exposure detector (paper E.4)."""


def _c(label: str, model: str, harness: str, effort: str, mean: float,
       excluded: dict[str, int], recovered: int, private: int, cost: float, prompt: float,
       cache: float, output: float, hours: float, private_outcome: str = "refusal",
       flagged: int = 0) -> SimulatedConfig:
    return SimulatedConfig(label, model, harness, effort, mean, tuple(excluded.items()),
                           recovered, private, private_outcome, cost, prompt, cache, output,
                           hours, flagged)


PAPER_CONFIGS: tuple[SimulatedConfig, ...] = (
    _c("Opus 5.5", "opus55", "claude_code", "max", 0.478, {"refusal": 56}, 0, 3,
       24.11, 25.6, 0.93, 0.49, 2.74, flagged=1),
    _c("Astra Medium", "astra", "codex", "medium", 0.431, {}, 0, 12, 9.59, 5.1, 0.96, 0.05,
       0.46, flagged=3),
    _c("Opus 5", "opus5", "claude_code", "max", 0.424, {"refusal": 1}, 18, 14,
       37.44, 35.4, 0.96, 0.46, 3.81, flagged=8),
    _c("Fable 5.1", "fable51", "claude_code", "max", 0.421, {"refusal": 69, "policy_stop": 1},
       0, 2, 36.42, 10.8, 0.80, 0.15, 1.55, flagged=2),
    _c("Astra Max", "astra", "codex", "max", 0.409, {}, 0, 12, 65.91, 30.4, 0.95, 0.34, 2.90,
       flagged=1),
    _c("Sonnet 5.5", "sonnet55", "claude_code", "max", 0.393, {"refusal": 1, "no_file": 2}, 0,
       11, 9.80, 20.7, 0.94, 0.49, 2.63, flagged=4),
    _c("Doubao", "doubao", "claude_code", "max", 0.315, {}, 33, 16, 3.51, 14.8, 0.97, 0.13, 2.42,
       flagged=23),
    _c("GPT-6.1 Sol", "sol61", "codex", "max", 0.308,
       {"refusal": 2, "policy_stop": 3, "memory_limit": 1}, 0, 11, 12.55, 34.0, 0.93, 0.31, 4.19,
       flagged=12),
    _c("Kimi-K3.1-Pro", "kimi31", "claude_code", "max", 0.296, {"policy_stop": 3, "no_file": 2},
       4, 15, 4.61, 15.9, 0.96, 0.15, 1.92, private_outcome="policy_stop", flagged=19),
    _c("DeepSeek", "deepseek", "claude_code", "max", 0.254, {}, 3, 16, 0.22, 13.0, 0.99, 0.25,
       1.02, flagged=3),
    _c("HY4", "hy4", "claude_code", "max", 0.245, {}, 12, 16, 1.67, 15.1, 0.96, 0.21, 2.29,
       flagged=17),
    _c("GLM-5.3", "glm53", "claude_code", "max", 0.239, {"refusal": 1, "policy_stop": 1}, 16, 16,
       0.64, 15.4, 0.97, 0.23, 2.41, flagged=9),
    _c("Qwen3.8", "qwen38", "claude_code", "max", 0.227, {"policy_stop": 2}, 8, 15, 4.26, 10.7,
       0.94, 0.17, 2.15, private_outcome="timeout", flagged=8),
)
"""The thirteen configurations of the paper (Tables 1, 2, 3 and 6; flags of E.4)."""



DEPARTURE_COUNTS: tuple[tuple[str, int], ...] = (
    ("object_keyed_by_group", 38), ("alternative_order_key", 31),
    ("alternative_top_level_key", 20), ("alternative_group_key", 4), ("renamed_identity", 1))
"""Formatting-rejected public files of each departure type of appendix E.1."""

CACHE_READ_PRICE_RATIO = 0.1
"""Cache-read price as a share of the input price, for the full-input cost (paper 3.5)."""


@dataclass(frozen=True)
class SimulationParameters:
    """Everything the simulated runs table is drawn from."""

    configs: tuple[SimulatedConfig, ...] = PAPER_CONFIGS
    """The configurations."""
    public_tasks: tuple[tuple[str, int, int], ...] = (
        ("chemistry", 39, 10), ("materials science", 29, 9), ("biology", 20, 7),
        ("medicine", 12, 3))
    """Public tasks per discipline: (discipline, tasks, subfields) (paper 2.2, 3.6)."""
    private_tasks: tuple[tuple[str, int], ...] = (
        ("biology", 8), ("chemistry", 3), ("materials science", 2), ("medicine", 3))
    """Private tasks per discipline: VHH, reaction conditions, electrolytes, Magrolimab."""
    task_sd: float = 0.219
    """SD of the task effects ``mu_t``."""
    within_sd: float = 0.150
    """SD of the run-to-run noise."""
    interaction_sd: float = 0.0
    """SD of the configuration-by-task effects."""
    repeat_config: str = "Astra Max"
    """Configuration with repeated runs."""
    repeats: int = 5
    """Repeated runs per sampled task."""
    repeat_excluded: tuple[tuple[str, int], ...] = (("policy_stop", 6), ("no_file", 2))
    """Unscored repeated runs by outcome (paper 3.6: 137 of 145 scored)."""
    repeat_scored_stops: int = 14
    """Repeated runs that stopped under the information policy and left a file (paper 3.6)."""
    stop_clustering: float = 0.0
    """SD of the log propensity of a task's repeats to stop (0: stops fall at random)."""
    clip: bool = True
    """Clip scores to [-1, 1] as real scores are."""
    median_items: tuple[tuple[str, float], ...] = (
        ("chemistry", 15.0), ("materials science", 13.5), ("biology", 47.0), ("medicine", 18.0))
    """Median experiments per task by discipline (paper 4.6)."""
    cost_spread: float = 0.6
    """SD of log cost, tokens and run time around their configuration means."""
    recovered_effect: float = 0.0
    """Score added to every recovered (formatting-rejected) file."""
    exposure_effect: float = 0.0
    """Score added to every run flagged by the exposure detector."""
    repeat_exposure_rate: float = 0.03
    """Share of repeated runs flagged by the exposure detector."""
    doi_share: float = 0.4
    """Share of flagged runs whose tool outputs held the source DOI (paper 3.7: 46 of 110)."""
    outside_rate: float = 0.25
    """Share of runs sending requests outside the audited tools (paper 3.7: about a quarter)."""
    refusal_difficulty: float = 0.0
    """Log propensity to refuse per task-effect SD: positive refuses the easier tasks."""
    discipline_effects: tuple[tuple[str, str, float], ...] = ()
    """(configuration, discipline, score added): configuration-by-discipline effects."""

    def icc(self) -> float:
        """True intraclass correlation of the repeated runs."""
        between = self.task_sd**2 + self.interaction_sd**2
        return between / (between + self.within_sd**2)


def _weighted_sample(rng: np.random.Generator, weights: np.ndarray, k: int) -> np.ndarray:
    """``k`` distinct indices drawn with probability proportional to ``weights``."""
    if k <= 0:
        return np.zeros(0, dtype=int)
    keys = np.log(np.maximum(weights, 1e-12)) + rng.gumbel(size=weights.size)
    return np.argsort(-keys)[:k]


def _threshold(n_items: np.ndarray) -> np.ndarray:
    # The 95th percentile of Spearman's rho under random order, one group, normal approximation.
    return np.minimum(1.0, 1.6449 / np.sqrt(np.maximum(n_items - 1, 1)))


def _tasks(params: SimulationParameters, rng: np.random.Generator,
           groups_rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    median = dict(params.median_items)
    for discipline, n, subfields in params.public_tasks:
        for i in range(n):
            rows.append({"discipline": discipline, "visibility": "public",
                         "subfield": f"{discipline} {i % subfields + 1}"})
    for discipline, n in params.private_tasks:
        for _ in range(n):
            rows.append({"discipline": discipline, "visibility": "private",
                         "subfield": f"{discipline} private"})
    tasks = pd.DataFrame(rows)
    tasks.insert(0, "task_id", [f"spu-{i:04d}" for i in range(len(tasks))])
    m = tasks["discipline"].map(median).to_numpy(dtype=float)
    tasks["n_items"] = np.clip(np.round(m * np.exp(rng.normal(0, 0.7, len(tasks)))), 3, 400)
    tasks["threshold"] = _threshold(tasks["n_items"].to_numpy())
    tasks["mu"] = rng.normal(0.0, params.task_sd, len(tasks))
    # Paper 2.2: 4,207 experiments in 517 groups, about eight experiments per group.
    per_group = np.exp(groups_rng.normal(np.log(8.0), 0.6, len(tasks)))
    items = tasks["n_items"].to_numpy()
    tasks["n_groups"] = np.clip(np.round(items / per_group), 1, np.maximum(items // 2, 1))
    return tasks


def _outcomes(rng: np.random.Generator, n: int, weights: np.ndarray,
              excluded: Sequence[tuple[str, int]], recovered: int) -> np.ndarray:
    outcome = np.full(n, "valid", dtype=object)
    free = np.ones(n, dtype=bool)
    for name, count in excluded:
        w = np.where(free, weights if name == "refusal" else 1.0, 0.0)
        pick = _weighted_sample(rng, w, count)
        outcome[pick] = name
        free[pick] = False
    pick = _weighted_sample(rng, free.astype(float), recovered)
    outcome[pick] = "recovered"
    return outcome


def _usage(rng: np.random.Generator, c: SimulatedConfig, scored: np.ndarray,
           spread: float) -> dict[str, np.ndarray]:
    n = scored.size
    scale = np.where(scored, 1.0, 0.1)  # unscored runs stop early and spend little

    def lognormal(mean: float) -> np.ndarray:
        return mean * np.exp(rng.normal(-spread**2 / 2, spread, n)) * scale

    prompt = lognormal(c.prompt_mtokens * 1e6)
    cache_read = np.round(prompt * c.cache_read_share)
    cache_write = np.round((prompt - cache_read) * 0.5)
    cost = lognormal(c.cost_usd)
    # Every prompt token at the input price instead of the cache prices (paper 3.5).
    full_input = cost / ((1 - c.cache_read_share) + c.cache_read_share * CACHE_READ_PRICE_RATIO)
    return {
        "input_tokens": np.round(prompt - cache_read - cache_write),
        "cache_read_tokens": cache_read,
        "cache_write_tokens": cache_write,
        "output_tokens": np.round(lognormal(c.output_mtokens * 1e6)),
        "cost_usd": cost,
        "cost_full_input_usd": full_input,
        "runtime_s": np.minimum(lognormal(c.runtime_h * 3600.0), 28800.0),
    }


@dataclass(frozen=True)
class _Streams:
    """Independent generators: the main one and one per planted feature.

    Adding a feature leaves the draws of the others unchanged.
    """

    main: np.random.Generator
    groups: np.random.Generator
    exposure: np.random.Generator
    departures: np.random.Generator
    stops: np.random.Generator

    @classmethod
    def from_seed(cls, seed: int) -> _Streams:
        return cls(*(rng_for(seed, "simulate", name) if name else rng_for(seed, "simulate")
                     for name in ("", "groups", "exposure", "departures", "stops")))


def simulate_runs(params: SimulationParameters | None = None, seed: int = 0) -> pd.DataFrame:
    """Draw a runs table (the columns of :data:`spu.schema.RUNS_TABLE_COLUMNS`) from ``params``.

    Parameters
    ----------
    params
        True parameters; the paper's structure by default.
    seed
        Seed of every draw: the same seed gives the same table.

    Returns
    -------
    pandas.DataFrame
        Official runs of every configuration on every task, then the repeated runs.

    Examples
    --------
    >>> runs = simulate_runs(seed=1)
    >>> len(runs), int((runs["repeat"] == 0).sum())
    (1653, 1508)
    >>> runs[(runs["repeat"] == 0) & (runs["visibility"] == "public") & runs["scored"]
    ...      ].groupby("config").size()[["Opus 5.5", "Fable 5.1", "Kimi-K3.1-Pro"]].tolist()
    [44, 30, 95]
    """
    p = params or SimulationParameters()
    streams = _Streams.from_seed(seed)
    rng = streams.main
    tasks = _tasks(p, rng, streams.groups)
    refusal_weight = tasks["discipline"].map(dict(REFUSAL_WEIGHT)).fillna(0.5).to_numpy()
    if p.refusal_difficulty and p.task_sd > 0:
        refusal_weight = refusal_weight * np.exp(
            p.refusal_difficulty * tasks["mu"].to_numpy() / p.task_sd)
    frames = []
    interactions: dict[str, np.ndarray] = {}
    for c in p.configs:
        interaction = rng.normal(0.0, p.interaction_sd, len(tasks))
        interactions[c.label] = interaction
        for visibility in ("public", "private"):
            sel = (tasks["visibility"] == visibility).to_numpy()
            t = tasks[sel].reset_index(drop=True)
            flagged = np.zeros(len(t), dtype=bool)
            if visibility == "public":
                outcome = _outcomes(rng, len(t), refusal_weight[sel], c.excluded_public,
                                    c.recovered_public)
                flagged[_weighted_sample(streams.exposure, np.ones(len(t)),
                                         c.flagged_public)] = True
            else:
                excluded = ((c.private_excluded_outcome, len(t) - c.private_scored),)
                outcome = _outcomes(rng, len(t), refusal_weight[sel], excluded, 0)
            frames.append(_runs(p, streams, c, t, interaction[sel], outcome, flagged,
                                np.zeros(len(t), dtype=bool), repeat=0))
    repeat_c = next((c for c in p.configs if c.label == p.repeat_config), None)
    if repeat_c is not None and p.repeats > 0:
        public = tasks[tasks["visibility"] == "public"]
        one_per_subfield = public.groupby("subfield").sample(1, random_state=rng)
        chosen = one_per_subfield.sort_values("task_id")
        t = chosen.reset_index(drop=True)
        # The repeats share the configuration's interaction with its official run.
        interaction = interactions[repeat_c.label][chosen.index.to_numpy()]
        outcome, has_file = _repeat_outcomes(p, streams.stops, len(t))
        for r in range(1, p.repeats + 1):
            rows = slice((r - 1) * len(t), r * len(t))
            flagged = streams.exposure.random(len(t)) < p.repeat_exposure_rate
            frames.append(_runs(p, streams, repeat_c, t, interaction, outcome[rows], flagged,
                                has_file[rows], repeat=r))
    runs = pd.concat(frames, ignore_index=True)
    runs.insert(0, "run_id", [f"sim{seed}-{i:05d}" for i in range(len(runs))])
    runs["run_key"] = runs["run_id"]
    runs["task_version"] = "1.0"
    runs["experiment"] = "simulated"
    from spu.schema import runs_table_frame

    return runs_table_frame(runs, sort=False, fill=True)


def _repeat_outcomes(p: SimulationParameters, rng: np.random.Generator,
                     n_tasks: int) -> tuple[np.ndarray, np.ndarray]:
    """Outcomes of the repeated runs and which of them left a file.

    Repeat ``r`` of task ``t`` is entry ``(r - 1) * n_tasks + t``.

    Policy stops fall on a task's repeats with a propensity ``exp(stop_clustering * z_t)``,
    ``z_t`` standard normal: 0 spreads them at random, larger values cluster them.
    """
    n = n_tasks * p.repeats
    task_of = np.tile(np.arange(n_tasks), p.repeats)
    propensity = np.exp(p.stop_clustering * rng.standard_normal(n_tasks))[task_of]
    outcome = np.full(n, "valid", dtype=object)
    has_file = np.zeros(n, dtype=bool)
    excluded = dict(p.repeat_excluded)
    stops = excluded.pop("policy_stop", 0) + p.repeat_scored_stops
    stopped = _weighted_sample(rng, propensity, min(stops, n))
    outcome[stopped] = "policy_stop"
    has_file[stopped[:p.repeat_scored_stops]] = True
    free = outcome == "valid"
    for name, count in excluded.items():
        pick = _weighted_sample(rng, free.astype(float), count)
        outcome[pick] = name
        free[pick] = False
    return outcome, has_file


def _runs(p: SimulationParameters, streams: _Streams, c: SimulatedConfig,
          t: pd.DataFrame, interaction: np.ndarray, outcome: np.ndarray, flagged: np.ndarray,
          has_file: np.ndarray, repeat: int) -> pd.DataFrame:
    rng = streams.main
    n = len(t)
    shift = {d: e for label, d, e in p.discipline_effects if label == c.label}
    score = (c.mean + t["mu"].to_numpy() + interaction + rng.normal(0.0, p.within_sd, n)
             + t["discipline"].map(shift).fillna(0.0).to_numpy()
             + p.recovered_effect * (outcome == "recovered") + p.exposure_effect * flagged)
    if p.clip:
        score = np.clip(score, -1.0, 1.0)
    columns = {
        "config": c.label, "model": c.model, "harness": c.harness, "effort": c.effort,
        "task_id": t["task_id"].to_numpy(), "discipline": t["discipline"].to_numpy(),
        "subfield": t["subfield"].to_numpy(), "visibility": t["visibility"].to_numpy(),
        "repeat": repeat, "threshold": t["threshold"].to_numpy(),
        "n_items": t["n_items"].to_numpy(dtype=int),
        "n_groups": t["n_groups"].to_numpy(dtype=int),
        **_outcome_columns(score, outcome, has_file),
    }
    columns.update(_usage(rng, c, columns["scored"], p.cost_spread))
    columns.update({
        "tool_calls": rng.poisson(200, n), "web_fetches": rng.poisson(20, n),
        "used_gpu": rng.random(n) < 0.3, "flagged_exposure": flagged,
        **_network(p, streams.exposure, flagged),
        "refusal_label": pd.Series(["[bio]" if o == "refusal" else None for o in outcome],
                                   dtype=object).to_numpy(),
    })
    recovered = outcome == "recovered"
    names = [name for name, _ in DEPARTURE_COUNTS]
    weights = np.array([count for _, count in DEPARTURE_COUNTS], dtype=float)
    drawn = streams.departures.choice(names, size=n, p=weights / weights.sum())
    columns["departures"] = pd.Series([d if r else None for d, r in zip(drawn, recovered,
                                                                          strict=True)],
                                      dtype=object).to_numpy()
    return pd.DataFrame(columns)


def _network(p: SimulationParameters, rng: np.random.Generator,
             flagged: np.ndarray) -> dict[str, np.ndarray]:
    """What the exposure detector found and the requests sent outside the audited tools."""
    n = flagged.size
    doi = flagged & (rng.random(n) < p.doi_share)
    kinds = np.where(doi, "doi,title", np.where(flagged, "title", ""))
    outside = np.where(rng.random(n) < p.outside_rate, rng.poisson(3.0, n) + 1, 0)
    return {"exposure_kinds": pd.Series([k or None for k in kinds], dtype=object).to_numpy(),
            "requests_outside_tools": outside}


def _outcome_columns(score: np.ndarray, outcome: np.ndarray,
                     has_file: np.ndarray) -> dict[str, np.ndarray]:
    # A run that stopped under the policy is scored when it left a file (SPEC section 7).
    scored = np.isin(outcome, ["valid", "recovered"]) | ((outcome == "policy_stop") & has_file)
    strict = scored & (outcome != "recovered")
    return {"outcome": outcome, "scored": scored,
            "score_recovered": np.where(scored, score, -1.0),
            "score_strict": np.where(strict, score, -1.0)}


def _spearman_to_pearson(rho: np.ndarray) -> np.ndarray:
    """Pearson correlation of normal scores whose Spearman correlation is ``rho``.

    For bivariate normals Spearman's rho is ``(6 / pi) asin(r / 2)`` (Pearson, 1907).

    Examples
    --------
    >>> _spearman_to_pearson(np.array([0.0, 1.0])).round(6).tolist()
    [0.0, 1.0]
    """
    return 2 * np.sin(np.pi * np.clip(rho, -1.0, 1.0) / 6)


def _task_package(task_id: str, row: pd.Series, rng: np.random.Generator
                  ) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """Contract, answers and targets rows of one simulated task."""
    n_items, n_groups = int(row["n_items"]), int(row["n_groups"])
    n_groups = max(1, min(n_groups, n_items // 2))
    ids = [f"E{i:03d}" for i in rng.permutation(np.arange(1, n_items + 1))]
    sizes = np.full(n_groups, 2)
    extra = rng.multinomial(n_items - 2 * n_groups, np.full(n_groups, 1 / n_groups))
    sizes += extra
    groups, answers, targets = [], {}, []
    start = 0
    for g, size in enumerate(sizes):
        gid = f"G{g + 1}"
        items = ids[start:start + size]
        start += size
        values = np.round(rng.normal(50.0, 20.0, size), 2)
        # A numeric setting that tracks the measured value in some groups (the monotone
        # prior of paper 4.2) and not in others.
        tracking = rng.random() < 0.4
        setting = values + rng.normal(0, 5.0 if tracking else 60.0, size)
        groups.append({"group_id": gid, "endpoint": "measured value", "weight": 1 / n_groups,
                       "items": items})
        answers[gid] = dict(zip(items, (float(v) for v in values), strict=True))
        targets += [{"experiment_id": i, "group_id": gid, "setting": round(float(x), 1),
                     "label": f"condition {k}"} for k, (i, x) in enumerate(zip(items, setting,
                                                                             strict=True))]
    order = rng.permutation(len(targets))
    contract = {"task_id": task_id, "task_version": "1.0", "groups": groups}
    key = {"task_id": task_id, "task_version": "1.0", "groups": answers}
    return contract, key, [targets[i] for i in order]


def _write_package(root: Path, task_id: str, row: pd.Series, contract: dict[str, Any],
                   answers: dict[str, Any], targets: list[dict[str, Any]]) -> None:
    import csv
    import json

    folder = root / task_id
    (folder / "hidden").mkdir(parents=True, exist_ok=True)
    (folder / "task.yaml").write_text(
        f"id: {task_id}\nversion: '1.0'\ntitle: simulated task\n"
        f"discipline: {row['discipline']}\nsubfield: {row['subfield']}\n"
        f"visibility: {row['visibility']}\n", encoding="utf-8")
    (folder / "instruction.md").write_text("Rank the experiments of each group.\n",
                                           encoding="utf-8")
    (folder / "experiment.md").write_text("A simulated experiment.\n", encoding="utf-8")
    (folder / "contract.json").write_text(json.dumps(contract), encoding="utf-8")
    (folder / "protocol.json").write_text(json.dumps({"groups": [
        {"group_id": g["group_id"], "endpoint": g["endpoint"]} for g in contract["groups"]]}),
        encoding="utf-8")
    (folder / "hidden" / "answers.json").write_text(json.dumps(answers), encoding="utf-8")
    with open(folder / "targets.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["experiment_id", "group_id", "setting", "label"])
        writer.writeheader()
        writer.writerows(targets)


def _orders(contract: dict[str, Any], answers: dict[str, Any], score: float,
            rng: np.random.Generator) -> dict[str, list[str]]:
    """Group orders whose Spearman correlation with the measured values is near ``score``."""
    from scipy import stats as sps

    pearson = float(_spearman_to_pearson(np.array([score]))[0])
    out = {}
    for g in contract["groups"]:
        items = g["items"]
        values = np.array([answers[g["group_id"]][i] for i in items])
        z = sps.norm.ppf((sps.rankdata(values) - 0.5) / values.size)
        z = (z - z.mean()) / (z.std() or 1.0)
        latent = pearson * z + np.sqrt(max(1 - pearson**2, 0.0)) * rng.standard_normal(z.size)
        out[g["group_id"]] = [items[i] for i in np.argsort(latent, kind="stable")]
    return out


def _submission(task_id: str, orders: dict[str, list[str]], departure: str | None
                ) -> dict[str, Any]:
    """The rankings.json document: canonical, or with one departure of appendix E.1."""
    canonical = [{"group_id": g, "order": o} for g, o in orders.items()]
    if departure == "object_keyed_by_group":
        return {"task_id": task_id, "task_version": "1.0", "rankings": dict(orders)}
    if departure == "alternative_order_key":
        return {"task_id": task_id, "task_version": "1.0",
                "rankings": [{"group_id": g, "item_ids": o} for g, o in orders.items()]}
    if departure == "alternative_top_level_key":
        return {"task_id": task_id, "task_version": "1.0", "groups": canonical}
    if departure == "alternative_group_key":
        return {"task_id": task_id, "task_version": "1.0",
                "rankings": [{"group": g, "order": o} for g, o in orders.items()]}
    if departure == "renamed_identity":
        return {"task": task_id, "version": "1.0", "rankings": canonical}
    return {"task_id": task_id, "task_version": "1.0", "rankings": canonical}


def simulate_study(out: str | Path, params: SimulationParameters | None = None,
                   seed: int = 0) -> pd.DataFrame:
    """A simulated study on disk: task packages, run folders and the matching runs table.

    Writes ``<out>/tasks/<task_id>/`` (contract, answer key, ``targets.csv`` with a numeric
    setting that tracks the measured value in some groups) and
    ``<out>/outputs/runs/<run_key>/output/rankings.json`` for every scored run: orders
    drawn so that their Spearman correlation with the measured values is near the run's
    simulated score, written in the run's departure format where it has one, and beside
    it a seeded trajectory submitting those orders (:func:`_write_trajectory`:
    ``trajectory.jsonl.gz``, ``run.json`` with the run's fields, ``task/`` and
    ``tools/audit.jsonl``), so ``spu analyze <out>/outputs --tasks <out>/tasks`` reads
    them as it reads real runs. The returned table is :func:`simulate_runs` with what
    the files determine put in: each scored run's score is the grader's score of its
    orders, each task's threshold its chance threshold (4,000 random submissions), its
    experiments and groups those of its package, each scored run's ``tool_calls`` its
    trajectory's. ``spu stats TABLE --tasks <out>/tasks --runs-dir <out>/outputs`` then
    runs every analysis, those of the submitted orders included.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     runs = simulate_study(d, SimulationParameters(configs=PAPER_CONFIGS[:2],
    ...                           repeats=0), seed=0)
    ...     folders = len(list(Path(d, "outputs", "runs").iterdir()))
    >>> folders == int(runs["scored"].sum())
    True
    """
    import json

    from spu.grading.chance import chance_threshold
    from spu.grading.rules import GradingKey
    from spu.schema import AnswerKey, Contract

    out = Path(out)
    runs = simulate_runs(params, seed).copy()
    rng = rng_for(seed, "simulate", "study")
    tasks = runs.drop_duplicates("task_id").set_index("task_id")
    keys: dict[str, tuple[dict[str, Any], dict[str, Any], GradingKey]] = {}
    thresholds, items, groups = {}, {}, {}
    for task_id, row in tasks.iterrows():
        contract, answers, targets = _task_package(str(task_id), row, rng)
        answers["source"] = {"doi": simulated_doi(str(task_id))}
        _write_package(out / "tasks", str(task_id), row, contract, answers, targets)
        typed_contract, typed_answers = Contract(**contract), AnswerKey(**answers)
        keys[str(task_id)] = (contract, answers["groups"],
                              GradingKey.build(typed_contract, typed_answers))
        thresholds[task_id] = chance_threshold(typed_contract, typed_answers)
        items[task_id] = sum(len(g["items"]) for g in contract["groups"])
        groups[task_id] = len(contract["groups"])
    runs["threshold"] = runs["task_id"].map(thresholds)
    runs["n_items"] = runs["task_id"].map(items).astype("Int64")
    runs["n_groups"] = runs["task_id"].map(groups).astype("Int64")
    scored = runs["scored"].to_numpy()
    # Draws of their own (the scores and orders draw as before): a run's report records
    # its task's DOI, or a query of an audited tool asks for it (paper 3.7, Figure 13c).
    sides = rng_for(seed, "simulate", "study", "doi sides")
    walk = rng_for(seed, "simulate", "study", "trajectories")
    tasks_dir = out / "tasks"
    for i in np.flatnonzero(scored):
        r = runs.iloc[i]
        contract, measured, key = keys[str(r["task_id"])]
        orders = _orders(contract, measured, float(r["score_recovered"]), rng)
        score = key.score_orders(orders)
        runs.iat[i, runs.columns.get_loc("score_recovered")] = score
        if r["outcome"] != "recovered":
            runs.iat[i, runs.columns.get_loc("score_strict")] = score
        departure = r["departures"] if isinstance(r["departures"], str) else None
        folder = out / "outputs" / "runs" / str(r["run_key"])
        (folder / "output").mkdir(parents=True, exist_ok=True)
        (folder / "output" / "rankings.json").write_text(
            json.dumps(_submission(str(r["task_id"]), orders, departure)), encoding="utf-8")
        n_calls, report, audit = _write_trajectory(folder, r, tasks_dir / str(r["task_id"]),
                                                   orders, score, walk, int(i))
        runs.iat[i, runs.columns.get_loc("tool_calls")] = n_calls
        _write_doi_sides(folder, str(r["task_id"]), sides, report, audit)
    return runs


TRAJECTORY_STEPS = 20
"""Mean working steps of a simulated run's trajectory (kept short: about 1,500 runs)."""

STUDY_START = datetime(2026, 11, 1, tzinfo=UTC)
"""Start time of the first simulated run; run ``i`` starts ``i`` hours later."""


def _write_trajectory(folder: Path, r: pd.Series, task_dir: Path, orders: dict[str, list[str]],
                      score: float, rng: np.random.Generator, index: int
                      ) -> tuple[int, str, list[dict[str, Any]]]:
    """The trajectory, task inputs and ``run.json`` of one simulated run.

    Returns the trajectory's tool calls, its report and its audited tool calls.

    The trajectory is :func:`spu.testing.corpus.build_run`'s, in the CLI vocabulary of the
    run's harness, submitting the run's ``orders``; it tries GPU work when the table's
    sampled ``used_gpu`` is true (some of that work fails, as real workloads do, so the
    executed-code rule of E.12 finds fewer runs than the sampled device).
    """
    import json
    import shutil

    from spu.tasks.package import load_task
    from spu.testing.corpus import build_run, save_trajectory

    task = load_task(task_dir)
    config = (str(r["model"]), str(r["effort"]), str(r["harness"]))
    trajectory, _, audit, report, _ = build_run(
        task, None, config, max(6, int(rng.poisson(TRAJECTORY_STEPS))), rng,
        STUDY_START + timedelta(hours=index), submitted=orders, use_gpu=bool(r["used_gpu"]))
    (folder / "task").mkdir(exist_ok=True)
    for name in ("contract.json", "targets.csv"):
        shutil.copy(task_dir / name, folder / "task" / name)
    save_trajectory(folder, trajectory)
    n_calls = sum(len(s.tool_calls) for s in trajectory.steps)
    record = {
        "run_key": str(r["run_key"]), "task_id": str(r["task_id"]), "config": str(r["config"]),
        "model": str(r["model"]), "harness": str(r["harness"]), "effort": str(r["effort"]),
        "discipline": str(r["discipline"]), "subfield": str(r["subfield"]),
        "visibility": str(r["visibility"]), "repeat": int(r["repeat"]),
        "outcome": str(r["outcome"]), "scored": bool(r["scored"]),
        "score_recovered": float(score), "runtime_s": float(r["runtime_s"]),
        "tool_calls": n_calls, "used_gpu": bool(r["used_gpu"]),
        "gpu_seconds": float(r["runtime_s"]) * 0.2 if bool(r["used_gpu"]) else 0.0,
        "usage": {"output": int(r["output_tokens"])},
        # what makes it a full run record, so spu runs export --runs-dir reads it
        "task_version": str(task.meta.version), "score_strict": float(score),
        "sandbox": {"backend": "simulated"}, "cost_usd": float(r["cost_usd"])}
    (folder / "run.json").write_text(json.dumps(record), encoding="utf-8")
    return n_calls, report, audit


def simulated_doi(task_id: str) -> str:
    """The source DOI the simulated study gives ``task_id`` (in its answer key).

    Examples
    --------
    >>> simulated_doi("t01")
    '10.5555/spu.sim.t01'
    """
    return f"10.5555/spu.sim.{task_id}"


def _write_doi_sides(folder: Path, task_id: str, rng: np.random.Generator, report: str,
                     audit: list[dict[str, Any]]) -> None:
    """The report and the audit log: the DOI in 1 report in 10, requested in 1 run in 50 (3.7).

    ``report`` and ``audit`` are the trajectory's; the DOI sentence and one more search
    (for the DOI, or not) are added to them.
    """
    import json

    doi = simulated_doi(task_id)
    reported, requested = rng.random() < 0.1, rng.random() < 0.02
    (folder / "output" / "report.md").write_text(
        report + (f"The source may be {doi}.\n" if reported else ""), encoding="utf-8")
    query = f"doi {doi}" if requested else "ligand effects on yield"
    (folder / "tools").mkdir(exist_ok=True)
    lines = [*audit, {"time": "2026-11-01T00:00:00Z", "tool": "search",
                      "args": {"query": query}, "status": "ok", "latency_s": 0.1,
                      "text_sha256": "", "chars": 0}]
    (folder / "tools" / "audit.jsonl").write_text(
        "".join(json.dumps(a) + "\n" for a in lines), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spu.stats.simulate OUT [--seed S]``: write a simulated runs table."""
    parser = argparse.ArgumentParser(prog="python -m spu.stats.simulate",
                                     description="Write a runs table with the paper's structure.")
    parser.add_argument("out", type=Path, help="file to write: .csv or .parquet")
    parser.add_argument("--seed", type=int, default=0, help="seed of every draw (default 0)")
    parser.add_argument("--study", type=Path, default=None, metavar="DIR",
                        help="also write task packages (DIR/tasks) and run folders "
                             "(DIR/outputs) that the table's scores come from")
    args = parser.parse_args(argv)
    from spu.schema import RunsTableWriteError, write_runs_table

    if args.out.suffix.lower() not in (".csv", ".parquet"):
        print(f"{parser.prog}: {args.out}: the output must end in .csv or .parquet",
              file=sys.stderr)
        return 2
    runs = (simulate_runs(seed=args.seed) if args.study is None
            else simulate_study(args.study, seed=args.seed))
    try:
        write_runs_table(runs, args.out)
    except RunsTableWriteError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(runs)} runs to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
