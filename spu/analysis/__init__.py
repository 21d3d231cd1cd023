"""Analyses of trajectories: what the agents saw and did (paper sections 3.7 and 4).

- :mod:`~spu.analysis.exposure`: source identifiers in tool outputs (3.7);
- :mod:`~spu.activities` (outside this package, so that tracking labels tool spans too):
  the activity, method families and GPU work of a call (E.7);
- :mod:`~spu.analysis.rankings`: first complete ranking, revisions, where orders appear (4.2);
- :mod:`~spu.analysis.sources`: fetched-URL classes and search operators (Figure 15c-d);
- :mod:`~spu.analysis.runs`: one streaming pass over a run folder;
- :mod:`~spu.analysis.associations`: fixed-effects associations and the classifier (4.3, 4.9);
- :mod:`~spu.analysis.trajectory_analysis` and :mod:`~spu.analysis.cli`: ``spu analyze``;
- :mod:`~spu.analysis.builtin`: its tables, one registered function each;
- :mod:`~spu.analysis.audit`: the hand check of the labels.
"""
