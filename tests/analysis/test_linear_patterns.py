"""The labeller's and the analysis's patterns on an agent's crafted text: linear, same answers.

A helper's audit found patterns whose backtracking made a crafted command, output or
report cost quadratic (one, exponential) time. Each rewrite is checked here against the
pattern it replaced, kept as the oracle, on seeded random text made of the pattern's own
pieces; then the crafted inputs are read whole, at sizes the old patterns took minutes to
days on. (No timing asserted: a superlinear reader would not end.)
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import pytest

from spu import activities
from spu.activities import GPU_ERRORS, RunContext, label_call, python_signals
from spu.analysis import detectors
from spu.analysis.rankings import rankings_in_text
from spu.analysis.runs import stated_expected_rho
from spu.tools.egress import _DOWNLOAD, count_shell_downloads

OLD_WRITE_OPS = re.compile(r"(?<![<>&])>>?(?![&>])|\btee\b|\bcp\b|\bmv\b|"
                           r"open\([^)]*['\"][wa]b?\+?['\"]|"
                           r"\.write\(|json\.dump\(|write_text\(|to_csv\(|to_json\(|savetxt\(|"
                           r"\bdump\(")
OLD_WRITES_CODE = re.compile(r">\s*['\"]?[^\s'\"]+\.(?:py|sh|r|jl|c|inp|in)\b")
OLD_LIBRARY_LOAD = re.compile(r"lib(?:cud\w*|cublas\w*|cufft\w*|nvrtc\w*|cusparse\w*|"
                              r"cusolver\w*|nccl\w*)[^\n]{0,60}(?:cannot open|not found|No such)|"
                              r"(?:cannot open shared object|Could not load library)[^\n]{0,60}"
                              r"cu", re.IGNORECASE)
# The old install pattern, but for its one change: an option in a Python list is a quoted
# word with no quote inside (``\S+`` there made ``'pip', '-x', '-x', ...`` exponential).
OLD_INSTALL = re.compile(
    r"(?:^|[\s;&|(\"'`!])(?:(?:python3?|uv)\s+-m\s+pip|pip3?|uv\s+pip|uv|conda|mamba|micromamba|"
    r"apt(?:-get)?|npm|cargo|gem|brew|dnf|yum|apk)\s+(?:-\S+\s+)*(?:install|add)\b|"
    r"install\.packages\(|pip\.main\(\[['\"]install|['\"]pip3?['\"]\s*,\s*"
    r"(?:['\"]-[^\s'\"]+['\"]\s*,\s*)*['\"]install['\"]")
OLD_EXPECTED = re.compile(
    r"expect\w*[^\n.]{0,60}?(?:spearman|\brho\b|ρ|rank correlation)[^\n]{0,40}?"
    r"(-?\d?\.\d+)(?:\s*(?:-|–|to)\s*(-?\d?\.\d+))?|"
    r"(?:spearman|\brho\b|ρ)[^\n.]{0,40}?expect\w*[^\n]{0,30}?"
    r"(-?\d?\.\d+)(?:\s*(?:-|–|to)\s*(-?\d?\.\d+))?", re.IGNORECASE)
OLD_MONTE_CARLO = re.compile(
    r"\b(?:np\.random|numpy\.random|rng|random|default_rng\([^)]*\))\s*\."
    r"(?:normal|uniform|lognormal|dirichlet|choice|permutation|shuffle|beta|gamma|"
    r"poisson|multivariate_normal|binomial|exponential|standard_normal|gauss|"
    r"integers|randint|triangular|rand|randn|random|sample)\s*\(|\.rvs\s*\(|"
    r"\bmonte[_ ]?carlo\b", re.IGNORECASE)
OLD_ASSIGN = re.compile(r"^\s*[A-Za-z_][\w.\[\]'\"]*\s*(?::\s*[\w\[\], .]+)?=(?!=)\s*"
                        r"(?:[A-Za-z_][\w.]*\()?")


def _old_unwrap(words: list[str]) -> list[str]:
    while words:
        head = words[0]
        if re.fullmatch(r"\w+=.*", head):
            words = words[1:]
        elif head in ("uv", "conda", "micromamba", "mamba"):
            if len(words) > 1 and words[1] == "run":
                words = words[2:]
                while words and words[0].startswith("-"):
                    words = words[2:] if words[0] in ("-n", "-p", "--name") else words[1:]
            else:
                break
        elif head in activities._WRAPPERS:
            words = words[1:]
            while words and (words[0].startswith("-") or re.fullmatch(r"[\d.]+[smhd]?",
                                                                       words[0])):
                takes_value = words[0] in ("-np", "-n", "-s", "--signal", "-k", "-N", "-c")
                words = words[2:] if takes_value and len(words) > 1 else words[1:]
        else:
            break
    return words


def _old_expected(report: str) -> float | None:
    m = OLD_EXPECTED.search(report)
    if not m:
        return None
    low, high = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    value = float(low) if high is None else (float(low) + float(high)) / 2
    return round(value, 6) if -1 <= value <= 1 else None


def _texts(pieces: list[str], count: int, most: int, seed: int = 0):
    rng = random.Random(seed)
    for _ in range(count):
        yield "".join(rng.choice(pieces) for _ in range(rng.randint(0, most)))


def _found(pattern) -> Callable[[str], bool]:
    return lambda text: pattern.search(text) is not None


LIBRARY = GPU_ERRORS[0][1]
MONTE_CARLO = activities._CALL_FAMILIES[2][0]
CASES: list[tuple[str, Callable[[str], object], Callable[[str], object], list[str], int]] = [
    ("write_ops", _found(activities._WRITE_OPS),
     _found(OLD_WRITE_OPS),
     ["open(", ")", "'", '"', "w", "a", "b", "+", "x", ">", "&", "tee", " ", ".write("], 12),
    ("writes_code", _found(activities._WRITES_CODE),
     _found(OLD_WRITES_CODE),
     [">", " ", "'", '"', "a", ".", "py", "sh", "\n", "b", "in", "inp"], 14),
    ("library_load", _found(LIBRARY), _found(OLD_LIBRARY_LOAD),
     ["lib", "cud", "CUD", "cublas", "nccl", "art", "_", " ", "\n", ".so", ": ", "cannot open",
      "not found", "No such", "x" * 30, "Could not load library", " cu"], 10),
    ("install", _found(activities._INSTALL), _found(OLD_INSTALL),
     ["pip", "pip3", " ", "  ", "\n", "-", "-q", "-'", "install", "add", "uv", "python -m ",
      "'", '"', ",", "'pip'", "'-q'", "'install'", ";", "(", "x", "apt-get", "install.packages(",
      "pip.main(['install"], 12),
    ("expected_rho", stated_expected_rho, _old_expected,
     ["expect", "Expected", "ed", " ", "\n", ".", "spearman", "Spearman", " rho ", "ρ",
      "rank correlation", "0.4", ".3", "-0.2", "1", " - ", " to ", "–", "x", "of ", "0"], 12),
    ("monte_carlo", _found(MONTE_CARLO), _found(OLD_MONTE_CARLO),
     ["default_rng(", "np.random", "rng", "(", ")", " ", ".", "normal", "(", "seed=1", "x",
      ".rvs(", "monte carlo", "_"], 10),
    ("shell_downloads", lambda t: count_shell_downloads([t]), lambda t: len(_DOWNLOAD.findall(t)),
     ["pip", "pip3", "pip3.11", "python", "python3 -m pip", " -m ", "apt", "apt-get", " ", "\n",
      "-", "-q", "-curl", "-pip", "install", "download", "curl", "wget", "uv pip install",
      "conda install", "x", ";", "'", "git clone", "hf download", ".", "_"], 14),
    ("assign", lambda t: (m := detectors._ASSIGN.match(t)) and m.end(),
     lambda t: (m := OLD_ASSIGN.match(t)) and m.end(),
     ["a", " ", ":", "=", "\t", ",", ".", "[", "]", "1", "==", "np.array(", "x"], 12),
]


@pytest.mark.parametrize("new, old, pieces, most", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_each_rewrite_answers_as_the_pattern_it_replaced(new, old, pieces, most) -> None:
    answers = set()
    for text in _texts(pieces, 20_000, most):
        answer = old(text)
        assert new(text) == answer, text
        answers.add(answer if not isinstance(answer, bool) else int(answer))
    assert len(answers) > 1  # the pieces make matches and misses


def test_unwrapping_by_index_leaves_the_words_slicing_left() -> None:
    pieces = ["sudo", "timeout", "60", "5s", "-np", "4", "-n", "x", "A=1", "uv", "run", "conda",
              "-p", "--name", "env", "mpirun", "python3", "-c", "nohup", "-s"]
    rng = random.Random(3)
    for _ in range(20_000):
        words = [rng.choice(pieces) for _ in range(rng.randint(0, 10))]
        assert activities._unwrap(words) == _old_unwrap(words), words


def test_the_install_patterns_one_change() -> None:
    """The one text the install pattern now reads otherwise: a quote inside a list item."""
    assert activities._INSTALL.search("['pip', '-q', 'install', 'x']")
    assert activities._INSTALL.search("['pip', \"-q\", '--user', 'install']")
    assert not activities._INSTALL.search("['pip', '-q'x', 'install']")


N = 200_000


@pytest.mark.parametrize("tool, arguments, output, activity", [
    pytest.param("Write", {"file_path": "a.py", "content": "run(['pip'," + "'-x'," * 60 + "'y'])"},
                 "", "code_writing", id="install-list-exponential"),
    pytest.param("Bash", {"command": "python3 x.py"}, "libcud" * (N // 6), "other_python",
                 id="library-load-output"),
    pytest.param("Bash", {"command": "echo install " + "'pip -" * (N // 6)}, "", "other",
                 id="install-options"),
    pytest.param("Bash", {"command": "echo checkpoint; " * (N // 17) + "ls"}, "",
                 "viewing_files", id="print-only-commands-then-a-view"),
    pytest.param("Bash", {"command": "python3 -c 'print(1)' " + "open(" * (N // 5) + " > y"},
                 "", "other_python", id="open-without-close"),
    pytest.param("Write", {"file_path": "a.py", "content": "default_rng(" * (N // 12)}, "",
                 "code_writing", id="default-rng-without-close"),
    pytest.param("Bash", {"command": "echo " + "a>" * (N // 2)}, "", "notes_and_data",
                 id="redirect-chain"),
])
def test_crafted_calls_are_labelled_whole(tool, arguments, output, activity) -> None:
    """The labels are the old patterns' (checked on the same inputs at 1/100 the size)."""
    label = label_call(tool, arguments, output, RunContext())
    assert label.activity.value == activity


def test_crafted_reports_and_tables_are_read_whole() -> None:
    assert stated_expected_rho("expect" * (N // 6)) is None
    # one word of N characters: the rho before its last "expect" finds the number after it
    assert stated_expected_rho("expectρ" * (N // 7) + " 0.4") == 0.4
    assert stated_expected_rho("expectρ" * (N // 7) + "." + " " * 40 + "0.4") is None
    assert stated_expected_rho("ρ expect" * 3 + " 0.4") == 0.4
    assert detectors._ASSIGN.match("a:" + " " * N + "1 2") is None
    assert python_signals("'pip'," + "'-x'," * 80).install is False
    assert activities.module_family("a." * N + "a") is None  # every prefix was joined
    assert activities.module_family("pyscf.semiempirical.x") == "semiempirical_qm"
    assert activities._unwrap(["sudo"] * N + ["xtb"]) == ["xtb"]  # a slice a word
    # a script of many imports run again and again: its signals were merged at each run
    ctx = RunContext()
    label_call("Write", {"file_path": "a.py",
                         "content": "".join(f"import m{i}\n" for i in range(N // 10))}, "", ctx)
    label = label_call("Bash", {"command": "python3 a.py;" * (N // 13)}, "", ctx)
    assert label.activity.value == "other_python"
    # each "rankings" decoded the same unclosed object from its brace again
    assert rankings_in_text('{"rankings": [' + '"rankings", ' * (N // 12)) == []
    # counted by the runner for every run: each ``pip`` inside an option walked them again
    assert count_shell_downloads(["pip -" * (N // 5), "pip " + "-pip " * (N // 5) + "install"]) == 1


def test_rankings_nested_past_the_stack_are_no_ranking() -> None:
    """An agent's text of 3,000 nested ``{"rankings":`` raised RecursionError out of the
    run's reading (only ValueError was caught): now it is no ranking, and one further on
    is still found."""
    nested = '{"rankings": ' * 3000
    assert rankings_in_text(nested) == []
    assert rankings_in_text(nested + '{"rankings": [{"group_id": "G", "order": ["b", "a"]}]}') == [
        {"G": ["b", "a"]}]
