"""Registries: where they are, what they list, and fetching an archive they list, bounded.

A registry is ``registry.json`` (:class:`~spu.schema.Registry`), given as a local path
(the file, or the folder holding it) or an ``http(s)://`` URL; ``--registry`` names it,
else ``$SPU_REGISTRY``. An entry's ``url`` is absolute or relative to the registry's
own location. A registry is read as hostile: at most :data:`MAX_REGISTRY_BYTES`, strict
JSON, every entry validated; an archive is fetched only over ``http(s)`` or from a
local path, never more bytes than the registry states, and its SHA-256 is computed as
it arrives.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from spu.datasets import DatasetError
from spu.schema import Registry, RegistryEntry

if TYPE_CHECKING:  # httpx only where a registry is fetched
    import httpx

REGISTRY_ENV = "SPU_REGISTRY"
"""The registry used when ``--registry`` is not given."""
REGISTRY_FILE = "registry.json"
MAX_REGISTRY_BYTES = 16 << 20
"""Largest registry read: 16 MiB."""
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
MAX_REDIRECTS = 5
CHUNK = 1 << 20


@dataclass(frozen=True)
class RegistryLocation:
    """Where a registry is: a URL, or a local file."""

    text: str
    """As given."""
    url: str | None = None
    """The registry's URL (http or https)."""
    path: Path | None = None
    """The registry's file."""

    def __str__(self) -> str:
        return self.url if self.url is not None else str(self.path)


def is_url(text: str) -> bool:
    """True for an ``http://`` or ``https://`` address."""
    return urlsplit(text).scheme.lower() in ("http", "https")


def locate(registry: str | None) -> RegistryLocation:
    """The registry ``--registry`` names, else ``$SPU_REGISTRY``.

    Raises:
        DatasetError: none given, or a scheme other than http(s).
    """
    text = registry or os.environ.get(REGISTRY_ENV, "")
    if not text:
        raise DatasetError(f"no registry: pass --registry REG (a registry.json, its folder or "
                           f"an http(s) URL) or set {REGISTRY_ENV}")
    if is_url(text):
        return RegistryLocation(text, url=text)
    if "://" in text:
        raise DatasetError(f"registry {text}: only http(s) URLs and local paths are read")
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / REGISTRY_FILE
    return RegistryLocation(text, path=path.resolve())


def _client() -> httpx.Client:
    """A client that follows a few redirects, asks for bytes as stored, and times out."""
    import httpx

    return httpx.Client(follow_redirects=True, max_redirects=MAX_REDIRECTS,
                        headers={"accept-encoding": "identity"},
                        timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S))


def _read_bounded_url(url: str, limit: int, what: str) -> bytes:
    """At most ``limit`` bytes from ``url``; more is refused, not read."""
    import httpx

    try:
        with _client() as client, client.stream("GET", url) as reply:
            if reply.status_code != 200:
                raise DatasetError(f"{what} {url} answered HTTP {reply.status_code}")
            data = bytearray()
            for block in reply.iter_bytes():
                data += block
                if len(data) > limit:
                    raise DatasetError(f"{what} {url} is larger than {limit} bytes")
            return bytes(data)
    except httpx.HTTPError as exc:
        raise DatasetError(f"{what} {url} is unreachable ({type(exc).__name__}: "
                           f"{str(exc)[:200] or 'no answer'})") from None


def _read_bounded_file(path: Path, limit: int, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise DatasetError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise DatasetError(f"{what} {path} cannot be read ({exc.strerror})") from None
    if len(data) > limit:
        raise DatasetError(f"{what} {path} is larger than {limit} bytes")
    return data


def read_registry(location: RegistryLocation) -> Registry:
    """The registry at ``location``, read bounded and validated.

    Raises:
        DatasetError: unreachable, too large, not JSON, or not a registry (one line).
    """
    from spu.datasets.manifest import parse_document

    if location.url is not None:
        data = _read_bounded_url(location.url, MAX_REGISTRY_BYTES, "registry")
    else:
        assert location.path is not None
        data = _read_bounded_file(location.path, MAX_REGISTRY_BYTES, "registry")
    registry: Registry = parse_document(data, Registry, f"registry {location}")
    return registry


def read_local_registry(path: Path) -> Registry:
    """A registry file on this machine (the one ``spu dataset pack`` adds to)."""
    return read_registry(RegistryLocation(str(path), path=Path(path).resolve()))


def find_entry(registry: Registry, name: str, version: str | None,
               location: RegistryLocation) -> RegistryEntry:
    """The entry of ``name@version`` (``version`` None: the highest listed).

    Raises:
        DatasetError: the registry lists no such dataset, or not that version.
    """
    from packaging.version import Version

    versions = sorted((e for e in registry.datasets if e.name == name),
                      key=lambda e: Version(e.version))
    if not versions:
        names = sorted({e.name for e in registry.datasets})
        shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
        raise DatasetError(f"registry {location} lists no dataset {name!r} (it lists: "
                           f"{shown or 'nothing'})")
    if version is None:
        return versions[-1]
    for entry in versions:
        if entry.version == version:
            return entry
    shown = ", ".join(e.version for e in versions[-20:])
    raise DatasetError(f"registry {location} lists no version {version} of {name} (versions: "
                       f"{shown})")


def archive_source(entry: RegistryEntry, location: RegistryLocation) -> str | Path:
    """Where the archive of ``entry`` is: a URL, or a local file.

    Raises:
        DatasetError: a scheme other than http(s), or a local path from a remote registry.
    """
    url = entry.url
    if location.url is not None:
        joined = urljoin(location.url, url)
        if not is_url(joined):
            raise DatasetError(f"its url {url[:200]!r} is not http(s)")
        return joined
    if is_url(url):
        return url
    if "://" in url or url.startswith("file:"):
        raise DatasetError(f"its url {url[:200]!r} is neither http(s) nor a path")
    assert location.path is not None
    return location.path.parent / url


def fetch_archive(source: str | Path, dest: Path, expected_bytes: int) -> str:
    """Copy the archive into ``dest`` (a new file); its SHA-256.

    Raises:
        DatasetError: unreachable, or its size is not ``expected_bytes`` (a larger one is
            cut off as soon as it passes it).
    """
    import httpx

    digest = hashlib.sha256()
    size = 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    with os.fdopen(os.open(dest, flags, 0o600), "wb") as out:
        def take(block: bytes) -> None:
            nonlocal size
            size += len(block)
            if size > expected_bytes:
                raise DatasetError(f"the archive is larger than the {expected_bytes} bytes "
                                   f"the registry states")
            digest.update(block)
            out.write(block)

        if isinstance(source, Path):
            try:
                with open(source, "rb") as f:
                    for block in iter(lambda: f.read(CHUNK), b""):
                        take(block)
            except OSError as exc:
                raise DatasetError(f"the archive {source} cannot be read "
                                   f"({exc.strerror})") from None
        else:
            try:
                with _client() as client, \
                        client.stream("GET", source) as reply:
                    if reply.status_code != 200:
                        raise DatasetError(f"the archive {source} answered HTTP "
                                           f"{reply.status_code}")
                    for block in reply.iter_bytes(CHUNK):
                        take(block)
            except httpx.HTTPError as exc:
                raise DatasetError(f"the archive {source} is unreachable "
                                   f"({type(exc).__name__}: {str(exc)[:200]})") from None
    if size != expected_bytes:
        raise DatasetError(f"the archive holds {size} bytes, the registry states "
                           f"{expected_bytes}")
    return digest.hexdigest()
