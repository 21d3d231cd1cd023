"""Statistics of paper sections 3 and 4, computed from the runs table (SPEC section 5).

One module per analysis family:

- :mod:`spu.stats.runs_table`: read and check the runs table, select official public runs.
- :mod:`spu.stats.resampling`: seeded percentile bootstrap and the Wilson interval.
- :mod:`spu.stats.additive`: the task-adjusted mean, ``y_tc = mu_t + alpha_c`` (paper 3.1).
- :mod:`spu.stats.means`: coverage, raw and adjusted means, above chance, disciplines.
- :mod:`spu.stats.paired`: Wilcoxon paired tests, Holm, detectable differences (3.3, E.2).
- :mod:`spu.stats.outcomes`: run outcomes and the scoring rules (3.2, Table 6).
- :mod:`spu.stats.costs`: usage and cost per scored run, the Pareto frontier (3.5).
- :mod:`spu.stats.private`: private tasks against random rankings (3.4).
- :mod:`spu.stats.repeats`: run-to-run variation and rank stability (3.6, 4.5).
- :mod:`spu.stats.submissions`: submitted orders read from run folders.
- :mod:`spu.stats.agreement`: agreement and consensus (E.8).
- :mod:`spu.stats.monotone`: the monotone prior (4.2).
- :mod:`spu.stats.tasks`: task statistics and Kruskal-Wallis across disciplines (2.2, 3.3).
- :mod:`spu.stats.coverage`: missing runs against task difficulty, Figure 1 (3.3).
- :mod:`spu.stats.effort`: two efforts of one model, effort against score (4.10, E.3).
- :mod:`spu.stats.design`: detectable-difference curves and study design (E.2).
- :mod:`spu.stats.interaction`: the configuration-by-task interaction (4.4, E.9).
- :mod:`spu.stats.disciplines`: scores by discipline, gap and stability tests (4.6, E.10).
- :mod:`spu.stats.exposure`: flagged runs and the presented order (3.7, E.4).
- :mod:`spu.stats.pair_order`: pairs in the measured order, top-1 rate (appendix F).
- :mod:`spu.stats.within_config`: marked against unmarked runs of a configuration.
- :mod:`spu.stats.permutation`: seeded permutation tests, exact when small.
- :mod:`spu.stats.named_tests`: the rows of ``tests.csv``.
- :mod:`spu.stats.simulate`: runs tables (and whole studies on disk) with the paper's
  structure from known parameters, with planted effects.
- :mod:`spu.stats.registry`: the ``@analysis`` decorator, the registry ``spu stats`` runs,
  and the discovery of outside analyses by the entry-point group ``spu.analyses``.
- :mod:`spu.stats.inputs`: the runs table, the options and the steps analyses share.
- :mod:`spu.stats.builtin`: every analysis above, registered in the order of the paper.
- :mod:`spu.stats.analysis`: every registered analysis run, written as ``spu stats`` writes
  it.

Only numpy, scipy, pandas and statsmodels are used; nothing here imports ray, mlflow or
docker.
"""
