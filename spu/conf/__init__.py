"""spu's own Hydra config groups (``conf/<group>/<name>.yaml``), read as ``pkg://spu.conf``.

A package, so that Hydra reads the groups from the installed package wherever ``spu``
runs; in a source checkout ``conf`` at the root is a link to this folder. Where each
config is read from, and how a project folder adds to it: :mod:`spu.project`.
"""
