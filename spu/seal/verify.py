"""``spu seal verify``: the ledger's chain, every signature and every sealed file, checked.

Faults are found in a fixed order (the ledger line by line, then each line's manifest
and files, then manifests no line names), so the first one named is the earliest thing
that does not hold. The chain faults make the whole ledger untrustworthy; a run's own
faults (:func:`run_faults`) make only that run ``seal_broken``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import ValidationError

from spu.schema import LedgerEntry, SealManifest
from spu.seal.keys import (
    SealKeyError,
    key_fingerprint,
    load_public_key,
    public_key_path,
    signature_holds,
)
from spu.seal.ledger import GENESIS, LEDGER_FILE, entry_body, line_sha256
from spu.seal.manifest import SEAL_FILE, sealed_files, signed_body

_RUN_KEY = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class SealedRun:
    """A ledger entry with its run folder and manifest, where they were found."""

    entry: LedgerEntry
    """The ledger's line."""
    run_dir: Path
    """The run folder (or archived attempt) whose ``seal.json`` the line names."""
    manifest: SealManifest | None
    """The manifest, None when none matches the line."""
    faults: list[str] = field(default_factory=list)
    """What does not hold for this run (empty: its seal holds)."""


@dataclass(frozen=True)
class Verification:
    """The outcome of checking one output root."""

    chain_faults: list[str]
    """Faults of the ledger itself (lines, order, signatures, the key)."""
    runs: list[SealedRun]
    """Every entry, with its run's own faults."""
    unlisted: list[str]
    """Manifests under ``runs/`` that no ledger line names."""
    head: str | None
    """SHA-256 of the ledger's last line."""

    @property
    def faults(self) -> list[str]:
        """Every fault, the first one first."""
        return (self.chain_faults + [f for r in self.runs for f in r.faults]
                + [f"{p}: not in the ledger" for p in self.unlisted])

    @property
    def ok(self) -> bool:
        """True when the chain, every signature and every file hold."""
        return not self.faults


def read_ledger(root: Path, key: Ed25519PublicKey
                ) -> tuple[list[LedgerEntry], list[str], str | None]:
    """The ledger's entries, the chain's faults, and the head hash."""
    path = root / LEDGER_FILE
    try:
        data = path.read_bytes()
    except OSError:
        return [], [f"{LEDGER_FILE}: missing"], None
    if data and not data.endswith(b"\n"):
        return [], [f"{LEDGER_FILE}: the last line is incomplete"], None
    entries: list[LedgerEntry] = []
    prev = GENESIS
    for n, line in enumerate(data.split(b"\n")[:-1], start=1):
        where = f"{LEDGER_FILE} line {n}"
        try:
            entry = LedgerEntry.model_validate(json.loads(line))
        except (ValueError, ValidationError):
            return entries, [f"{where}: not a ledger entry"], None
        if not signature_holds(key, entry_body(entry), entry.signature):
            return entries, [f"{where}: signature does not hold for the public key "
                             "(the line was edited, or another key signed it)"], None
        if entry.seq != n:
            return entries, [f"{where}: seq {entry.seq} where {n} belongs "
                             "(lines reordered or dropped)"], None
        if entry.prev != prev:
            return entries, [f"{where}: prev is not the hash of line {n - 1} "
                             "(a line before it was changed, dropped or moved)"], None
        entries.append(entry)
        prev = line_sha256(line)
    return entries, [], (prev if entries else None)


def _manifests(root: Path, run_key: str) -> list[Path]:
    folder = root / "runs" / run_key
    return [folder / SEAL_FILE] + sorted((folder / "attempts").glob(f"*/{SEAL_FILE}"))


def run_faults(root: Path, run_dir: Path, manifest: SealManifest, key: Ed25519PublicKey,
               entry: LedgerEntry | None = None) -> list[str]:
    """What does not hold for one sealed run: its manifest's signature, identity and files."""
    rel = run_dir.relative_to(root).as_posix() if run_dir.is_relative_to(root) else str(run_dir)
    faults: list[str] = []
    if manifest.public_key_sha256 != key_fingerprint(key) or not signature_holds(
            key, signed_body(manifest), manifest.signature):
        faults.append(f"{rel}/{SEAL_FILE}: signature does not hold for the public key")
        return faults
    if entry is not None and (manifest.run_key != entry.run_key or manifest.time != entry.time):
        faults.append(f"{rel}/{SEAL_FILE}: run key or time differs from ledger line {entry.seq}")
        return faults
    record = run_dir / "run.json"
    if record.is_file():
        try:
            recorded = json.loads(record.read_text())
        except (OSError, ValueError):
            recorded = {}
        if recorded.get("run_key") != manifest.run_key or (
                manifest.identity is not None and recorded.get("identity")
                != manifest.identity.model_dump(mode="json")):
            faults.append(f"{rel}/run.json: run key or identity differs from the seal")
    now = sealed_files(run_dir)
    for name, digest in manifest.files.items():
        if name not in now.files:
            faults.append(f"{rel}/{name}: sealed file missing or no longer a regular file")
        elif now.files[name] != digest:
            faults.append(f"{rel}/{name}: changed after sealing")
    for name in now.files.keys() - manifest.files.keys():
        faults.append(f"{rel}/{name}: appeared after sealing")
    for name in now.skipped.keys() ^ manifest.skipped.keys():
        faults.append(f"{rel}/{name}: not what was sealed (a link or special file "
                      "added or removed)")
    return faults


def verify_root(root: Path, public_key: Path | None = None) -> Verification:
    """Check an output root (or an unpacked bundle): chain, signatures, files.

    Args:
        root: The folder holding ``ledger.jsonl``, ``seal/public_key.pem`` and ``runs/``.
        public_key: The key to check against (the published one); by default the root's own.
    """
    root = Path(root)
    try:
        key = load_public_key(public_key or public_key_path(root))
    except SealKeyError as exc:
        return Verification([str(exc)], [], [], None)
    entries, chain_faults, head = read_ledger(root, key)
    runs: list[SealedRun] = []
    named: set[Path] = set()
    for entry in entries:
        if not _RUN_KEY.match(entry.run_key):
            chain_faults.append(f"{LEDGER_FILE} line {entry.seq}: run key is not a folder name")
            break
        found = None
        for path in _manifests(root, entry.run_key):
            if path.is_file() and not path.is_symlink() and hashlib.sha256(
                    path.read_bytes()).hexdigest() == entry.manifest_sha256:
                found = path
                break
        run_dir = root / "runs" / entry.run_key if found is None else found.parent
        if found is None:
            runs.append(SealedRun(entry, run_dir, None, [
                f"runs/{entry.run_key}/{SEAL_FILE}: no manifest matches ledger line "
                f"{entry.seq} (changed or removed)"]))
            continue
        if found in named:
            runs.append(SealedRun(entry, run_dir, None, [
                f"{LEDGER_FILE} line {entry.seq}: names a manifest an earlier line names"]))
            continue
        named.add(found)
        try:
            manifest = SealManifest.model_validate_json(found.read_bytes())
        except ValidationError:
            runs.append(SealedRun(entry, run_dir, None,
                                  [f"{found.relative_to(root)}: not a seal manifest"]))
            continue
        runs.append(SealedRun(entry, run_dir, manifest,
                              run_faults(root, run_dir, manifest, key, entry)))
    unlisted = [] if chain_faults else [
        p.relative_to(root).as_posix()
        for p in sorted((root / "runs").glob(f"*/{SEAL_FILE}"))
        + sorted((root / "runs").glob(f"*/attempts/*/{SEAL_FILE}")) if p not in named]
    return Verification(chain_faults, runs, unlisted, head)


def verify_path(path: Path, public_key: Path | None = None) -> Verification:
    """Check an output root, or a bundle file (unpacked safely first)."""
    import tempfile

    from spu.seal.bundle import BundleError, unpack_bundle

    path = Path(path)
    if path.is_dir():
        return verify_root(path, public_key)
    if not path.is_file():
        return Verification([f"{path}: neither an output root nor a bundle"], [], [], None)
    with tempfile.TemporaryDirectory(prefix="spu-bundle-") as scratch:
        try:
            root = unpack_bundle(path, Path(scratch) / "bundle")
        except BundleError as exc:
            return Verification([str(exc)], [], [], None)
        return verify_root(root, public_key)


def seal_faults(run_dir: Path, public_key: Path | None = None) -> list[str]:
    """What does not hold for one run folder's seal (its manifest, signature and files).

    The key is the output root's (``run_dir``'s grandparent, or the archived attempt's
    root) unless one is given. An absent or unreadable manifest is a fault.
    """
    run_dir = Path(run_dir)
    root = run_dir.parent.parent
    if root.name == "attempts":
        root = root.parent.parent.parent
    try:
        key = load_public_key(public_key or public_key_path(root))
    except SealKeyError as exc:
        return [str(exc)]
    try:
        manifest = SealManifest.model_validate_json((run_dir / SEAL_FILE).read_bytes())
    except OSError:
        return [f"{run_dir.name}/{SEAL_FILE}: missing"]
    except ValidationError:
        return [f"{run_dir.name}/{SEAL_FILE}: not a seal manifest"]
    return run_faults(root, run_dir, manifest, key)
