"""``spu analyze`` help: the bare help names the population options (issue 43, gap 5)."""

from __future__ import annotations

from tests.conftest import run_module


def test_bare_help_names_the_population_options_and_where_they_are_explained() -> None:
    """``spu analyze --help`` shows the dispatcher only; it names the options that change a
    population (``--revised-population``, ``--gpu-tasks``) with what they set, and says
    that ``spu analyze RUNS_DIR --help`` explains them, which it does."""
    bare = run_module(["spu", "analyze", "--help"])
    assert bare.returncode == 0, bare.stderr
    text = " ".join(bare.stdout.split())
    description = text.split("Population options:", 1)[-1]
    assert "Population options:" in text
    assert "--revised-population (the revised runs of 4.3 and Figure 24e)" in description
    assert "--gpu-tasks (the tasks of 4.8's GPU comparison)" in description
    assert "'spu analyze RUNS_DIR --help' explains every option" in description
    full = run_module(["spu", "analyze", "RUNS_DIR", "--help"])
    assert full.returncode == 0, full.stderr
    detail = " ".join(full.stdout.split())
    assert "--revised-population {differs,ranked}" in detail
    assert "differs, the paper's" in detail
    assert "--gpu-tasks {both-sides,all}" in detail and "both-sides, the paper's" in detail
