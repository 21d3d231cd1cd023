"""Datasets: named, versioned sets of task packages, packed, published and pulled (SPEC 16).

A dataset ``NAME@VERSION`` travels as one archive, ``NAME-VERSION.tar.gz``, holding
``dataset.json`` (:class:`~spu.schema.DatasetManifest`: each task's id, version, digest,
discipline, visibility and whether its answer key is included) and ``tasks/<id>/...``.
A registry (:class:`~spu.schema.Registry`), a local file or a URL, lists archives with
their SHA-256.

- :mod:`spu.datasets.pack`: ``spu dataset pack``, a task root into an archive and its
  registry entry;
- :mod:`spu.datasets.registry`: reading a registry and fetching an archive, bounded;
- :mod:`spu.datasets.archive`: extracting an archive that may be hostile, and checking a
  tree against its ``dataset.json``;
- :mod:`spu.datasets.store`: the pulled datasets under ``$SPU_DATA_DIR/datasets/``, the
  built-in dataset ``examples``, and ``dataset=NAME@VERSION`` on the command line.

Every fault is a :class:`DatasetError` of one line naming the dataset.
"""

from __future__ import annotations

from dataclasses import dataclass


class DatasetError(ValueError):
    """A dataset cannot be packed, listed, pulled, verified or used; one line."""


@dataclass(frozen=True)
class DatasetRef:
    """``NAME`` or ``NAME@VERSION`` as typed."""

    name: str
    version: str | None = None

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}@{self.version}"


def parse_ref(text: str) -> DatasetRef:
    """Read ``NAME[@VERSION]``.

    Raises:
        DatasetError: the name or the version is not valid (SPEC 16).

    Examples:
        >>> parse_ref("spu-public@1.0"), str(parse_ref("examples"))
        (DatasetRef(name='spu-public', version='1.0'), 'examples')
        >>> parse_ref("../etc@1")
        Traceback (most recent call last):
        ...
        spu.datasets.DatasetError: dataset '../etc@1': '../etc' is not a dataset name \
(lower-case letters, digits, '.', '_' and '-', starting with a letter or a digit)
    """
    from spu.schema import check_dataset_name, check_dataset_version

    name, sep, version = text.partition("@")
    try:
        check_dataset_name(name)
        if sep:
            check_dataset_version(version)
    except ValueError as exc:
        raise DatasetError(f"dataset {text!r}: {exc}") from None
    return DatasetRef(name, version if sep else None)
