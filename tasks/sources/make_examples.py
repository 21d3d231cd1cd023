"""Write the two small example tasks (illustrative values, not measurements).

They exist so that the default job and the tests have something to run before the
real tasks are built: ``python tasks/sources/make_examples.py``. Ids are anonymized
and the row order is random, both seeded, exactly as a built task.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import yaml

from spu.tasks.builder import general_instruction

ROOT = Path(__file__).resolve().parents[1]

EXAMPLES = [
    {
        "id": "example-coupling-conditions",
        "title": "Example: ranking reaction conditions of a cross-coupling by yield",
        "discipline": "chemistry",
        "subfield": "reaction optimization",
        "procedure": (
            "Each experiment couples the same aryl bromide (0.5 mmol) with the same boronic "
            "acid (0.75 mmol) under one set of conditions: the varied settings are listed in "
            "targets.csv. Reactions run for 16 h under nitrogen; yields are determined by "
            "calibrated HPLC against an internal standard."
        ),
        "columns": ["temperature_c", "catalyst_loading_mol_pct", "solvent", "base"],
        "groups": [
            {
                "group_id": "G1",
                "endpoint": "HPLC yield of the biaryl product (%)",
                "unit": "%",
                "weight": 1.0,
                "rows": [
                    (60, 1.0, "toluene", "K3PO4", 41.0),
                    (80, 1.0, "toluene", "K3PO4", 63.5),
                    (100, 1.0, "toluene", "K3PO4", 58.2),
                    (80, 2.5, "dioxane", "K2CO3", 71.9),
                    (80, 0.5, "dioxane", "K2CO3", 37.4),
                    (100, 2.5, "DMF", "Cs2CO3", 22.8),
                    (60, 2.5, "THF", "K3PO4", 49.1),
                    (80, 1.0, "THF/water", "K2CO3", 80.3),
                ],
            }
        ],
    },
    {
        "id": "example-electrolytes-and-films",
        "title": "Example: ranking electrolytes by conductivity and films by strength",
        "discipline": "materials science",
        "subfield": "energy storage and polymers",
        "procedure": (
            "Group G1: 1 M lithium salt solutions, conductivity measured by impedance "
            "spectroscopy at 25 C. Group G2: solution-cast polymer films (60 um), tensile "
            "strength measured at 5 mm/min; values are means of five specimens."
        ),
        "columns": ["salt_or_polymer", "solvent_or_filler", "additive_wt_pct", "temperature_c"],
        "groups": [
            {
                "group_id": "G1",
                "endpoint": "ionic conductivity at 25 C (mS/cm)",
                "unit": "mS/cm",
                "weight": 0.6,
                "rows": [
                    ("LiPF6", "EC/DMC", 0, 25, 10.7),
                    ("LiPF6", "PC", 0, 25, 5.8),
                    ("LiTFSI", "DME", 0, 25, 13.9),
                    ("LiTFSI", "sulfolane", 0, 25, 2.1),
                    ("LiBF4", "EC/DMC", 2, 25, 4.9),
                    ("LiFSI", "EC/EMC", 0, 25, 11.6),
                ],
            },
            {
                "group_id": "G2",
                "endpoint": "tensile strength (MPa)",
                "unit": "MPa",
                "weight": 0.4,
                "rows": [
                    ("PVA", "none", 0, 25, 48.0),
                    ("PVA", "cellulose nanofiber", 5, 25, 61.0),
                    ("PVA", "glycerol", 10, 25, 31.0),
                    ("PVA", "cellulose nanofiber", 10, 25, 61.0),
                ],
            },
        ],
    },
]


def build(example: dict, seed: int) -> None:
    rng = random.Random(seed)
    out = ROOT / example["id"]
    (out / "hidden").mkdir(parents=True, exist_ok=True)
    n = sum(len(g["rows"]) for g in example["groups"])
    codes = rng.sample(range(100, 1000), n)
    records, answers, contract_groups, k = [], {}, [], 0
    for g in example["groups"]:
        items = []
        for row in g["rows"]:
            eid = f"E{codes[k]}"
            k += 1
            records.append({"experiment_id": eid, "group_id": g["group_id"],
                            **dict(zip(example["columns"], row[:-1], strict=True))})
            answers.setdefault(g["group_id"], {})[eid] = row[-1]
            items.append(eid)
        rng.shuffle(items)
        contract_groups.append({"group_id": g["group_id"], "endpoint": g["endpoint"],
                                "weight": g["weight"], "items": items})
    rng.shuffle(records)
    with open(out / "targets.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["experiment_id", "group_id", *example["columns"]])
        writer.writeheader()
        writer.writerows(records)
    meta = {"id": example["id"], "version": "1.0", "title": example["title"],
            "discipline": example["discipline"], "subfield": example["subfield"],
            "visibility": "public"}
    (out / "task.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    (out / "contract.json").write_text(json.dumps(
        {"task_id": example["id"], "task_version": "1.0", "groups": contract_groups}, indent=1))
    (out / "protocol.json").write_text(json.dumps({
        "fixed_conditions": example["procedure"],
        "groups": [{"group_id": g["group_id"], "endpoint": g["endpoint"], "unit": g["unit"],
                    "direction": "order from lowest to highest"} for g in example["groups"]],
    }, indent=1))
    (out / "experiment.md").write_text(
        f"# Shared procedure\n\n{example['procedure']}\n\nEvery experiment is described by "
        "the same template: its anonymized id, its comparison group and its varied "
        "settings in targets.csv.\n")
    groups_text = "\n".join(
        f"- {g['group_id']} ({len(g['rows'])} experiments, weight {g['weight']}): {g['endpoint']}"
        for g in example["groups"])
    general = general_instruction(example["id"], "1.0")
    (out / "instruction.md").write_text(
        f"{general}\n## This task\n\n{example['title'].removeprefix('Example: ').capitalize()}."
        f"\n\nComparison groups:\n\n{groups_text}\n")
    (out / "hidden" / "answers.json").write_text(json.dumps(
        {"task_id": example["id"], "task_version": "1.0", "groups": answers,
         "source": {"title": "Illustrative example values (not measurements)"}}, indent=1))


if __name__ == "__main__":
    for i, example in enumerate(EXAMPLES):
        build(example, seed=1000 + i)
