"""Seals: a run's submission hashed, signed and chained in a ledger when it ends (SPEC 13, 14).

- :mod:`spu.seal.keys`: the output root's Ed25519 key, made once, kept where no agent reaches;
- :mod:`spu.seal.ledger`: ``<output_root>/ledger.jsonl``, appended under a file lock;
- :mod:`spu.seal.manifest`: ``<run_dir>/seal.json``, what a run sealed;
- :mod:`spu.seal.verify`: the chain, every signature and every file, checked.
"""
