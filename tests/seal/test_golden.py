"""Golden seal records (format 1): they must keep loading and their signatures keep holding."""

from __future__ import annotations

import hashlib
from pathlib import Path

from spu.schema import LEDGER_VERSION, SEAL_MANIFEST_VERSION, LedgerEntry, SealManifest
from spu.seal.keys import load_public_key, signature_holds
from spu.seal.ledger import GENESIS, entry_body
from spu.seal.manifest import signed_body

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "seal_v1"


def test_a_version_1_manifest_and_ledger_line_load_and_verify() -> None:
    """Written by a baseline run when the format was made; the key is its public key."""
    key = load_public_key(GOLDEN / "public_key.pem")
    data = (GOLDEN / "seal.json").read_bytes()
    manifest = SealManifest.model_validate_json(data)
    assert (manifest.schema_version, manifest.ledger_version) == ("1", "1")
    assert (SEAL_MANIFEST_VERSION, LEDGER_VERSION) == ("1", "1")
    assert signature_holds(key, signed_body(manifest), manifest.signature)
    [line] = (GOLDEN / "ledger.jsonl").read_bytes().splitlines()
    entry = LedgerEntry.model_validate_json(line)
    assert (entry.seq, entry.prev, entry.run_key) == (1, GENESIS, manifest.run_key)
    assert entry.manifest_sha256 == hashlib.sha256(data).hexdigest()
    assert signature_holds(key, entry_body(entry), entry.signature)
