"""The validator on every shipped task and on packages broken one way at a time."""

from __future__ import annotations

import json

import pytest

from spu.tasks.package import discover_tasks
from spu.tasks.validate import ScreenSettings, Severity, validate_task
from tests.conftest import TASKS, run_module
from tests.tasks.conftest import GROUPS, SETTINGS


def codes(report, severity=Severity.error):
    return {f.code for f in report.findings if f.severity is severity}


def messages(report):
    return "\n".join(str(f) for f in report.findings)


@pytest.mark.parametrize("task_dir", discover_tasks(TASKS), ids=lambda p: p.name)
def test_every_shipped_task_is_valid(task_dir) -> None:
    report = validate_task(task_dir)
    assert report.ok, messages(report)


def test_the_reference_package_has_no_finding(make_task) -> None:
    report = validate_task(make_task())
    assert report.findings == ()


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("name", ["task.yaml", "instruction.md", "experiment.md",
                                  "protocol.json", "targets.csv", "contract.json",
                                  "hidden/answers.json"])
def test_missing_required_file(make_task, name) -> None:
    task = make_task()
    (task / name).unlink()
    report = validate_task(task)
    assert not report.ok
    missing = [f for f in report.errors if f.code == "missing-file"]
    assert [f.file for f in missing] == [name]


def test_answers_elsewhere_are_used_when_given(make_task, tmp_path) -> None:
    task = make_task()
    keys = tmp_path / "keys"
    keys.mkdir()
    (task / "hidden" / "answers.json").rename(keys / "answers.json")
    assert not validate_task(task).ok
    assert validate_task(task, keys / "answers.json").ok


def test_targets_row_without_contract_entry(make_task) -> None:
    task = make_task()
    with open(task / "targets.csv", "a") as f:
        f.write("E999,G1,benzene,60\n")
    report = validate_task(task)
    assert "id-mismatch" in codes(report)
    assert "E999" in messages(report) and "targets.csv" in messages(report)


def test_contract_item_without_targets_row(make_task) -> None:
    task = make_task()
    lines = (task / "targets.csv").read_text().splitlines()
    (task / "targets.csv").write_text("\n".join(line for line in lines
                                                if not line.startswith("E417")) + "\n")
    report = validate_task(task)
    assert "id-mismatch" in codes(report)
    assert any(f.file == "targets.csv" and "E417" in f.message for f in report.errors)


def test_experiment_in_the_wrong_group_of_targets(make_task) -> None:
    task = make_task()
    text = (task / "targets.csv").read_text().replace("E417,G1,", "E417,G2,")
    (task / "targets.csv").write_text(text)
    report = validate_task(task)
    assert any("E417 is in group G2 here but in group G1" in f.message for f in report.errors)


def test_answer_key_group_missing_and_unknown(make_task) -> None:
    answers = {"task_id": "spu-test", "task_version": "1.0",
               "groups": {"G1": GROUPS["G1"]["values"], "G9": GROUPS["G2"]["values"]}}
    report = validate_task(make_task(answers=answers))
    text = messages(report)
    assert "group G9 is not in contract.json" in text
    assert "group G2 of contract.json has no measured values" in text
    assert all(f.file == "hidden/answers.json" for f in report.errors)


def test_answer_key_experiment_mismatch(make_task) -> None:
    values = dict(GROUPS["G1"]["values"])
    values["E000"] = values.pop("E417")
    answers = {"task_id": "spu-test", "task_version": "1.0",
               "groups": {"G1": values, "G2": GROUPS["G2"]["values"]}}
    report = validate_task(make_task(answers=answers))
    text = messages(report)
    assert "not in the contract's group: E000" in text
    assert "without a value: E417" in text


def test_experiment_listed_twice_in_contract(make_task) -> None:
    groups = [{"group_id": "G1", "endpoint": "y", "weight": 0.6,
               "items": [*GROUPS["G1"]["values"], "E417"]},
              {"group_id": "G2", "endpoint": "y", "weight": 0.4,
               "items": list(GROUPS["G2"]["values"])}]
    report = validate_task(make_task(contract={"task_id": "spu-test", "task_version": "1.0",
                                               "groups": groups}))
    assert "duplicate-experiment" in codes(report)
    assert "experiment E417 is listed twice" in messages(report)


def test_experiment_listed_in_two_groups(make_task) -> None:
    groups = [{"group_id": "G1", "endpoint": "y", "weight": 0.6,
               "items": list(GROUPS["G1"]["values"])},
              {"group_id": "G2", "endpoint": "y", "weight": 0.4,
               "items": [*GROUPS["G2"]["values"], "E417"]}]
    report = validate_task(make_task(contract={"task_id": "spu-test", "task_version": "1.0",
                                               "groups": groups}))
    assert any(f.code == "duplicate-experiment" and "group G1" in f.message
               for f in report.errors)


def test_experiment_listed_twice_in_targets(make_task) -> None:
    task = make_task()
    with open(task / "targets.csv", "a") as f:
        f.write("E417,G1,toluene,60\n")
    report = validate_task(task)
    assert any(f.code == "duplicate-experiment" and f.file == "targets.csv"
               for f in report.errors)


def test_experiment_listed_twice_in_answer_key(make_task) -> None:
    g1 = json.dumps(GROUPS["G1"]["values"])[:-1] + ', "E417": 99.0}'
    raw = ('{"task_id": "spu-test", "task_version": "1.0", "groups": {"G1": ' + g1
           + ', "G2": ' + json.dumps(GROUPS["G2"]["values"]) + "}}")
    report = validate_task(make_task(answers=raw))
    assert any(f.code == "duplicate-experiment" and f.file == "hidden/answers.json"
               and "E417" in f.message for f in report.errors)


@pytest.mark.parametrize("weights", [(0.6, 0.3), (0.7, 0.4), (0.5, 0.5 + 1e-8)])
def test_weights_not_summing_to_one(make_task, weights) -> None:
    groups = {gid: {**g, "weight": w} for (gid, g), w in zip(GROUPS.items(), weights,
                                                              strict=True)}
    report = validate_task(make_task(groups=groups))
    assert "weights" in codes(report)
    assert "sum to" in messages(report)


def test_weights_within_tolerance_pass(make_task) -> None:
    groups = {gid: {**g, "weight": w} for (gid, g), w in zip(GROUPS.items(),
                                                              (0.6, 0.4 + 1e-12), strict=True)}
    assert validate_task(make_task(groups=groups)).ok


@pytest.mark.parametrize("weights", [(1.0, 0.0), (1.2, -0.2)])
def test_weights_not_positive(make_task, weights) -> None:
    groups = {gid: {**g, "weight": w} for (gid, g), w in zip(GROUPS.items(), weights,
                                                              strict=True)}
    report = validate_task(make_task(groups=groups))
    assert any(f.code == "weights" and "not positive" in f.message for f in report.errors)


def test_group_with_one_experiment(make_task) -> None:
    groups = {"G1": GROUPS["G1"], "G2": {"weight": 0.4, "values": {"E345": 3.3}}}
    report = validate_task(make_task(groups=groups))
    assert any(f.code == "group-size" and "G2 has 1 experiment" in f.message
               for f in report.errors)


def test_group_with_all_values_equal(make_task) -> None:
    groups = {"G1": GROUPS["G1"],
              "G2": {"weight": 0.4, "values": dict.fromkeys(GROUPS["G2"]["values"], 2.5)}}
    report = validate_task(make_task(groups=groups))
    assert any(f.code == "constant-group" and "G2" in f.message for f in report.errors)


@pytest.mark.parametrize("bad", ["12.5", None, True, "NaN", float("inf")])
def test_non_numeric_measured_value(make_task, bad) -> None:
    values = {**GROUPS["G1"]["values"], "E417": bad}
    raw = json.dumps({"task_id": "spu-test", "task_version": "1.0",
                      "groups": {"G1": values, "G2": GROUPS["G2"]["values"]}})
    if bad == "NaN":  # the bare JSON constant, which Python's json accepts
        raw = raw.replace('"NaN"', "NaN")
    report = validate_task(make_task(answers=raw))
    assert any(f.code == "non-numeric" and "groups.G1.E417" in f.message
               and f.file == "hidden/answers.json" for f in report.errors)


def test_identity_mismatch(make_task) -> None:
    answers = {"task_id": "spu-other", "task_version": "2.0",
               "groups": {gid: g["values"] for gid, g in GROUPS.items()}}
    report = validate_task(make_task(answers=answers))
    assert "task_id 'spu-other' does not match" in messages(report)
    assert "task_version '2.0' does not match" in messages(report)


def test_protocol_without_a_group(make_task) -> None:
    protocol = {"fixed_conditions": "x", "groups": [{"group_id": "G1", "endpoint": "y"}]}
    report = validate_task(make_task(protocol=protocol))
    assert any(f.file == "protocol.json" and "G2" in f.message for f in report.errors)


def test_malformed_file_names_file_and_key(make_task) -> None:
    task = make_task(contract={"task_id": "spu-test", "task_version": "1.0",
                               "groups": [{"group_id": "G1", "weight": 1.0, "items": []}]})
    report = validate_task(task)
    assert any(f.file == "contract.json" and "groups.0.endpoint" in f.message
               for f in report.errors)


# ----------------------------------------------------------------------------- leaks


def _rows_with(column: str, cells: dict[str, str]) -> list[dict[str, str]]:
    group_of = {e: gid for gid, g in GROUPS.items() for e in g["values"]}
    return [{"experiment_id": e, "group_id": group_of[e], "solvent": SETTINGS[e][0],
             column: cells[e]} for e in SETTINGS]


def test_leak_column_equal_to_values(make_task) -> None:
    values = {e: v for g in GROUPS.values() for e, v in g["values"].items()}
    report = validate_task(make_task(rows=_rows_with("yield_note",
                                                     {e: f"{v}" for e, v in values.items()})))
    leaks = [f for f in report.errors if f.code == "leak-values"]
    assert {f.file for f in leaks} == {"targets.csv"}
    assert any("column 'yield_note'" in f.message and "G1" in f.message for f in leaks)


def test_leak_column_rounded(make_task) -> None:
    # G1 values rounded to whole numbers (12.5 -> 12 or 13, 31.25 -> 31): still a leak.
    cells = {e: f"{round(v)}" for e, v in GROUPS["G1"]["values"].items()}
    cells.update({e: "7" for e in GROUPS["G2"]["values"]})
    report = validate_task(make_task(rows=_rows_with("score", cells)))
    assert any(f.code == "leak-values" and "G1" in f.message for f in report.errors)


def test_coarse_column_is_not_a_leak(make_task) -> None:
    # A 0/1 column rounds G2's values (0.9, 1.7...) only to two levels: no leak.
    cells = {e: str(int(v > 2)) for e, v in GROUPS["G2"]["values"].items()}
    cells.update({e: "1" for e in GROUPS["G1"]["values"]})
    report = validate_task(make_task(rows=_rows_with("flag", cells)))
    assert "leak-values" not in codes(report)


def test_leak_values_quoted_in_instruction(make_task) -> None:
    text = "Earlier runs gave 12.5, 55.0 and 31.25 % under these conditions.\n"
    report = validate_task(make_task(instruction=text))
    assert any(f.code == "leak-values" and f.file == "instruction.md" and "G1" in f.message
               for f in report.errors)


def test_leak_values_in_a_file_under_files(make_task) -> None:
    report = validate_task(make_task(files={"notes.txt": b"3.3 0.9 2.2 5.1 1.7\n"}))
    assert any(f.code == "leak-values" and f.file == "files/notes.txt" for f in report.errors)


def test_small_integers_in_text_are_not_a_leak(make_task) -> None:
    # "8 h", "20 C" and "55 mL" are whole numbers in prose; G1 has 8.0, 20.0 and 55.0.
    text = "Stir 8 h at 20 C in 55 mL, then 12 h more.\n"
    assert "leak-values" not in codes(validate_task(make_task(experiment=text)))


@pytest.mark.parametrize(("where", "text"), [
    ("experiment.md", "See https://doi.org/10.1234/EXAMPLE.5678 for details.\n"),
    ("instruction.md", "Adapted from: a study of test-reactions in FLOW.\n"),
    ("protocol.json", None),
    ("files/readme.txt", "PMID 31415926\n"),
])
def test_leak_source_identifier(make_task, where, text) -> None:
    if where == "protocol.json":
        task = make_task(protocol={"fixed_conditions": "as in doi:10.1234/example.5678",
                                   "groups": [{"group_id": g, "endpoint": "y"}
                                              for g in GROUPS]})
    elif where.startswith("files/"):
        task = make_task(files={where.split("/", 1)[1]: text.encode()})
    else:
        task = make_task(**{where.split(".")[0]: text})
    report = validate_task(task)
    assert any(f.code == "leak-source" and f.file == where for f in report.errors), \
        messages(report)


def test_leak_source_file_name(make_task) -> None:
    task = make_task(source={"package": "somepkg==1.2", "file": "data/Secret_cleaned.csv"},
                     instruction="Data: Secret_cleaned.csv\n")
    assert any(f.code == "leak-source" and "Secret_cleaned.csv" in f.message
               for f in validate_task(task).errors)


# ----------------------------------------------------------------------------- screens


def test_strictly_monotone_group_is_flagged_by_name(make_task) -> None:
    """A concentration series (paper 2.3, Figure 4): the exact check names the setting."""
    values = GROUPS["G1"]["values"]
    cells = {e: str(10 + rank) for rank, e in enumerate(sorted(values, key=values.get))}
    cells.update({e: SETTINGS[e][1] for e in GROUPS["G2"]["values"]})
    task = make_task(rows=_rows_with("concentration_mm", cells))
    report = validate_task(task)
    assert report.ok
    strict_trend = [f for f in report.warnings if f.code == "strictly-monotone"]
    assert len(strict_trend) == 1 and "group G1" in strict_trend[0].message
    assert "rises strictly with setting 'concentration_mm'" in strict_trend[0].message
    # The looser check does not repeat a group the exact one caught.
    assert "monotone-rho" not in codes(report, Severity.warning)
    strict = validate_task(task, strict=True)
    assert not strict.ok and "strictly-monotone" in codes(strict)


def test_strictly_monotone_falling_and_only_varied_setting(make_task) -> None:
    values = GROUPS["G1"]["values"]
    falling = sorted(values, key=values.get, reverse=True)
    cells = {e: f"{0.5 * (k + 1):g}" for k, e in enumerate(falling)}
    cells.update({e: SETTINGS[e][1] for e in GROUPS["G2"]["values"]})
    group_of = {e: gid for gid, g in GROUPS.items() for e in g["values"]}
    rows = [{"experiment_id": e, "group_id": group_of[e], "solvent": "THF",
             "dose_mg": cells[e]} for e in SETTINGS]
    found = [f for f in validate_task(make_task(rows=rows)).warnings
             if f.code == "strictly-monotone"]
    assert len(found) == 1
    assert "falls strictly with setting 'dose_mg' (the only setting varied in the group)" \
        in found[0].message


def test_a_tie_breaks_the_strict_trend_but_not_the_rho_check(make_task) -> None:
    """Two experiments at the same setting: not a strict series; |rho| 0.986 still warns."""
    values = GROUPS["G1"]["values"]
    order = sorted(values, key=values.get)
    cells = {e: str(10 + rank) for rank, e in enumerate(order)}
    cells[order[1]] = cells[order[0]]  # ranks 1.5, 1.5, 3..6 against 1..6
    cells.update({e: SETTINGS[e][1] for e in GROUPS["G2"]["values"]})
    report = validate_task(make_task(rows=_rows_with("concentration_mm", cells)))
    assert "strictly-monotone" not in codes(report, Severity.warning)
    near = [f for f in report.warnings if f.code == "monotone-rho"]
    # rho of (1.5, 1.5, 3, 4, 5, 6) with (1..6): hand-worked 0.985611 (scipy agrees).
    assert len(near) == 1 and "+0.986" in near[0].message and "'concentration_mm'" in \
        near[0].message


def test_monotone_rho_threshold_is_configurable(make_task) -> None:
    values = GROUPS["G1"]["values"]
    order = sorted(values, key=values.get)
    order[0], order[1] = order[1], order[0]  # one swap: rho = 1 - 6*2/(6*35) = 0.943
    cells = {e: str(10 + rank) for rank, e in enumerate(order)}
    cells.update({e: SETTINGS[e][1] for e in GROUPS["G2"]["values"]})
    task = make_task(rows=_rows_with("concentration_mm", cells))
    found = codes(validate_task(task), Severity.warning)
    assert "monotone-rho" not in found and "strictly-monotone" not in found
    loose = validate_task(task, screens=ScreenSettings(monotone_rho=0.9))
    assert "monotone-rho" in codes(loose, Severity.warning)


def test_narrow_relative_spread_warns(make_task) -> None:
    groups = {"G1": GROUPS["G1"], "G2": {"weight": 0.4, "values": {
        "E345": 100.0, "E671": 101.0, "E829": 100.5, "E194": 102.0, "E456": 101.5}}}
    report = validate_task(make_task(groups=groups))
    assert any(f.code == "narrow" and "G2" in f.message and "relative spread 0.020" in f.message
               for f in report.warnings)
    assert validate_task(make_task(groups=groups),
                         screens=ScreenSettings(min_relative_spread=0.01)).warnings == []


def test_values_within_stated_measurement_error_warn(make_task) -> None:
    protocol = {"fixed_conditions": "x", "groups": [
        {"group_id": "G1", "endpoint": "y", "measurement_error": 50.0},
        {"group_id": "G2", "endpoint": "y", "measurement_error": 0.1}]}
    report = validate_task(make_task(protocol=protocol))
    narrow = [f for f in report.warnings if f.code == "narrow"]
    assert len(narrow) == 1 and "G1" in narrow[0].message and "measurement error 50" in \
        narrow[0].message


def test_descriptive_ids_warn(make_task) -> None:
    values = {"XPhos-run": 12.5, "E902": 55.0, "E233": 31.25, "E781": 8.0, "E560": 47.5,
              "E118": 20.0}
    groups = {"G1": {"weight": 0.6, "values": values}, "G2": GROUPS["G2"]}
    SETTINGS["XPhos-run"] = ("toluene", "60")
    try:
        report = validate_task(make_task(groups=groups))
    finally:
        del SETTINGS["XPhos-run"]
    assert any(f.code == "not-anonymized" and "XPhos-run" in f.message for f in report.warnings)


def test_ids_numbered_in_measured_order_warn(make_task) -> None:
    values = GROUPS["G1"]["values"]
    renamed = {f"E{100 + k}": v for k, v in enumerate(sorted(values.values()))}
    for new, old in zip(renamed, sorted(values, key=values.get), strict=True):
        SETTINGS[new] = SETTINGS[old]
    try:
        groups = {"G1": {"weight": 0.6, "values": renamed}, "G2": GROUPS["G2"]}
        report = validate_task(make_task(groups=groups))
    finally:
        for new in renamed:
            del SETTINGS[new]
    assert any(f.code == "not-anonymized" and "follow the measured order" in f.message
               for f in report.warnings)


def test_rows_in_measured_order_warn(make_task) -> None:
    values = {e: v for g in GROUPS.values() for e, v in g["values"].items()}
    rows = _rows_with("temperature_c", {e: SETTINGS[e][1] for e in SETTINGS})
    rows.sort(key=lambda r: values[r["experiment_id"]])
    report = validate_task(make_task(rows=rows))
    assert any(f.code == "presented-order" and f.file == "targets.csv"
               for f in report.warnings)


# ----------------------------------------------------------------------------- command line


def test_cli_validate_exit_codes_and_messages(make_task) -> None:
    good = make_task()
    out = run_module(["spu", "task", "validate", str(good)])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "OK (0 error(s), 0 warning(s))" in out.stdout
    (good / "protocol.json").unlink()
    out = run_module(["spu", "task", "validate", str(good)])
    assert out.returncode == 1
    assert "error: protocol.json: required file is missing" in out.stdout


def test_cli_validate_strict_and_json(make_task) -> None:
    values = {e: v for g in GROUPS.values() for e, v in g["values"].items()}
    rows = _rows_with("temperature_c", {e: SETTINGS[e][1] for e in SETTINGS})
    rows.sort(key=lambda r: values[r["experiment_id"]])
    task = make_task(rows=rows)
    assert run_module(["spu", "task", "validate", str(task)]).returncode == 0
    out = run_module(["spu", "task", "validate", str(task), "--strict", "--json"])
    assert out.returncode == 1
    [report] = json.loads(out.stdout)
    assert report["ok"] is False
    assert {"severity": "error", "file": "targets.csv", "code": "presented-order"}.items() <= \
        next(f for f in report["findings"] if f["code"] == "presented-order").items()


def test_whole_numbers_count_when_most_values_are_quoted(make_task) -> None:
    # Integer counts: 4 of the 5 values quoted as whole numbers reach the 75% bar.
    counts = {"E345": 33.0, "E671": 19.0, "E829": 42.0, "E194": 57.0, "E456": 71.0}
    groups = {"G1": GROUPS["G1"], "G2": {"weight": 0.4, "values": counts}}
    leaking = validate_task(make_task(groups=groups, experiment="Counts: 33, 19, 42, 57.\n"))
    assert any(f.code == "leak-values" and "quotes 4 of the 5" in f.message
               for f in leaking.errors)
    three = validate_task(make_task(groups=groups, experiment="Counts: 33, 19 and 42.\n"))
    assert "leak-values" not in codes(three)
