"""Rules that label a tool call: its activity, the method families it ran, its GPU work.

Paper appendix E.7: each tool call gets one primary activity by a fixed priority
(:data:`PRIORITY`), and the method families of the code it *executed*. A script is
credited when it runs, not when it is written: the rules remember what each written
file would do (:class:`ScriptSignals`) and credit it to the call that runs it.

The labeller is pure: :func:`label_call` takes the call and a :class:`RunContext` that
holds the run's paths and the signals of the scripts written so far, and returns a
:class:`CallLabel`; :meth:`RunContext.remember` is the only state it keeps between
calls (one entry per written script, never the script's text).

Traps of the format handled here:

- tool names differ by CLI: Claude Code ``Bash``/``Write``/``Read``/``Task``,
  ``mcp__<server>__<tool>`` for MCP; Codex ``exec_command``/``shell``/``apply_patch``/
  ``update_plan``, MCP as ``<server>__<tool>``, ``mcp__<server>__<tool>`` or
  ``<server>.<tool>``; the built-in web tools (``WebSearch``, ``WebFetch``, Codex
  ``web_search``) count as web like the audited service's ``search`` and ``fetch``;
- a Python program is often a shell heredoc (``python3 - <<'PY' ... PY``), a ``-c``
  string, or a file written earlier and run by name;
- a program that did not run (``command not found``, ``No module named``) is no
  method family;
- a ``curl`` of the task's own files (``file:///task/...``, loopback) is reading the
  inputs, not a download; a ``pip install`` inside Python is an installation.

Examples
--------
>>> ctx = RunContext()
>>> label_call("Bash", {"command": "pip install rdkit"}, "", ctx).activity.value
'software_install'
>>> label_call("mcp__spu__search", {"query": "x"}, "", ctx).activity.value
'web_search'
>>> _ = label_call("Write", {"file_path": "/workspace/a.py",
...                          "content": "from rdkit import Chem"}, "ok", ctx)
>>> label = label_call("Bash", {"command": "python a.py"}, "done", ctx)
>>> label.activity.value, label.families
('scientific_computation', ('cheminformatics',))
"""

from __future__ import annotations

import functools
import operator
import os
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from spu.heredoc import cat_to_file, heredocs, without_heredocs
from spu.patterns import AnyOf, Searcher, Swallowing
from spu.schema import Activity

PRIORITY: tuple[Activity, ...] = tuple(Activity)
"""The fixed priority of E.7, highest first (the order of :class:`~spu.schema.Activity`)."""

METHOD_FAMILIES: tuple[str, ...] = (
    "monte_carlo", "cheminformatics", "semiempirical_qm", "dft", "molecular_dynamics",
    "ml_potentials", "docking", "bioinformatics", "fitting_rate_equations",
)
"""The method families of E.7 and Figure 15a."""

MODULE_FAMILIES: dict[str, str] = {
    # cheminformatics
    "rdkit": "cheminformatics", "openbabel": "cheminformatics", "pybel": "cheminformatics",
    "mordred": "cheminformatics", "datamol": "cheminformatics", "molfeat": "cheminformatics",
    "chemprop": "cheminformatics", "cirpy": "cheminformatics", "pubchempy": "cheminformatics",
    "openeye": "cheminformatics", "oddt": "cheminformatics",
    # semiempirical quantum chemistry
    "xtb": "semiempirical_qm", "tblite": "semiempirical_qm", "dftbplus": "semiempirical_qm",
    "pyscf.semiempirical": "semiempirical_qm",
    # density functional theory
    "pyscf": "dft", "gpu4pyscf": "dft", "psi4": "dft", "gpaw": "dft", "qcengine": "dft",
    "ase.calculators.vasp": "dft", "ase.calculators.espresso": "dft",
    "ase.calculators.orca": "dft", "ase.calculators.nwchem": "dft", "pyberny": "dft",
    # molecular dynamics
    "openmm": "molecular_dynamics", "simtk": "molecular_dynamics",
    "mdtraj": "molecular_dynamics", "MDAnalysis": "molecular_dynamics",
    "gromacs": "molecular_dynamics", "lammps": "molecular_dynamics",
    "hoomd": "molecular_dynamics", "openmmtools": "molecular_dynamics",
    "ase.md": "molecular_dynamics", "jax_md": "molecular_dynamics",
    "openff": "molecular_dynamics",
    # machine-learned interatomic potentials
    "mace": "ml_potentials", "torchani": "ml_potentials", "chgnet": "ml_potentials",
    "m3gnet": "ml_potentials", "matgl": "ml_potentials", "nequip": "ml_potentials",
    "allegro": "ml_potentials", "sevenn": "ml_potentials", "orb_models": "ml_potentials",
    "fairchem": "ml_potentials", "ocpmodels": "ml_potentials", "aimnet": "ml_potentials",
    "aimnet2": "ml_potentials", "schnetpack": "ml_potentials", "deepmd": "ml_potentials",
    "mattersim": "ml_potentials",
    # docking
    "vina": "docking", "meeko": "docking", "smina": "docking", "gnina": "docking",
    "AutoDockTools": "docking", "diffdock": "docking", "pdbfixer": "docking",
    # sequence and structure bioinformatics
    "Bio": "bioinformatics", "pysam": "bioinformatics", "pyhmmer": "bioinformatics",
    "esm": "bioinformatics", "prody": "bioinformatics", "biotite": "bioinformatics",
    "freesasa": "bioinformatics", "anarci": "bioinformatics", "abnumber": "bioinformatics",
    "parasail": "bioinformatics", "pyrosetta": "bioinformatics", "colabfold": "bioinformatics",
    "transformers.models.esm": "bioinformatics", "dssp": "bioinformatics",
    # fitting and rate equations
    "lmfit": "fitting_rate_equations", "cantera": "fitting_rate_equations",
    "tellurium": "fitting_rate_equations", "kinetics": "fitting_rate_equations",
    # Monte Carlo sampling libraries
    "emcee": "monte_carlo", "pymc": "monte_carlo", "pymc3": "monte_carlo",
    "numpyro": "monte_carlo", "arviz": "monte_carlo",
}
"""Python module (or its first dotted parts) -> method family."""
_MOST_MODULE_PARTS = max(name.count(".") + 1 for name in MODULE_FAMILIES)

PROGRAM_FAMILIES: dict[str, str] = {
    "obabel": "cheminformatics", "babel": "cheminformatics",
    "xtb": "semiempirical_qm", "crest": "semiempirical_qm", "mopac": "semiempirical_qm",
    "MOPAC2016.exe": "semiempirical_qm", "dftb+": "semiempirical_qm", "sqm": "semiempirical_qm",
    "orca": "dft", "g16": "dft", "g09": "dft", "psi4": "dft", "cp2k": "dft", "cp2k.popt": "dft",
    "cp2k.psmp": "dft", "pw.x": "dft", "vasp": "dft", "vasp_std": "dft", "vasp_gam": "dft",
    "nwchem": "dft", "gpaw": "dft", "qchem": "dft", "ridft": "dft", "dscf": "dft",
    "siesta": "dft", "abinit": "dft",
    "gmx": "molecular_dynamics", "gmx_mpi": "molecular_dynamics", "lmp": "molecular_dynamics",
    "lmp_serial": "molecular_dynamics", "lmp_mpi": "molecular_dynamics",
    "namd2": "molecular_dynamics", "namd3": "molecular_dynamics", "pmemd": "molecular_dynamics",
    "pmemd.cuda": "molecular_dynamics", "sander": "molecular_dynamics",
    "vina": "docking", "qvina": "docking", "qvina2": "docking", "smina": "docking",
    "gnina": "docking", "rbdock": "docking", "ledock": "docking",
    "blastp": "bioinformatics", "blastn": "bioinformatics", "blastx": "bioinformatics",
    "psiblast": "bioinformatics", "hmmscan": "bioinformatics", "hmmsearch": "bioinformatics",
    "jackhmmer": "bioinformatics", "mafft": "bioinformatics", "muscle": "bioinformatics",
    "clustalo": "bioinformatics", "needle": "bioinformatics", "water": "bioinformatics",
    "mmseqs": "bioinformatics", "diamond": "bioinformatics", "mkdssp": "bioinformatics",
    "dssp": "bioinformatics", "foldseek": "bioinformatics", "TMalign": "bioinformatics",
    "colabfold_batch": "bioinformatics", "samtools": "bioinformatics", "bwa": "bioinformatics",
    "bowtie2": "bioinformatics", "RNAfold": "bioinformatics",
}
"""Executable name -> method family (a program of that family that ran)."""

_DRAWS = (r"normal|uniform|lognormal|dirichlet|choice|permutation|shuffle|beta|gamma|poisson|"
          r"multivariate_normal|binomial|exponential|standard_normal|gauss|integers|randint|"
          r"triangular|rand|randn|random|sample")
# Calls that mark a family inside executed Python, whatever is imported.
_CALL_FAMILIES: tuple[tuple[Searcher, str], ...] = (
    (re.compile(r"\b(?:curve_fit|least_squares|polyfit|lmfit|minimize_scalar|leastsq|"
                r"odeint|solve_ivp|ode\(|Model\(\w*\)\.fit|nls|fit_kinetics)\s*\("),
     "fitting_rate_equations"),
    (re.compile(r"\b(?:pairwise2|PairwiseAligner|pairwise_alignment|align\.globalxx|"
                r"align\.localxx|smith_waterman|needleman_wunsch)\b"), "bioinformatics"),
    (AnyOf(re.compile(r"\b(?:np\.random|numpy\.random|rng|random)\s*\.(?:" + _DRAWS + r")\s*\(|"
                      r"\.rvs\s*\(|\bmonte[_ ]?carlo\b", re.IGNORECASE),
           # ``default_rng(...)`` to its ``)``: a start that fails swallows what the
           # ``default_rng(`` after it would walk (``default_rng(`` repeated: quadratic)
           Swallowing(r"\bdefault_rng\((?:[^)]*\)\s*\.(?:" + _DRAWS + r")\s*\(|(?P<skip>[^)]*+))",
                      re.IGNORECASE)), "monte_carlo"),
)

_GPU_CODE = re.compile(
    r"\.cuda\(|\.to\(\s*['\"]cuda|device\s*=\s*['\"]cuda|torch\.device\(\s*['\"]cuda|"
    r"\bcupy\b|\bgpu4pyscf\b|getPlatformByName\(\s*['\"](?:CUDA|OpenCL)|numba\.cuda|"
    r"['\"]/?GPU:\d['\"]|jax\.devices\(\s*['\"]gpu|\.to_gpu\(|tf\.device\(")
_GPU_PROGRAM = re.compile(
    r"(?:\s-nb\s+gpu|\s-gpu_id|\s--gpu\b|\s-gpu\b|--device[ =]+(?:cuda|\d)|\bpmemd\.cuda\b|"
    r"--cuda\b|--use-gpu\b|-gpu\s+on)")
_GPU_NAMED = re.compile(
    r"(?:cuda:\d|\bon (?:the )?GPU\b|Using (?:the )?(?:GPU|CUDA|device: cuda)|device\(type='cuda'|"
    r"\bPlatform:? CUDA\b|NVIDIA (?:H\d+|A\d+|L\d+|RTX|GeForce|Tesla|GH\d+)|Tesla [A-Z]\d+|"
    r"\bH20\b|\bGPU \d: )", re.IGNORECASE)
_PROBE_CODE = re.compile(
    r"is_available\(\)|device_count\(\)|get_device_name|__version__|sys\.version|"
    r"platform\.|find_spec|importlib|cpu_count|virtual_memory|shutil\.which")
GPU_ERRORS: tuple[tuple[str, Searcher], ...] = (
    # ``lib`` + name + ``\w*``: a start that fails swallows its word, whose later starts
    # would walk the same word to its end (``libcudlibcud...``: quadratic)
    ("library_load", AnyOf(
        Swallowing(r"lib(?:cud|cublas|cufft|nvrtc|cusparse|cusolver|nccl)(?:\w*[^\n]{0,60}"
                   r"(?:cannot open|not found|No such)|(?P<skip>\w*+))", re.IGNORECASE),
        re.compile(r"(?:cannot open shared object|Could not load library)[^\n]{0,60}cu",
                   re.IGNORECASE))),
    ("out_of_memory", re.compile(r"CUDA out of memory|OutOfMemoryError|cudaErrorMemoryAllocation|"
                                 r"CUDA_ERROR_OUT_OF_MEMORY", re.IGNORECASE)),
    ("no_device", re.compile(r"no CUDA-capable device|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE|"
                             r"Found no NVIDIA driver|Torch not compiled with CUDA",
                             re.IGNORECASE)),
    ("driver", re.compile(r"CUDA driver version is insufficient|driver/library version "
                          r"mismatch|CUDA_ERROR_\w+|cudaError\w+", re.IGNORECASE)),
    ("other_cuda", re.compile(r"CUDA error|RuntimeError: CUDA|CUBLAS_STATUS_\w+|"
                              r"an illegal memory access", re.IGNORECASE)),
)
"""Kinds of GPU error named in a program's output (Figure 22c), first match wins."""

# ``pip [options] install`` and its kin. ``python -m pip``, ``uv -m pip`` and ``uv pip`` are
# not spelled out: their ``pip`` follows a space, so ``pip`` alone matches there, with the
# same options after it. The options are possessive (a shorter option or space cannot be
# followed by another option or the word), and a start that fails swallows its options:
# a program inside one (``-x;pip``) is followed by the same options, to the same end (an
# option of ``'pip -'`` repeated made it quadratic). The mark before the program is looked
# behind at, not taken: a skip may end on it.
_INSTALL_COMMAND = Swallowing(
    r"(?:^|(?<=[\s;&|(\"'`!]))(?:pip3?|uv|conda|mamba|micromamba|apt(?:-get)?|npm|cargo|gem|"
    r"brew|dnf|yum|apk)\s++(?:-\S++\s++)*+(?:(?:install|add)\b|(?P<skip>))")
# An option in a Python list is a quoted word with no quote inside (``\S+`` there split
# ``'-x','-y'`` in 2**k ways: exponential).
_INSTALL = AnyOf(_INSTALL_COMMAND, re.compile(
    r"install\.packages\(|pip\.main\(\[['\"]install|['\"]pip3?['\"]\s*,\s*"
    r"(?:['\"]-[^\s'\"]++['\"]\s*,\s*)*+['\"]install['\"]"))
_DOWNLOAD_PROGRAMS = frozenset({"curl", "wget", "aria2c", "lynx", "w3m", "links"})
_URL = re.compile(r"\b(?:https?|ftp|file)://[^\s'\"<>)]+", re.IGNORECASE)
_PY_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import|import[ \t]+([\w., \t]+))",
                        re.MULTILINE)
_NOT_FOUND_MODULE = re.compile(r"No module named '?([\w.]+)")
_COMMAND_NOT_FOUND = re.compile(r"(?<![\w.+-])([\w.+-]+): (?:command )?not found")
_WRITE_OPS = AnyOf(
    re.compile(r"(?<![<>&])>>?(?![&>])|\btee\b|\bcp\b|\bmv\b|"
               r"\.write\(|json\.dump\(|write_text\(|to_csv\(|to_json\(|savetxt\(|\bdump\("),
    # ``open(`` to its ``)``: a start that fails swallows what later ``open(`` would walk
    Swallowing(r"open\((?:[^)]*['\"][wa]b?\+?['\"]|(?P<skip>[^)]*+))"))
_SUBMISSION_NAMES = re.compile(r"rankings\.json|report\.md|sources\.json|SPU_OUTPUT_DIR|/output\b")
# A job sent to the background: ``cmd &`` (not ``&&``, ``>&``), nohup, setsid, disown, screen,
# tmux. The ``&`` is matched first and the character before it checked after, so the
# search looks for the literal instead of trying a lookbehind at every position.
_BACKGROUND_AMP = re.compile(r"&(?<![&>]&)\s*(?:$|\n|;)")
_BACKGROUND_WORD = re.compile(r"\bnohup\b|\bsetsid\b|\bdisown\b|\bscreen\s+-d|\btmux\s+new")
_CUDA_OR_GPU = re.compile(r"cuda|gpu", re.IGNORECASE)
# ``> name.py``: a start that fails swallows its word, but not a ``>`` that ends it (from
# there the name may be the next word)
_WRITES_CODE = Swallowing(r">\s*['\"]?(?:[^\s'\"]+\.(?:py|sh|r|jl|c|inp|in)\b|"
                          r"(?P<skip>[^\s'\"]*(?=>(?:[\s'\"]|\Z))|[^\s'\"]*+))")
_PROBE_COMMAND = re.compile(r"/proc/(?:cpuinfo|meminfo)|--version\b|\bpip (?:list|show|freeze)\b")
_TAIL_F = re.compile(r"\btail\s+-f\b")
_OUTPUT_NAMES = re.compile(r"rankings\.json|report\.md|sources\.json")

# Substrings one of which every match of a pattern holds: a command without any skips
# the pattern (a few substring tests cost less than one search of an alternation that
# begins with a lookbehind or a character class, which is tried at every position).
_BACKGROUND_WORDS = ("nohup", "setsid", "disown", "screen", "tmux")
_INSTALL_WORDS = ("install", "add")
_WRITE_WORDS = (">", "tee", "cp", "mv", "open(", ".write(", "dump(", "write_text(", "to_csv(",
                "to_json(", "savetxt(")


def _may_match(text: str, words: tuple[str, ...]) -> bool:
    return any(word in text for word in words)


def _starts_background(command: str) -> bool:
    """Whether a shell command starts a background job.

    Examples
    --------
    >>> [_starts_background(c) for c in ("sleep 9 &", "a && b", "a 2>&1; b", "&", "nohup x")]
    [True, False, False, True, True]
    """
    return bool(("&" in command and _BACKGROUND_AMP.search(command)) or (
        _may_match(command, _BACKGROUND_WORDS) and _BACKGROUND_WORD.search(command)))


_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update) File: (.+)$", re.MULTILINE)
_PYTHON = re.compile(r"^(?:python(?:\d(?:\.\d+)?)?|ipython3?|pypy3?)$")
_WRAPPERS = frozenset({"sudo", "nohup", "time", "timeout", "env", "nice", "stdbuf",
                       "exec", "command", "xargs", "mpirun", "mpiexec", "srun", "setsid",
                       "uv", "conda", "micromamba", "mamba"})
_WAIT_PROGRAMS = frozenset({"sleep", "wait", "watch", "ps", "top", "htop", "jobs", "pgrep",
                            "pidof", "kill", "pkill", "fg", "bg"})
_PROBE_PROGRAMS = frozenset({"nvidia-smi", "nproc", "free", "df", "du", "uname", "lscpu",
                             "which", "whereis", "type", "hostname", "whoami", "id", "env",
                             "printenv", "lsb_release", "nvcc", "ulimit", "module", "lspci",
                             "conda", "pip", "pip3", "mount", "cat /proc"})
_VIEW_PROGRAMS = frozenset({"cat", "head", "tail", "less", "more", "ls", "find", "tree", "wc",
                            "grep", "rg", "egrep", "sed", "awk", "file", "stat", "diff", "jq",
                            "realpath", "readlink", "column", "sort", "uniq", "cut", "nl",
                            "xxd", "od", "strings", "zcat", "unzip", "tar", "pdftotext",
                            "pwd"})
# Commands that only print their arguments or change nothing a file holds (``echo
# checkpoint``, ``printf '%s\n' done``, ``cd /x``, ``true``): they view no file, so a call
# of them alone is the paper's ``other`` (E.7's "viewing files" is reading a file's
# contents); beside a viewing program (``cd /x && ls``, ``echo --- ; cat log``) that
# program decides.
_PRINT_PROGRAMS = frozenset({"echo", "printf", "true", "false", ":", "test", "[", "cd"})
_PLAN_PROGRAMS = frozenset({"date"})
_CODE_SUFFIXES = (".py", ".sh", ".r", ".jl", ".c", ".cpp", ".h", ".f90", ".js", ".ts",
                  ".ipynb", ".pl", ".rs", ".go", ".java", ".m", ".inp", ".in", ".gjf", ".com",
                  ".mdp", ".conf", ".toml", ".yaml", ".yml", ".cfg", ".ini", ".bash")

_SUBAGENT_TOOLS = frozenset({"task", "agent", "spawn_agent", "send_input", "resume_agent",
                             "close_agent", "sendmessage"})
_WAIT_TOOLS = frozenset({"bashoutput", "taskoutput", "killshell", "killbash", "wait",
                         "write_stdin", "taskstop"})
_PLAN_TOOLS = frozenset({"todowrite", "update_plan", "exitplanmode", "enterplanmode",
                         "todoread"})
_VIEW_TOOLS = frozenset({"read", "glob", "grep", "ls", "view_image", "list_dir", "read_file",
                         "notebookread", "grep_files", "view"})
_WRITE_TOOLS = frozenset({"write", "edit", "multiedit", "notebookedit", "apply_patch",
                          "create_file", "str_replace_based_edit_tool"})
_SHELL_TOOLS = frozenset({"bash", "exec_command", "shell", "local_shell", "shell_command",
                          "container.exec", "unified_exec"})
WEB_SEARCH_TOOLS = frozenset({"websearch", "web_search", "search", "web_search_preview"})
WEB_FETCH_TOOLS = frozenset({"webfetch", "web_fetch", "fetch", "open_page"})


@dataclass(frozen=True)
class ScriptSignals:
    """What a piece of Python code would do if it ran (derived once, the text not kept)."""

    modules: frozenset[str] = frozenset()
    """Top-level and dotted module names imported."""
    families: frozenset[str] = frozenset()
    """Method families its imports and calls belong to."""
    gpu: bool = False
    """It places work on a GPU (CUDA tensor, GPU build, CUDA platform)."""
    install: bool = False
    """It installs software (``pip install`` through subprocess, ``!pip``...)."""
    submission: bool = False
    """It writes a submission file (``rankings.json``, ``report.md``, the output folder)."""
    probe: bool = False
    """It only probes the environment (versions, device counts), computing nothing."""

    def __or__(self, other: ScriptSignals) -> ScriptSignals:
        return ScriptSignals(self.modules | other.modules, self.families | other.families,
                             self.gpu or other.gpu, self.install or other.install,
                             self.submission or other.submission, self.probe and other.probe)


@functools.lru_cache(maxsize=4096)
def python_signals(code: str) -> ScriptSignals:
    r"""The signals of a Python source text.

    Examples
    --------
    >>> s = python_signals("import numpy as np\nx = np.random.normal(0, 1, 1000)")
    >>> sorted(s.families), s.gpu
    (['monte_carlo'], False)
    >>> python_signals("import torch; print(torch.cuda.is_available())").probe
    True
    """
    code_nc = _strip_comments(code)
    modules: set[str] = set()
    for m in _PY_IMPORT.finditer(code_nc):
        if m.group(1):
            modules.add(m.group(1))
        else:
            for part in m.group(2).split(","):
                name = part.strip().split(" ")[0].strip()
                if name:
                    modules.add(name)
    families = {f for mod in modules if (f := module_family(mod))}
    for pattern, family in _CALL_FAMILIES:
        if pattern.search(code_nc):
            families.add(family)
    lines = [ln for ln in code_nc.splitlines() if ln.strip()]
    probe = (bool(_PROBE_CODE.search(code_nc)) and len(lines) <= 8 and not families
             and not _WRITE_OPS.search(code_nc))
    return ScriptSignals(
        modules=frozenset(modules), families=frozenset(families),
        gpu=bool(_GPU_CODE.search(code_nc)), install=bool(_INSTALL.search(code_nc)),
        submission=bool(_SUBMISSION_NAMES.search(code_nc) and _WRITE_OPS.search(code_nc)),
        probe=probe,
    )


def module_family(module: str) -> str | None:
    """Family of an imported module, by its longest known dotted prefix.

    Examples
    --------
    >>> module_family("pyscf.semiempirical"), module_family("pyscf.dft"), module_family("os")
    ('semiempirical_qm', 'dft', None)
    """
    parts = module.split(".")
    # no known module has more parts than the longest (an agent's ``a.a.a...`` of 100,000
    # parts joined every prefix: quadratic)
    for k in range(min(len(parts), _MOST_MODULE_PARTS), 0, -1):
        family = MODULE_FAMILIES.get(".".join(parts[:k]))
        if family:
            return family
    return None


# A comment: a line whose first mark is ``#``, or a ``#`` after a space with no quote after it
# on its line. Read a line at a time so that an agent's code costs time linear in its
# length (the one pattern this was, ``^\s*#.*$|\s+#[^'"\n]*$``, retried every space of a
# run and every line of a blank stretch: quadratic). The lines kept are the same; only the
# blank space around a removed comment may differ.
_COMMENT_LINE = re.compile(r"[^\S\n]*#")
_COMMENT_AFTER = re.compile(r"(?<![^\S\n])[^\S\n]+#")


def _strip_comments(code: str) -> str:
    if "#" not in code:
        return code
    lines = code.split("\n")
    for k, line in enumerate(lines):
        if "#" not in line:
            continue
        if _COMMENT_LINE.match(line):
            lines[k] = ""
            continue
        after_quotes = max(line.rfind("'"), line.rfind('"')) + 1
        comment = _COMMENT_AFTER.search(line, after_quotes)
        if comment:
            lines[k] = line[:comment.start()]
    return "\n".join(lines)


@dataclass
class RunContext:
    """What the labeller knows about a run: its folders and the scripts written so far."""

    task_paths: tuple[str, ...] = ("/task", "SPU_TASK_DIR")
    """Prefixes that name the task's input folder (the sandbox path and the variable)."""
    output_paths: tuple[str, ...] = ("/output", "SPU_OUTPUT_DIR")
    """Prefixes that name the submission folder."""
    scripts: dict[str, ScriptSignals] = field(default_factory=dict)
    """Signals of each file written so far, by base name and by full path."""

    @classmethod
    def for_run(cls, run_dir: str | os.PathLike[str]) -> RunContext:
        """The context of a run read from its folder (its ``task/`` and ``output/`` too)."""
        return cls(task_paths=("/task", "SPU_TASK_DIR", os.path.join(run_dir, "task")),
                   output_paths=("/output", "SPU_OUTPUT_DIR", os.path.join(run_dir, "output")))

    def remember(self, path: str, signals: ScriptSignals) -> None:
        """Record what a written (or edited) file would do when run."""
        path = path.strip().strip("'\"")
        for key in (path, path.rsplit("/", 1)[-1]):
            old = self.scripts.get(key)
            # the same file written again with the same code: x | x is x
            self.scripts[key] = signals if old is None or old is signals else old | signals

    def script(self, path: str) -> ScriptSignals | None:
        """Signals of a file run by name (full path first, then base name)."""
        path = path.strip().strip("'\"")
        return self.scripts.get(path) or self.scripts.get(path.rsplit("/", 1)[-1])

    def in_task(self, text: str) -> bool:
        """Whether ``text`` names the task's input folder."""
        return any(p in text for p in self.task_paths)

    def in_output(self, text: str) -> bool:
        """Whether ``text`` names the submission folder or a submission file."""
        return any(p in text for p in self.output_paths) or bool(_OUTPUT_NAMES.search(text))


@dataclass(frozen=True)
class CallLabel:
    """The labels of one tool call."""

    activity: Activity
    """Primary activity by the fixed priority."""
    families: tuple[str, ...] = ()
    """Method families the call actually ran, sorted."""
    gpu_workload: bool = False
    """The call ran code that places work on a GPU."""
    gpu_confirmed: bool = False
    """...and the program's own output names the device."""
    gpu_errors: tuple[str, ...] = ()
    """Kinds of GPU error in its output (:data:`GPU_ERRORS`)."""
    gpu_probe: bool = False
    """The call probes the GPU (``nvidia-smi``, ``torch.cuda.is_available()``)."""
    background: bool = False
    """It starts a background job (``&``, ``nohup``, ``run_in_background``)."""
    url: str | None = None
    """The URL fetched, for a web fetch or download."""
    query: str | None = None
    """The query, for a web search."""


_PLAIN_LABEL = {activity: CallLabel(activity) for activity in Activity}
"""The label of each activity with nothing else to say (shared: labels are frozen)."""


def split_tool_name(name: str) -> tuple[str | None, str]:
    """``(server, tool)`` of a tool name, the server None for a built-in tool.

    Examples
    --------
    >>> split_tool_name("mcp__spu__search"), split_tool_name("spu__fetch")
    (('spu', 'search'), ('spu', 'fetch'))
    >>> split_tool_name("spu.policy_stop"), split_tool_name("Bash")
    (('spu', 'policy_stop'), (None, 'Bash'))
    """
    if name.startswith("mcp__"):
        rest = name[5:]
        server, _, tool = rest.partition("__")
        return (server, tool) if tool else (None, rest)
    if "__" in name:
        server, _, tool = name.partition("__")
        return server, tool
    if "." in name and not name.startswith("container."):
        server, _, tool = name.partition(".")
        return server, tool
    return None, name


def _text_arg(arguments: Any, *keys: str) -> str:
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, dict):
        for key in keys:
            value = arguments.get(key)
            if isinstance(value, str):
                return value
            if isinstance(value, list):
                return shlex.join(str(v) for v in value)
    if isinstance(arguments, list):
        return shlex.join(str(v) for v in arguments)
    return ""


def shell_command(name: str, arguments: Any) -> str | None:
    """The shell command of a shell tool call, or None for another tool."""
    lowered = name.lower()
    if lowered not in _SHELL_TOOLS:
        return None
    if isinstance(arguments, dict) and isinstance(arguments.get("command"), list):
        argv = [str(v) for v in arguments["command"]]
        # Codex ``shell``: ["bash", "-lc", "<script>"]
        if len(argv) >= 3 and argv[0].endswith("sh") and argv[1] in ("-c", "-lc", "-ic"):
            return argv[2]
        return shlex.join(argv)
    return _text_arg(arguments, "command", "cmd", "script", "input")


_SHELL_TOKEN = re.compile(r"""
    (?P<space>[ \t\r]+|\\\n)
  | (?P<comment>(?<![^\s;&|()])\#[^\n]*)
  | (?P<op>&&|\|\||;;|[;&|()\n]|\d*(?:<<<|>>|<>|>&|<&|&>|[<>])\d*-?)
  | (?P<single>'[^']*')
  | (?P<double>"(?:\\.|[^"\\])*")
  | (?P<escape>\\.)
  | (?P<word>[^\s'"\\;&|()<>\#]+|\#|.)
""", re.VERBOSE | re.DOTALL)
"""Shell tokens: blanks, comments, operators, quoted strings, escapes and word pieces."""

_SEPARATORS = frozenset({"&&", "||", ";;", ";", "&", "|", "(", ")", "\n"})


def simple_commands(script: str) -> list[list[str]]:
    r"""The simple commands of a shell script (heredoc bodies removed), as word lists.

    Examples
    --------
    >>> simple_commands("cd /x && FOO=1 timeout 60 xtb mol.xyz --opt | tail -5")
    [['cd', '/x'], ['xtb', 'mol.xyz', '--opt'], ['tail', '-5']]
    """
    # Agents repeat commands (``sleep 60``, ``nvidia-smi``, ``tail job.log``): cached.
    return [list(c) for c in _simple_commands(script)]


@functools.lru_cache(maxsize=4096)
def _simple_commands(script: str) -> tuple[tuple[str, ...], ...]:
    body = without_heredocs(script)
    commands: list[list[str]] = []
    words: list[str] = []
    word: list[str] | None = None
    redirect = False

    def finish() -> None:
        nonlocal word, redirect
        if word is not None:
            if redirect:
                redirect = False  # the redirection's target file, not an argument
            else:
                words.append("".join(word))
            word = None

    for m in _SHELL_TOKEN.finditer(body):
        kind, text = m.lastgroup, m.group()
        if kind in ("space", "comment"):
            finish()
        elif kind == "op":
            finish()
            if text in _SEPARATORS:
                if words:
                    commands.append(words)
                words, redirect = [], False
            else:  # a redirection: ``>``, ``2>``, ``<<<``; ``2>&1`` names no file
                redirect = not text[-1].isdigit() and text[-1] != "-"
        else:
            if word is None:
                word = []
            if kind == "single":
                word.append(text[1:-1])
            elif kind == "double":
                word.append(re.sub(r'\\(["\\$`])', r"\1", text[1:-1]))
            elif kind == "escape":
                word.append(text[1:])
            else:
                word.append(text)
    finish()
    if words:
        commands.append(words)
    return tuple(tuple(w) for w in (_unwrap(c) for c in commands) if w)


def _unwrap(words: list[str]) -> list[str]:
    """Drop variable assignments and wrappers (``sudo``, ``timeout 60``, ``mpirun -np 4``)."""
    at = 0  # words[at:] is what is left (a slice a word cost time quadratic in ``sudo`` x n)
    while at < len(words):
        head = words[at]
        if re.fullmatch(r"\w+=.*", head):
            at += 1
        elif head in ("uv", "conda", "micromamba", "mamba"):
            if at + 1 < len(words) and words[at + 1] == "run":
                at += 2
                while at < len(words) and words[at].startswith("-"):
                    at += 2 if words[at] in ("-n", "-p", "--name") else 1
            else:
                break
        elif head in _WRAPPERS:
            at += 1
            # the wrapper's own options and arguments: ``-np 4``, ``60``, ``-s KILL``
            while at < len(words) and (words[at].startswith("-")
                                       or re.fullmatch(r"[\d.]+[smhd]?", words[at])):
                takes_value = words[at] in ("-np", "-n", "-s", "--signal", "-k", "-N", "-c")
                at += 2 if takes_value and at + 1 < len(words) else 1
        else:
            break
    return words[at:]


def _program(word: str) -> str:
    return word.rsplit("/", 1)[-1]


@dataclass
class _ShellReading:
    programs: list[str] = field(default_factory=list)
    python: ScriptSignals | None = None
    ran_python: bool = False
    download_url: str | None = None
    task_url: bool = False
    written_files: list[tuple[str, str]] = field(default_factory=list)


def _read_shell(script: str, ctx: RunContext) -> _ShellReading:
    out = _ShellReading()
    bodies: dict[str, str] = {}
    # the signals of each Python that ran, each distinct one once, merged at the end (a
    # script run n times was merged n times, its modules copied each time)
    ran: dict[int, ScriptSignals] = {}
    heredoc_code: str | None = None
    if "<<" in script:  # most commands have none
        bodies = {doc.word: doc.body for doc in heredocs(script)}
        out.written_files += [(doc.file, doc.body) for doc in cat_to_file(script)]
    for words in simple_commands(script):
        prog = _program(words[0])
        out.programs.append(prog)
        if _PYTHON.match(prog):
            out.ran_python = True
            code = None
            if "-c" in words[1:]:
                i = words.index("-c")
                code = words[i + 1] if i + 1 < len(words) else ""
            elif "-m" in words[1:]:
                i = words.index("-m")
                mod = words[i + 1] if i + 1 < len(words) else ""
                code = f"import {mod}"
                if mod == "pip" and "install" in words:
                    code = "pip install"
            else:
                files = [w for w in words[1:] if not w.startswith("-")]
                if files and files[0] != "-":
                    if (known := ctx.script(files[0])) is not None:
                        ran.setdefault(id(known), known)
                    continue
                # ``python3 - <<'PY'`` or ``python3 <<EOF``: the heredoc is the program
                if heredoc_code is None:
                    heredoc_code = "\n".join(bodies.values())
                code = heredoc_code
            signals = python_signals(code or "")
            ran.setdefault(id(signals), signals)
        elif prog in _DOWNLOAD_PROGRAMS or (prog == "git" and "clone" in words):
            for word in words[1:]:
                for url in _URL.findall(word):
                    if _is_remote(url) and not ctx.in_task(url):
                        out.download_url = out.download_url or url
                    else:
                        out.task_url = True
    if ran:
        out.python = functools.reduce(operator.or_, ran.values())
    return out


def _is_remote(url: str) -> bool:
    parsed = urlparse(url)
    if parsed.scheme.lower() == "file":
        return False
    host = (parsed.hostname or "").lower()
    return bool(host) and host not in ("localhost", "0.0.0.0", "::1") and not \
        host.startswith("127.")


SCAN_CHARS = 65_536
"""Characters read at each end of a long output when looking for errors and device names:
a program prints them at its start or end, and a long output must not cost a full scan by
every pattern."""


def scan_window(output: str) -> str:
    """The head and tail of ``output`` (all of it when short).

    Examples
    --------
    >>> len(scan_window("x" * 1_000_000)) == 2 * SCAN_CHARS + 1
    True
    """
    if len(output) <= 2 * SCAN_CHARS:
        return output
    return output[:SCAN_CHARS] + "\n" + output[-SCAN_CHARS:]


_GPU_WORDS = ("cuda", "libcu", "cublas", "nvrtc", "nccl", "nvidia", "gpu", "tesla", "h20")
"""Words one of which every GPU error or device name holds: outputs without any skip the
patterns (a substring test is far cheaper than the case-insensitive alternations)."""


def _mentions_gpu(output: str) -> bool:
    low = output.lower()
    return any(word in low for word in _GPU_WORDS)


def _errors_in(output: str) -> tuple[str, ...]:
    found = []
    for kind, pattern in GPU_ERRORS:
        if pattern.search(output):
            found.append(kind)
            break
    return tuple(found)


def _failed_modules(output: str) -> set[str]:
    return {m.split(".")[0] for m in _NOT_FOUND_MODULE.findall(output)}


def _family_set(signals: ScriptSignals | None, programs: Iterable[str], output: str
                ) -> tuple[str, ...]:
    families: set[str] = set()
    missing_programs = set(_COMMAND_NOT_FOUND.findall(output)) if any(
        p in PROGRAM_FAMILIES for p in programs) and "not found" in output else set()
    for prog in programs:
        family = PROGRAM_FAMILIES.get(prog)
        if family and prog not in missing_programs:
            families.add(family)
    if signals is not None:
        failed = _failed_modules(output) if "No module named" in output else set()
        if failed:
            kept = {module_family(m) for m in signals.modules
                    if m.split(".")[0] not in failed}
            # A failed import ends the script: only families of imports that loaded and
            # of calls made before... are unknowable; keep what the surviving imports give.
            families |= {f for f in kept if f}
        else:
            families |= set(signals.families)
    return tuple(sorted(families))


def label_call(name: str, arguments: Any, output: str | None, ctx: RunContext,
               is_error: bool = False) -> CallLabel:
    """Label one tool call (paper E.7); records written scripts in ``ctx``.

    Args:
        name: Tool name as the CLI recorded it.
        arguments: The call's arguments.
        output: The tool's output ('' or None when not recorded).
        ctx: The run's context; updated with the signals of files this call writes.
        is_error: The tool reported an error.

    Returns:
        The call's labels.
    """
    output = output or ""
    server, tool = split_tool_name(name)
    lowered = tool.lower()
    if server is not None or lowered in WEB_SEARCH_TOOLS or lowered in WEB_FETCH_TOOLS:
        if lowered in WEB_SEARCH_TOOLS or "search" in lowered:
            query = _text_arg(arguments, "query", "q", "search_query") or None
            if query is None and isinstance(arguments, dict) and isinstance(
                    arguments.get("queries"), list):
                query = " | ".join(str(q) for q in arguments["queries"])
            return CallLabel(Activity.web_search, query=query)
        if lowered in WEB_FETCH_TOOLS or "fetch" in lowered or lowered == "open_page":
            return CallLabel(Activity.web_fetch, url=_text_arg(arguments, "url", "uri") or None)
        if server is not None:
            return _PLAIN_LABEL[Activity.other]
    if lowered in _SUBAGENT_TOOLS:
        return _PLAIN_LABEL[Activity.subagent]
    if lowered in _PLAN_TOOLS:
        return _PLAIN_LABEL[Activity.planning]
    if lowered in _WAIT_TOOLS:
        if lowered == "write_stdin" and isinstance(arguments, dict) and arguments.get("chars"):
            typed = str(arguments.get("chars"))
            return _label_shell(typed, output, ctx, background=False)
        return _PLAIN_LABEL[Activity.waiting]
    if lowered in _WRITE_TOOLS:
        return _label_write(lowered, arguments, ctx)
    if lowered in _VIEW_TOOLS:
        viewed = _text_arg(arguments, "file_path", "path", "pattern", "notebook_path")
        return _PLAIN_LABEL[Activity.reading_inputs if ctx.in_task(viewed)
                            else Activity.viewing_files]
    command = shell_command(tool, arguments)
    if command is not None:
        background = bool(isinstance(arguments, dict) and arguments.get("run_in_background"))
        return _label_shell(command, output, ctx, background)
    return _PLAIN_LABEL[Activity.other]


def _label_write(tool: str, arguments: Any, ctx: RunContext) -> CallLabel:
    files: list[tuple[str, str]] = []
    if tool == "apply_patch":
        patch = _text_arg(arguments, "input", "patch")
        for m in _PATCH_FILE.finditer(patch):
            start = m.end()
            nxt = patch.find("\n*** ", start)
            body = patch[start: nxt if nxt >= 0 else len(patch)]
            added = "\n".join(ln[1:] for ln in body.splitlines() if ln.startswith("+"))
            files.append((m.group(1).strip(), added))
    else:
        path = _text_arg(arguments, "file_path", "path", "notebook_path")
        content = _text_arg(arguments, "content", "new_string", "new_source", "file_text")
        if isinstance(arguments, dict) and isinstance(arguments.get("edits"), list):
            content += "\n".join(str(e.get("new_string", "")) for e in arguments["edits"]
                                 if isinstance(e, dict))
        files.append((path, content))
    activity = Activity.notes_and_data
    for path, content in files:
        if path.lower().endswith((".py", ".ipynb")) or path == "":
            ctx.remember(path, python_signals(content))
        if ctx.in_output(path):
            activity = min(activity, Activity.submission_files, key=PRIORITY.index)
        elif path.lower().endswith(_CODE_SUFFIXES):
            activity = min(activity, Activity.code_writing, key=PRIORITY.index)
    return _PLAIN_LABEL[activity]


def _label_shell(command: str, output: str, ctx: RunContext, background: bool) -> CallLabel:
    reading = _read_shell(command, ctx)
    output = scan_window(output)
    for path, content in reading.written_files:
        if path.lower().endswith(".py"):
            ctx.remember(path, python_signals(content))
    background = background or _starts_background(command)
    signals = reading.python
    ran_python = reading.ran_python
    families = _family_set(signals if ran_python else None, reading.programs, output)
    gpu_probe = "nvidia-smi" in reading.programs or bool(
        signals is not None and signals.probe and _CUDA_OR_GPU.search(command))
    gpu_workload = bool((signals is not None and ran_python and signals.gpu)
                        or (any(p in PROGRAM_FAMILIES for p in reading.programs)
                            and _GPU_PROGRAM.search(command)))
    gpu_words = (gpu_workload or ran_python) and _mentions_gpu(output)
    gpu_confirmed = gpu_workload and gpu_words and bool(_GPU_NAMED.search(output))
    gpu_errors = _errors_in(output) if gpu_words else ()
    label = dict(families=families, gpu_workload=gpu_workload, gpu_confirmed=gpu_confirmed,
                 gpu_errors=gpu_errors, gpu_probe=gpu_probe, background=background)
    if reading.download_url:
        return CallLabel(Activity.web_fetch, url=reading.download_url, **label)  # type: ignore[arg-type]
    if (_may_match(command, _INSTALL_WORDS) and _INSTALL.search(command)) or (
            signals is not None and ran_python and signals.install):
        return CallLabel(Activity.software_install, **label)  # type: ignore[arg-type]
    if families or gpu_workload:
        return CallLabel(Activity.scientific_computation, **label)  # type: ignore[arg-type]
    body = without_heredocs(command)
    writes = bool(_may_match(body, _WRITE_WORDS) and _WRITE_OPS.search(body)) or bool(
        reading.written_files)
    if (ran_python and signals is not None and signals.submission) or (
            writes and ctx.in_output(command) and not ran_python):
        return CallLabel(Activity.submission_files, **label)  # type: ignore[arg-type]
    if ran_python:
        if signals is not None and signals.probe:
            return CallLabel(Activity.environment_probe, **label)  # type: ignore[arg-type]
        return CallLabel(Activity.other_python, **label)  # type: ignore[arg-type]
    if reading.written_files:
        code = any(p.lower().endswith(_CODE_SUFFIXES) for p, _ in reading.written_files)
        return CallLabel(Activity.code_writing if code else Activity.notes_and_data,
                         **label)  # type: ignore[arg-type]
    if writes and _WRITES_CODE.search(command):
        return CallLabel(Activity.code_writing, **label)  # type: ignore[arg-type]
    programs = reading.programs
    viewing = [p for p in programs if p not in _PRINT_PROGRAMS]  # print-only views nothing
    if reading.task_url or (ctx.in_task(command) and viewing and all(
            p in _VIEW_PROGRAMS or p in _DOWNLOAD_PROGRAMS for p in viewing)):
        return CallLabel(Activity.reading_inputs, **label)  # type: ignore[arg-type]
    if any(p in _PROBE_PROGRAMS for p in programs) or _PROBE_COMMAND.search(command):
        return CallLabel(Activity.environment_probe, **label)  # type: ignore[arg-type]
    if programs and any(p in _WAIT_PROGRAMS for p in programs) or _TAIL_F.search(command):
        return CallLabel(Activity.waiting, **label)  # type: ignore[arg-type]
    if writes:
        return CallLabel(Activity.notes_and_data, **label)  # type: ignore[arg-type]
    if viewing and all(p in _PLAN_PROGRAMS for p in viewing):
        return CallLabel(Activity.planning, **label)  # type: ignore[arg-type]
    if viewing and all(p in _VIEW_PROGRAMS for p in viewing):
        return CallLabel(Activity.viewing_files, **label)  # type: ignore[arg-type]
    return CallLabel(Activity.other, **label)  # type: ignore[arg-type]
