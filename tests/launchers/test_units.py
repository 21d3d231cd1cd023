"""Budget, progress counters, resource requests and the repeated-run task subset."""

from __future__ import annotations

import math

import pytest

from spu.launch.budget import CostLedger, ledger_of, sweep_ledger
from spu.launch.design import main as design_main
from spu.launch.design import public_tasks, stratified_sample
from spu.launch.job import write_result
from spu.launch.progress import ProgressDisplay, SweepProgress, result_line
from spu.launch.resources import (
    GIB,
    ResourceError,
    RunRequest,
    capacity,
    check_feasible,
    fit_request,
    run_request,
)

# ----------------------------------------------------------------------------- budget


def test_ledger_reaches_the_cap_at_equality_and_ignores_unknown_costs() -> None:
    ledger = CostLedger(2.0)
    for cost in (0.75, None, math.nan, 0.5):
        ledger.add(cost)
    # 0.75 + 0 + 0 + 0.5 = 1.25 over 4 runs
    assert (ledger.spent_usd, ledger.runs, ledger.reached) == (1.25, 4, False)
    ledger.add(0.75)  # 2.00: reached at equality
    assert ledger.reached
    rounded = CostLedger(1.0)
    rounded.add(0.49999999999999994)  # 100,000 tokens at $5 per million, as estimated
    rounded.add(0.49999999999999994)
    assert rounded.spent_usd < 1.0 and rounded.reached
    assert ledger.stop_message(3) == (
        "budget.max_cost_usd=2 reached: $2.00 spent by 5 finished runs; 3 runs not launched "
        "(relaunch with a higher budget.max_cost_usd to run them)")
    assert not CostLedger(None, spent_usd=1e9).reached


def test_ledger_rejects_a_negative_cap_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r"budget.max_cost_usd=-1"):
        CostLedger(-1.0)


def test_sweep_ledger_counts_ran_and_skipped_results_in_the_sweep_folder(tmp_path) -> None:
    write_result(tmp_path / "0", {"status": "skipped", "cost_usd": 3.0})
    write_result(tmp_path / "1", {"status": "ran", "cost_usd": 0.5})
    write_result(tmp_path / "2", {"status": "not_launched", "cost_usd": None})
    ledger = sweep_ledger(tmp_path, 3.5)
    assert (ledger.spent_usd, ledger.runs, ledger.reached) == (3.5, 2, True)
    assert ledger_of([], None).spent_usd == 0.0


# ----------------------------------------------------------------------------- progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_counts_each_kind_of_job() -> None:
    clock = Clock()
    progress = SweepProgress(total=6, budget_usd=10.0, clock=clock)
    progress.skipped_one({"status": "skipped", "cost_usd": 2.0})
    for _ in range(4):
        progress.launched()
    progress.finished({"status": "ran", "outcome": "valid", "cost_usd": 1.5, "retries": 0})
    progress.finished({"status": "ran", "outcome": "infra_error", "cost_usd": 0.5,
                       "retries": 1})
    progress.lost()
    progress.finished(None)  # the job raised
    clock.now = 100.0 + 3725.0
    snap = progress.snapshot()
    # 4 launched: 3 finished (1 valid, 1 infra_error, 1 raised), 1 lost and waiting again
    assert (snap.done, snap.running, snap.failed, snap.retried, snap.skipped) == (3, 0, 2, 2, 1)
    assert snap.waiting == 2  # 6 - 3 done - 0 running - 1 skipped
    assert snap.cost_usd == 4.0  # 2.0 skipped + 1.5 + 0.5
    assert snap.line() == ("done 3/6 · running 0 · waiting 2 · failed 2 · retried 2 · "
                           "skipped 1 · elapsed 1:02:05 · cost $4.00 of $10.00")


def test_progress_display_prints_results_and_status_lines(capsys) -> None:
    clock = Clock()
    progress = SweepProgress(total=2, clock=clock)
    with ProgressDisplay(progress, mode="lines", every_s=30.0, clock=clock) as display:
        progress.launched()
        progress.finished({"status": "ran", "outcome": "valid", "cost_usd": 0.0})
        display.result({"task": "t1", "model": "random", "effort": "none", "repeat": 0,
                        "outcome": "valid", "score": 0.5, "cost_usd": 0.0, "runtime_s": 1.0})
        clock.now += 31.0
        display.refresh()
    out = capsys.readouterr().out
    assert "t1 · random-none r0 · valid · score 0.500 · $0.00 · 1.0 s" in out
    # one status line when due, one at the end
    assert out.count("SPU sweep · done 1/2") == 2
    assert result_line({"task": "t", "model": "m", "effort": "e", "repeat": 0,
                        "outcome": "no_file", "score": None}) == \
        "t · m-e r0 · no_file · score - · $0.00"


def test_progress_display_rejects_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match="hydra.launcher.progress='loud'"):
        ProgressDisplay(SweepProgress(1), mode="loud")


# ----------------------------------------------------------------------------- resources


def test_request_takes_the_limits_unless_the_launcher_sets_a_value(tmp_path) -> None:
    limits = {"cpus": 8, "gpus": 1, "memory_gb": 16}
    chosen = {"cpus": None, "gpus": None, "memory_gb": None, "sandbox_slots": 1}
    assert run_request(limits, None, chosen) == RunRequest(8.0, 1.0, 16 * GIB, 1.0)
    # A task's own limits (task.yaml) override the run's.
    task = tmp_path / "t"
    task.mkdir()
    (task / "task.yaml").write_text(
        "id: t\nversion: '1'\ntitle: T\ndiscipline: chemistry\nsubfield: s\n"
        "limits: {cpus: 2, memory_gb: 4}\n")
    assert run_request(limits, str(task), chosen) == RunRequest(2.0, 1.0, 4 * GIB, 1.0)
    with pytest.raises(ResourceError, match="hydra.launcher.resources.cpus"):
        run_request(limits, None, {**chosen, "cpus": -1})


def test_a_request_shrinks_to_the_largest_node_and_says_so() -> None:
    nodes = [{"CPU": 2.0, "GPU": 0.0, "memory": 8.0 * GIB, "sandbox_slot": 2.0},
             {"CPU": 4.0, "GPU": 0.0, "memory": 4.0 * GIB, "sandbox_slot": 4.0}]
    fitted, notes = fit_request(RunRequest(8, 1, 16 * GIB, 1), nodes)
    assert fitted == RunRequest(4.0, 0.0, 8 * GIB, 1)
    assert notes == [
        "runs ask for 8 CPU; the largest node has 4: each run gets 4",
        "runs ask for 1 GPU; the largest node has 0: each run gets 0",
        "runs ask for 16 GiB memory; the largest node has 8 GiB: each run gets 8 GiB",
    ]
    # node 1 holds none (2 CPUs < 4), node 2 holds one (4 CPUs, but 4 GiB < 8 GiB: none)
    assert capacity(fitted, nodes) == 0
    with pytest.raises(ResourceError, match="no node can run a run asking for 4 CPU"):
        check_feasible(fitted, nodes)
    # 1 CPU, 1 GiB, 1 slot: node 1 holds min(2, 8, 2) = 2, node 2 min(4, 4, 4) = 4
    assert capacity(RunRequest(1, 0, GIB, 1), nodes) == 6


def test_a_missing_sandbox_slot_resource_is_explained() -> None:
    with pytest.raises(ResourceError, match="ray start --resources"):
        check_feasible(RunRequest(1, 0, 0, 1), [{"CPU": 8.0}])
    check_feasible(RunRequest(1, 0, 0, 0), [{"CPU": 8.0}])


# ----------------------------------------------------------------------------- design


def test_stratified_sample_draws_one_task_per_group_reproducibly() -> None:
    tasks = [(f"t{i:02d}", d, s) for i, (d, s) in enumerate(
        [("chemistry", "catalysis")] * 5 + [("chemistry", "electrochemistry")] * 3
        + [("biology", "enzymes")] * 4 + [("medicine", "oncology")])]
    strata = stratified_sample(tasks, seed=7)
    assert [(s.discipline, s.subfield, len(s.task_ids)) for s in strata] == [
        ("biology", "enzymes", 4), ("chemistry", "catalysis", 5),
        ("chemistry", "electrochemistry", 3), ("medicine", "oncology", 1)]
    assert all(s.drawn in s.task_ids for s in strata)
    assert stratified_sample(list(reversed(tasks)), seed=7) == strata  # order does not matter
    draws = {tuple(s.drawn for s in stratified_sample(tasks, seed=k)) for k in range(20)}
    assert len(draws) > 1  # the seed matters


def test_design_command_prints_a_sweep_value(task_root, capsys) -> None:
    assert [t[0] for t in public_tasks(task_root)] == ["example-coupling-conditions",
                                                       "example-electrolytes-and-films"]
    assert design_main(["--task-root", str(task_root), "--seed", "0"]) == 0
    printed = capsys.readouterr().out.strip().split(",")
    assert set(printed) <= {"example-coupling-conditions", "example-electrolytes-and-films"}
    assert design_main(["--task-root", str(task_root / "none")]) == 2


# ----------------------------------------------------------------------------- driver


def test_two_jobs_of_one_run_key_launch_once(tmp_path) -> None:
    """Invariant: two jobs naming the same run never run at once (they share a folder)."""
    import json

    from hydra_plugins.spu_ray_launcher._driver import SweepJob, settle_duplicates
    from omegaconf import OmegaConf

    from spu.launch.job import RunIdentity

    def job(idx: int, key: str) -> SweepJob:
        identity = RunIdentity(run_key=key, task_id="t", task_version="1", task_dir=tmp_path,
                               model="random", harness="baseline", effort="none", repeat=0)
        config = OmegaConf.create({"hydra": {"job": {"name": "main"}}, "repeat": 0})
        return SweepJob(idx=idx, overrides=[f"n={idx}"], config=config,
                        folder=tmp_path / str(idx), identity=identity,
                        request=RunRequest(1, 0, 0, 1))

    jobs = [job(0, "a" * 16), job(1, "b" * 16), job(2, "a" * 16)]
    progress = SweepProgress(total=3)
    returns: dict = {}
    kept = settle_duplicates(jobs, progress, ProgressDisplay(progress, mode="off"), returns)
    assert [j.idx for j in kept] == [0, 1]
    assert list(returns) == [2] and progress.not_launched == 1
    row = json.loads((tmp_path / "2" / "result.json").read_text())
    assert (row["status"], row["note"]) == ("not_launched", "same run as job #0")


def test_repeats_of_one_configuration_share_one_composition() -> None:
    """Only a plain ``repeat=N`` is set apart; anything else keeps its own composition."""
    from hydra_plugins.spu_ray_launcher._driver import JobComposer

    assert JobComposer.split(["task=a", "repeat=3", "model=x"]) == (("task=a", "model=x"), "3")
    assert JobComposer.split(["task=a", "+repeat=3"]) == (("task=a", "+repeat=3"), None)
    assert JobComposer.split(["task=a", "repeat=${oc.env:X}"])[1] is None


def test_longest_expected_first_uses_history_of_the_same_configuration_and_task() -> None:
    """Expected times: same (configuration, task) median, else the configuration's median."""
    from spu.launch.schedule import RuntimeHistory, expected_runtimes, longest_expected_first

    history = RuntimeHistory.from_runs([("a", "t1", 100.0), ("a", "t2", 10.0),
                                        ("b", "t1", 50.0), ("b", "t1", 70.0)])
    runs = [("a", "t2"), ("b", "t1"), ("a", "t9"), ("a", "t1"), ("c", "t1")]
    expected = expected_runtimes(history, runs)
    # a/t9: a's median 55; c/t1: no configuration history, every run's median 60.
    assert expected == [10.0, 60.0, 55.0, 100.0, 60.0]
    assert longest_expected_first(expected) == [3, 1, 4, 2, 0]


def test_a_repeat_copied_from_its_configuration_equals_its_own_composition(compose,
                                                                           tmp_path) -> None:
    """Repeats get the first job's config, request and identity, changed where a repeat
    changes them: the same as composing each in full."""
    from types import SimpleNamespace

    from hydra_plugins.spu_ray_launcher._driver import JobComposer, compose_job
    from omegaconf import OmegaConf

    from spu.overrides import config_groups

    cfg = compose("hydra/launcher=ray_local", "task=example-coupling-conditions",
                  return_hydra_config=True)
    with config_groups() as groups:
        launcher = SimpleNamespace(hydra_context=SimpleNamespace(config_loader=groups.loader),
                                   config=cfg, resources=cfg.hydra.launcher.resources)
        sweep = tmp_path / "sweep"
        composer = JobComposer(launcher, sweep)  # type: ignore[arg-type]
        batch = [["model=random", "task=example-coupling-conditions", f"repeat={r}"]
                 for r in (0, 1, 4)]
        copied = [composer.compose(o, i) for i, o in enumerate(batch)]
        full = [compose_job(launcher, o, i, sweep) for i, o in enumerate(batch)]  # type: ignore[arg-type]
        assert len(composer.configs) == 1, "the repeats were composed again"
        for mine, theirs in zip(copied, full, strict=True):
            assert mine.identity == theirs.identity and mine.identity is not None
            assert (mine.folder, mine.request, mine.overrides) == (
                theirs.folder, theirs.request, theirs.overrides)
            assert OmegaConf.to_container(mine.config, resolve=False) == \
                OmegaConf.to_container(theirs.config, resolve=False)
        assert len({j.identity.run_key for j in copied}) == 3  # type: ignore[union-attr]
        assert [j.config.repeat for j in copied] == [0, 1, 4]
        assert not JobComposer.names_its_repeat(full[0].config)
        named = compose_job(launcher, [*batch[0], "hydra.sweep.subdir=r${repeat}"], 0, sweep)  # type: ignore[arg-type]
        assert JobComposer.names_its_repeat(named.config)
