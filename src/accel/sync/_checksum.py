"""Checksums named by their algorithm (``xxh3_64:<hex>``), as the manifests write them.

Files the manifests do not cover (run logs, the config, the cache) are hashed with
xxh3-64 like checkpoints are; a checksum with another known algorithm is still verified.
A checksum read from a remote is untrusted: only the algorithms below, with a digest of
their exact length in lowercase hex, are accepted (``shake_128:...`` is refused, not a
TypeError halfway through a pull).
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from accel.errors import IntegrityError
from accel.store.hashing import ALGORITHM, DIGEST_HEX

DEFAULT_ALGORITHM = ALGORITHM
_HEX = re.compile(r"[0-9a-f]+")


class Hasher(Protocol):
    def update(self, data: Any, /) -> None: ...

    def hexdigest(self) -> str: ...


def checksum_problem(checksum: object) -> str | None:
    """What is wrong with a checksum from outside (None: it can be verified)."""
    if not isinstance(checksum, str):
        return f"a checksum must be text, not {type(checksum).__name__}"
    algorithm, sep, digest = checksum.partition(":")
    if not sep:
        return f"checksum {checksum[:80]!r} does not name its algorithm"
    if algorithm not in DIGEST_HEX:
        return f"unknown checksum algorithm {algorithm[:40]!r} (known: {', '.join(DIGEST_HEX)})"
    if len(digest) != DIGEST_HEX[algorithm] or not _HEX.fullmatch(digest):
        return f"{algorithm} checksum {digest[:80]!r} is not {DIGEST_HEX[algorithm]} hex digits"
    return None


def algorithm_of(checksum: str) -> str:
    problem = checksum_problem(checksum)
    if problem is not None:
        raise IntegrityError(problem)
    return checksum.partition(":")[0]


def format_checksum(algorithm: str, hasher: Hasher) -> str:
    return f"{algorithm}:{hasher.hexdigest()}"
