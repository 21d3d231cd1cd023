"""Test helpers: a private PostgreSQL and a corpus of run folders.

:mod:`spu.testing.postgres` runs a private PostgreSQL cluster for the tracking tests;
:mod:`spu.testing.corpus` builds run folders from recorded CLI sessions. The scripted
model server, the offline demo's model, is a product part: :mod:`spu.scripted`.
"""
