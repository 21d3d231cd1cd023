"""Here-documents and comments in an agent's command, read in linear time.

The patterns these replaced are kept here as the oracle: on seeded random commands built
from here-document pieces, the new readers find exactly what the patterns found (and the
comment stripper keeps the same lines, so the signals of the code are the same). Then
the commands that made the patterns quadratic are labelled whole, at sizes the old
patterns took minutes on.
"""

from __future__ import annotations

import random
import re

import pytest

from spu import activities
from spu.activities import RunContext, label_call, python_signals
from spu.heredoc import cat_to_file, heredocs, without_heredocs

OLD_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1[^\n]*\n(.*?)\n\s*\2\s*(?:\n|$)", re.DOTALL)
OLD_CAT_TO_FILE = re.compile(
    r"\b(?:cat|tee)\s*(?:-a\s+)?>?\s*>?\s*['\"]?([^\s'\"<>|;&]+)['\"]?\s*"
    r"<<-?\s*(['\"]?)(\w+)\2[^\n]*\n(.*?)\n\s*\3\s*(?:\n|$)", re.DOTALL)
WORDS = ["EOF", "EO", "E", "EOFX", "PY", "P", "é", "_1", "X"]
SPACE = ["", " ", "\t", "\n", " \n ", "\n\n", "\x0b", "\u2028", "\xa0"]
HEADS = ["", "cat", "cat >", "cat > f.py ", "tee -a log ", "cat >>'a b' ", "cat -a ",
         "catalog ", "python3 - ", "x", "cat>f"]


def _command(rng: random.Random) -> str:
    """A command of here-document pieces: headers (quoted, unquoted, mismatched quotes,
    ``<<-``), closing words at line starts (indented, after blank lines, followed by
    text), and noise."""
    parts = []
    for _ in range(rng.randint(1, 12)):
        r = rng.random()
        if r < 0.35:
            quote = rng.choice(["", "", "'", '"', ""])
            close = quote if rng.random() < 0.8 else rng.choice(["", "'", '"'])
            parts.append(rng.choice(HEADS) + rng.choice(SPACE) + "<<" + rng.choice(["", "-"])
                         + rng.choice(SPACE) + quote + rng.choice(WORDS) + close
                         + rng.choice(["", " x", " | sh", ";"]) + rng.choice(["\n", "", " "]))
        elif r < 0.6:
            parts.append(rng.choice(SPACE) + rng.choice(WORDS) + rng.choice(SPACE))
        elif r < 0.8:
            parts.append(rng.choice(["\n", "\n\n", "  ", "a b", "print(1)", "'", '"', "<", ";"]))
        else:
            parts.append("\n" + rng.choice(["", " ", "\t"]) + rng.choice(WORDS)
                         + rng.choice(["", " ", "\n", " \n", "x"]))
    return "".join(parts)


@pytest.mark.parametrize("seed", range(4))
def test_here_documents_are_what_the_pattern_found(seed: int) -> None:
    rng = random.Random(seed)
    matched = 0
    for _ in range(5000):
        text = _command(rng)
        old = [(m.start(), m.end(), m.group(2), m.group(3)) for m in OLD_HEREDOC.finditer(text)]
        assert [(h.start, h.end, h.word, h.body) for h in heredocs(text)] == old, text
        assert without_heredocs(text) == OLD_HEREDOC.sub("\n", text), text
        old_cat = [(m.start(), m.end(), m.group(1), m.group(4))
                   for m in OLD_CAT_TO_FILE.finditer(text)]
        assert [(h.start, h.end, h.file, h.body) for h in cat_to_file(text)] == old_cat, text
        matched += bool(old) + bool(old_cat)
    assert matched > 500  # the pieces make matches, not only misses


@pytest.mark.parametrize("text, words", [
    ("cat <<EOFX\nbody\nEOF\n", ["EOF"]),          # backs off to a prefix a line closes
    ("cat <<EOF\nEOF", []),                         # no body line: no match
    ("cat <<EOF\n\nEOF", ["EOF"]),                  # an empty body line
    ("cat <<'EOF'\nbody\n   EOF  \nmore", ["EOF"]),  # an indented closing line
    ("cat <<'EOFX\nbody\nEOF\n", []),               # an unclosed quote never backs off
    ("python3 <<-PY\n\timport os\n\tPY", ["PY"]),
])
def test_the_patterns_quirks_are_kept(text: str, words: list[str]) -> None:
    assert [h.word for h in heredocs(text)] == words
    assert [m.group(2) for m in OLD_HEREDOC.finditer(text)] == words


def _old_strip(code: str) -> str:
    return re.sub(r"(?m)^\s*#.*$|\s+#[^'\"\n]*$", "", code)


def _lines(code: str) -> list[str]:
    return [line.rstrip() for line in code.split("\n") if line.strip()]


PIECES = ["#", " # ", "  ", "\t", "\n", "\n\n", "'", '"', "import numpy as np", "import torch",
          "x = 1", "np.random.normal(0, 1)", "torch.cuda.is_available()", "print('#')",
          "open('o.json', 'w')", "curve_fit", "\r", "\x0b", "\xa0",
          "from scipy.optimize import curve_fit", "   import os", "#!", "pip install x"]


def test_comments_are_stripped_to_the_same_lines_and_signals(monkeypatch) -> None:
    """Only blank space around a removed comment may differ; the signals of the code (what
    the labeller reads from it) are the same as under the old pattern."""
    rng = random.Random(7)
    signals = python_signals.__wrapped__
    for _ in range(10000):
        code = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 25)))
        assert _lines(activities._strip_comments(code)) == _lines(_old_strip(code)), code
        new = signals(code)
        with monkeypatch.context() as m:
            m.setattr(activities, "_strip_comments", _old_strip)
            assert signals(code) == new, code


N = 200_000  # the old patterns: minutes to hours at this size


@pytest.mark.parametrize("command, activity", [
    pytest.param("python3 - <<" + "P" * N + "\n" + "import torch\n" * (N // 13), "other_python",
                 id="long-word"),
    pytest.param("python3 - <<" + "P" * N + "\n" + "x = torch.zeros(3).cuda()\n" * 100 + "P\n",
                 "scientific_computation", id="long-word-closed-by-a-prefix"),
    pytest.param("cat > x.py <<A\n" * (N // 14), "code_writing", id="many-cat-headers"),
    pytest.param("python3 - <<A\n" * (N // 14), "other_python", id="many-unclosed"),
    pytest.param("python3 -c '" + "\n" * N + "x'", "other_python", id="blank-lines"),
    pytest.param("python3 -c '" + " " * N + "x'", "other_python", id="spaces"),
])
def test_crafted_commands_are_labelled_in_linear_time(command: str, activity: str) -> None:
    """Each of these took the old patterns quadratic time (an 18 KB one, 6 s); labelled
    whole now, as any command is. (No timing asserted: a quadratic reader would not end.)"""
    label = label_call("Bash", {"command": command}, "", RunContext())
    assert label.activity.value == activity
