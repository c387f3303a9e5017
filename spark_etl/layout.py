"""Partition directory names of the archive: ``destination=<value>`` must fit a file name.

Spark writes a partition value ``v`` as the directory ``destination=<escapePathName(v)>``,
which file systems limit to 255 bytes (ext4, XFS, btrfs, HDFS's default). A CONTAINER
fits as it is (the layout of ordinary names never changes); a longer one becomes a prefix
cut on a character boundary, ``~`` and 16 hex digits of the SHA-256 of the full name.
Pure functions, no Spark.
"""

from __future__ import annotations

import hashlib

#: Characters Spark's ``ExternalCatalogUtils.escapePathName`` writes as ``%XX``: ASCII
#: controls, ``"#%'*/:=?\\`` DEL ``{[]^``, and on Windows also space ``<>|`` (counted
#: everywhere, so a size is never underestimated).
ESCAPED = frozenset(
    [chr(c) for c in range(0x01, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^") + list(" <>|")
)
#: Partition column holding the (possibly shortened) CONTAINER.
PARTITION_COLUMN = "destination"
#: Most bytes a ``destination=...`` directory name may take: the 255-byte limit less a
#: margin for tools that add to names and file systems that count differently.
MAX_DIR_BYTES = 200
#: Most bytes the escaped partition value may take.
MAX_VALUE_BYTES = MAX_DIR_BYTES - len(PARTITION_COLUMN) - 1
#: Hex digits of the SHA-256 of the full name that end a shortened value.
HASH_DIGITS = 16
_SEPARATOR = "~"


def escaped_size(value: str) -> int:
    """UTF-8 bytes of ``value`` as Spark escapes it in a partition directory name."""
    return sum(3 if ch in ESCAPED else len(ch.encode("utf-8")) for ch in value)


def partition_value(container: str | None) -> str | None:
    """The ``destination`` partition value of ``container``: itself when its directory
    name fits :data:`MAX_DIR_BYTES`, else ``<prefix>~<hash>`` which does."""
    if container is None or escaped_size(container) <= MAX_VALUE_BYTES:
        return container
    digest = hashlib.sha256(container.encode("utf-8")).hexdigest()[:HASH_DIGITS]
    budget = MAX_VALUE_BYTES - len(_SEPARATOR) - HASH_DIGITS
    return f"{_fitting_prefix(container, budget)}{_SEPARATOR}{digest}"


def _fitting_prefix(value: str, budget: int) -> str:
    """The longest prefix of ``value`` (whole characters) whose escaped size is ``<= budget``."""
    used = 0
    for index, ch in enumerate(value):
        used += escaped_size(ch)
        if used > budget:
            return value[:index]
    return value


__all__ = [
    "ESCAPED",
    "HASH_DIGITS",
    "MAX_DIR_BYTES",
    "MAX_VALUE_BYTES",
    "PARTITION_COLUMN",
    "escaped_size",
    "partition_value",
]
