"""Labelling an agent's crafted text: time grows linearly with its length.

    .venv/bin/python benchmarks/label_bench.py [--size 100000] [--repeat 3]

Each input is one a helper's audit built against a pattern of the labeller or the
analysis (here-documents, comments, install options, ``open(``, ``default_rng(``,
``lib...`` in output, a report's expected rho, a typed table's assignment). Each is read
whole at ``--size`` characters and at twice that, and beside it, in the same run, the
reference: one plain regular-expression pass over the same text (its words). Printed:
seconds at n and 2n, the growth (2.0 is linear, 4.0 quadratic) and the ratio to the
reference at 2n. Goal: growth under 3 for every input (before the rewrite, the worst were
quadratic and one exponential: a 206-character list of pip options, a day).
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable

from spu.activities import RunContext, _simple_commands, label_call, python_signals
from spu.analysis.detectors import typed_table
from spu.analysis.runs import stated_expected_rho

_WORDS = re.compile(r"\S+")


def _bash(command: str) -> None:
    label_call("Bash", {"command": command}, "", RunContext())


def _output(output: str) -> None:
    label_call("Bash", {"command": "python3 x.py"}, output, RunContext())


def _write(content: str) -> None:
    label_call("Write", {"file_path": "a.py", "content": content}, "", RunContext())


INPUTS: dict[str, tuple[Callable[[int], str], Callable[[str], object]]] = {
    "heredoc word": (lambda n: "python3 - <<" + "P" * (n // 2) + "\n" + "x\n" * (n // 4), _bash),
    "cat headers": (lambda n: "cat > x.py <<A\n" * (n // 15), _bash),
    "blank lines in -c": (lambda n: "python3 -c '" + "\n" * n + "x'", _bash),
    "install options": (lambda n: "echo install " + "'pip -" * (n // 6), _bash),
    "pip list options": (lambda n: "run(['pip'," + "'-x'," * (n // 5) + "'y'])", _write),
    "open( unclosed": (lambda n: "python3 -c 'print(1)' " + "open(" * (n // 5) + " > y", _bash),
    "default_rng(": (lambda n: "default_rng(" * (n // 12), _write),
    "redirect chain": (lambda n: "echo " + "a>" * (n // 2), _bash),
    "libcud output": (lambda n: "libcud" * (n // 6), _output),
    "expected rho": (lambda n: "expectρ" * (n // 7) + ".", stated_expected_rho),
    "typed assign": (lambda n: "a:" + " " * n + "1 2", typed_table),
}


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        for cached in (python_signals, _simple_commands):  # each round reads afresh
            cached.cache_clear()
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    opt = parser.parse_args(argv)
    print(f"{'input':20} {'n s':>9} {'2n s':>9} {'growth':>7} {'vs ref':>8}")
    worst = 0.0
    for name, (make, read) in INPUTS.items():
        small, large = make(opt.size), make(2 * opt.size)
        t1 = _best(lambda: read(small), opt.repeat)  # noqa: B023 (called at once)
        t2 = _best(lambda: read(large), opt.repeat)  # noqa: B023
        ref = _best(lambda: _WORDS.findall(large), opt.repeat)  # noqa: B023
        growth = t2 / max(t1, 1e-9)
        worst = max(worst, growth)
        print(f"{name:20} {t1:9.4f} {t2:9.4f} {growth:7.2f} {t2 / max(ref, 1e-9):8.1f}")
    print(f"worst growth {worst:.2f} (goal: under 3; linear is 2)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
