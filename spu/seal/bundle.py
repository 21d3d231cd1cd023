"""Bundles: an output root's sealed runs in one tar file, packed and unpacked safely (SPEC 14).

A bundle holds ``ledger.jsonl``, ``seal/public_key.pem`` and, for every ledger line, the
run folder its manifest names: ``seal.json``, ``run.json`` and exactly the files the
manifest seals. Nothing else: never the private key, never a link, never a path that
leaves the root. Unpacking refuses a bundle that holds any of those, and writes each
member itself (no ``tarfile.extractall``).
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path, PurePosixPath

from spu.schema import SealManifest
from spu.seal.keys import KEY_DIR, PRIVATE_KEY_FILE, PUBLIC_KEY_FILE, private_key_path
from spu.seal.ledger import LEDGER_FILE
from spu.seal.manifest import SEAL_FILE, file_sha256
from spu.seal.verify import verify_root

MAX_BUNDLE_BYTES = 4 << 30
"""Bytes a bundle may unpack to at most."""
MAX_MEMBERS = 200_000
"""Members a bundle may hold at most."""


class BundleError(ValueError):
    """A bundle that cannot be made or must not be unpacked; the message names why."""


def _safe_name(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if (not name or path.is_absolute() or "\\" in name or any(
            part in ("", ".", "..") for part in name.split("/"))):
        raise BundleError(f"member {name!r}: a path outside the bundle's root")
    if path.parts[0] == KEY_DIR and path.as_posix() != f"{KEY_DIR}/{PUBLIC_KEY_FILE}":
        raise BundleError(f"member {name!r}: only the public key may be in {KEY_DIR}/")
    if path.name == PRIVATE_KEY_FILE or path.suffix == ".key":
        raise BundleError(f"member {name!r}: a key file")
    return path


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    _safe_name(name)
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def _read_sealed(path: Path, digest: str, private: os.stat_result | None) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or (
                private is not None and (info.st_dev, info.st_ino)
                == (private.st_dev, private.st_ino)):
            raise BundleError(f"{path}: not a regular file of its own")
        data = f.read()
    if file_sha256(path) != digest:
        raise BundleError(f"{path}: changed after sealing (spu seal verify names it)")
    return data


def export_bundle(output_root: Path, out: Path) -> int:
    """Write the bundle of ``output_root``'s sealed runs to ``out``; returns the run count.

    Raises:
        BundleError: The root does not verify (the first fault is named), or a sealed
            file is not a regular file of its own.
    """
    root = Path(output_root)
    checked = verify_root(root)
    if not checked.ok:
        raise BundleError(f"{root}: {checked.faults[0]} (spu seal verify)")
    key_file = private_key_path(root)
    private = key_file.stat() if key_file.exists() else None
    out = Path(out)
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, "w") as tar:
        _add(tar, LEDGER_FILE, (root / LEDGER_FILE).read_bytes())
        _add(tar, f"{KEY_DIR}/{PUBLIC_KEY_FILE}", (root / KEY_DIR / PUBLIC_KEY_FILE).read_bytes())
        for run in checked.runs:
            assert run.manifest is not None  # a verified root has every manifest
            rel = run.run_dir.relative_to(root).as_posix()
            _add(tar, f"{rel}/{SEAL_FILE}", (run.run_dir / SEAL_FILE).read_bytes())
            if (run.run_dir / "run.json").is_file():
                _add(tar, f"{rel}/run.json", _read_sealed(
                    run.run_dir / "run.json", file_sha256(run.run_dir / "run.json") or "",
                    private))
            for name, digest in run.manifest.files.items():
                _add(tar, f"{rel}/{name}", _read_sealed(run.run_dir / name, digest, private))
    os.replace(partial, out)
    return len(checked.runs)


def unpack_bundle(bundle: Path, dest: Path) -> Path:
    """Unpack ``bundle`` into the new folder ``dest``, refusing anything unsafe; returns it.

    Raises:
        BundleError: The file is not a tar bundle, or holds a link, a device, a key
            file, a path outside its root, a member twice, or too much.
    """
    bundle = Path(bundle)
    try:
        tar = tarfile.open(bundle, "r:*")
    except (OSError, tarfile.TarError) as exc:
        raise BundleError(f"{bundle}: not a bundle ({exc})") from None
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=False)
    total, seen = 0, set()
    with tar:
        for n, member in enumerate(tar):
            if n >= MAX_MEMBERS:
                raise BundleError(f"{bundle}: more than {MAX_MEMBERS} members")
            if member.isdir():
                _safe_name(member.name.rstrip("/"))
                continue
            if not member.isfile():
                raise BundleError(f"{bundle}: member {member.name!r} is a link or a device")
            path = _safe_name(member.name)
            if path in seen:
                raise BundleError(f"{bundle}: member {member.name!r} appears twice")
            seen.add(path)
            total += member.size
            if total > MAX_BUNDLE_BYTES:
                raise BundleError(f"{bundle}: more than {MAX_BUNDLE_BYTES} bytes")
            target = dest.joinpath(*path.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None  # a regular member
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as f:
                while chunk := source.read(1 << 20):
                    f.write(chunk)
    return dest


def manifest_of(run_dir: Path) -> SealManifest:
    """The run folder's manifest (a verified one)."""
    return SealManifest.model_validate_json((Path(run_dir) / SEAL_FILE).read_bytes())
