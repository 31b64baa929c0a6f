"""Checksums named by their algorithm (``xxh3_64:<hex>``), as the manifests write them.

Files the manifests do not cover (run logs, the config, the cache) are hashed with
xxh3-64 like checkpoints are; a checksum with another known algorithm is still verified.
A checksum read from a remote is untrusted: only the algorithms of
:data:`accel.store.hashing.DIGEST_HEX`, with a digest of their exact length in lowercase
hex, are accepted (``shake_128:...`` is refused, not a TypeError halfway through a pull):
:func:`accel.store.hashing.checksum_problem`, whose rule the manifest reader applies too.
"""

from __future__ import annotations

from typing import Any, Protocol

from accel.errors import IntegrityError
from accel.store.hashing import ALGORITHM, checksum_problem

DEFAULT_ALGORITHM = ALGORITHM


class Hasher(Protocol):
    def update(self, data: Any, /) -> None: ...

    def hexdigest(self) -> str: ...


def algorithm_of(checksum: str) -> str:
    problem = checksum_problem(checksum)
    if problem is not None:
        raise IntegrityError(problem)
    return checksum.partition(":")[0]


def format_checksum(algorithm: str, hasher: Hasher) -> str:
    return f"{algorithm}:{hasher.hexdigest()}"


__all__ = ["DEFAULT_ALGORITHM", "Hasher", "algorithm_of", "checksum_problem", "format_checksum"]
