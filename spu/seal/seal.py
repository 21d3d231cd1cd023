"""Sealing one run: its manifest written, signed and entered in the ledger."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from spu.schema import Identity, LedgerEntry, Outcome, SealManifest
from spu.seal.keys import key_fingerprint, sign, signing_key
from spu.seal.ledger import append_entry
from spu.seal.manifest import SEAL_FILE, build_manifest, manifest_bytes, signed_body


def seal_run(output_root: Path, run_dir: Path, *, run_key: str, attempt: int,
             identity: Identity | None, outcome: Outcome) -> tuple[SealManifest, LedgerEntry]:
    """Seal what ``run_dir`` holds now: write ``seal.json`` and append its ledger entry.

    Called on the grading side once the agent's sandbox is gone, before anything reads
    the submission again (``run.json`` may be rewritten later by a regrade; the sealed
    files may not).
    """
    key = signing_key(output_root)
    manifest = build_manifest(run_dir, run_key=run_key, attempt=attempt, identity=identity,
                              outcome=outcome, public_key_sha256=key_fingerprint(key.public_key()))
    manifest = manifest.model_copy(update={"signature": sign(key, signed_body(manifest))})
    data = manifest_bytes(manifest)
    path = Path(run_dir) / SEAL_FILE
    partial = path.with_name(SEAL_FILE + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)
    entry = append_entry(output_root, key, run_key=run_key,
                         manifest_sha256=hashlib.sha256(data).hexdigest(), time=manifest.time)
    return manifest, entry
