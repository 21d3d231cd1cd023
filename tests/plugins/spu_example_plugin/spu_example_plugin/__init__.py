"""The worked example of an spu plugin package (docs/contributing.md).

- :mod:`spu_example_plugin.harness`: ``harness=example``, with options and effort levels of
  its own;
- :mod:`spu_example_plugin.sandbox`: ``sandbox=example``, a backend with its own options;
- :mod:`spu_example_plugin.tools`: ``tools.provider=example``, search over a folder of notes;
- :mod:`spu_example_plugin.analysis`: the ``example`` statistic;
- ``conf/``: their config group files, found through entry point group ``spu.conf``.
"""
