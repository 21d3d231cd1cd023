#!/usr/bin/env python3
"""Consensus agent: copies the consensus submission computed on the host (standard library only).

``spu.harness.consensus`` puts ``rankings.json``, ``report.md`` and ``sources.json`` into
the folder ``--from`` names; this copies them to ``$SPU_OUTPUT_DIR``. Nothing there (no
member had a submission for the task): nothing is written, the run ends ``no_file``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

FILES = ("rankings.json", "report.md", "sources.json")


def main() -> int:
    """Copy the prepared files to the output folder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", required=True)
    args = parser.parse_args()
    out_dir = os.environ["SPU_OUTPUT_DIR"]
    os.makedirs(out_dir, exist_ok=True)
    copied = 0
    for name in FILES:
        path = os.path.join(args.source, name)
        if os.path.isfile(path):
            shutil.copyfile(path, os.path.join(out_dir, name))
            copied += 1
    print(f"consensus: copied {copied} file(s)" if copied else
          "consensus: no member has a submission for this task")
    return 0


if __name__ == "__main__":
    sys.exit(main())
