"""The output root's Ed25519 signing key: made once, private to the harness.

The private key lives in ``<output_root>/seal/private_key.pem`` (mode 0600, in a folder
of mode 0700), the public key beside it in ``public_key.pem``. No sandbox mounts the
output root (an agent sees only its run's ``task/``, ``workspace/`` and ``output/``),
and an agent running as a user of its own could not open the folder even if it did.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from filelock import FileLock

KEY_DIR = "seal"
"""Folder of the keys, under the output root."""
PRIVATE_KEY_FILE = "private_key.pem"
"""The private key (PKCS#8 PEM), never exported."""
PUBLIC_KEY_FILE = "public_key.pem"
"""The public key (SubjectPublicKeyInfo PEM), exported with every bundle."""


class SealKeyError(ValueError):
    """A key file that cannot be used: unreadable, open to others, or not an Ed25519 key."""


def key_dir(output_root: Path) -> Path:
    """``<output_root>/seal``."""
    return Path(output_root) / KEY_DIR


def public_key_path(output_root: Path) -> Path:
    """``<output_root>/seal/public_key.pem``."""
    return key_dir(output_root) / PUBLIC_KEY_FILE


def private_key_path(output_root: Path) -> Path:
    """``<output_root>/seal/private_key.pem``."""
    return key_dir(output_root) / PRIVATE_KEY_FILE


def signing_key(output_root: Path) -> Ed25519PrivateKey:
    """The output root's private key, made (with its public key) on first use.

    Parallel processes making the first seal of one root agree on one key: the key is
    made under a file lock and written with ``O_EXCL``.

    Raises:
        SealKeyError: The key file is a link, readable by others, or not an Ed25519 key.
    """
    folder = key_dir(output_root)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    with FileLock(str(folder / ".lock")):
        path = folder / PRIVATE_KEY_FILE
        if not os.path.lexists(path):
            key = Ed25519PrivateKey.generate()
            pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(pem)
            public = folder / PUBLIC_KEY_FILE
            public.write_bytes(public_pem(key.public_key()))
            return key
        return _read_private(path)


def _read_private(path: Path) -> Ed25519PrivateKey:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise SealKeyError(f"{path}: cannot open the seal key ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
            raise SealKeyError(f"{path}: the seal key must be a regular file of mode 0600")
        data = f.read()
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except ValueError:
        raise SealKeyError(f"{path}: not a PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SealKeyError(f"{path}: not an Ed25519 key")
    return key


def public_pem(key: Ed25519PublicKey) -> bytes:
    """The PEM text of a public key."""
    return key.public_bytes(serialization.Encoding.PEM,
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def load_public_key(path: Path) -> Ed25519PublicKey:
    """Read an Ed25519 public key from a PEM file.

    Raises:
        SealKeyError: The file is missing or holds no Ed25519 public key.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SealKeyError(f"{path}: cannot read the public key ({exc.strerror})") from None
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        raise SealKeyError(f"{path}: not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SealKeyError(f"{path}: not an Ed25519 public key")
    return key


def key_fingerprint(key: Ed25519PublicKey) -> str:
    """SHA-256 hex of the raw 32-byte public key."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def sign(key: Ed25519PrivateKey, message: bytes) -> str:
    """The base64 Ed25519 signature of ``message``."""
    return base64.b64encode(key.sign(message)).decode("ascii")


def signature_holds(key: Ed25519PublicKey, message: bytes, signature: str) -> bool:
    """True when ``signature`` (base64) is ``key``'s signature of ``message``."""
    try:
        key.verify(base64.b64decode(signature, validate=True), message)
    except (InvalidSignature, ValueError):
        return False
    return True
