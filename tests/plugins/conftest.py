"""The plugin package is imported by its entry point or by the tests, never by collection.

Collecting ``spu_example_plugin/analysis.py`` for its doctest would import it, and so
register its analysis for every later test of the session; ``test_plugin_analysis.py``
runs that doctest itself.
"""

collect_ignore = ["spu_example_plugin"]
