"""A traverse-only POSIX ACL entry for one user on a directory (the Linux access ACL)."""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterable
from pathlib import Path

# POSIX ACL extended attribute (Linux, <linux/posix_acl_xattr.h>).
_ACL_XATTR = "system.posix_acl_access"
_ACL_VERSION = 2
_ACL_USER_OBJ, _ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK, _ACL_OTHER = (
    0x01, 0x02, 0x04, 0x08, 0x10, 0x20,
)  # fmt: skip
_ACL_UNDEFINED_ID = 0xFFFFFFFF
_ACL_GROUP_CLASS = (_ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP)


def grant_traverse(directory: Path, uid: int) -> None:
    """Add ``user:uid:--x`` to ``directory``'s access ACL, widening nothing for anyone else:
    the other group-class entries are first narrowed to what the old mask let them have, so
    the new mask (which must now include x) gives none of them more than before."""
    mode = os.stat(directory).st_mode
    try:
        raw = os.getxattr(directory, _ACL_XATTR)
        entries = _parse_acl(raw)
    except OSError as exc:
        if exc.errno not in (errno.ENODATA, errno.EOPNOTSUPP):  # none yet; unsupported
            raise
        entries = _acl_from_mode(mode)
    mask = next((perm for tag, perm, _ in entries if tag == _ACL_MASK), None)
    updated: list[tuple[int, int, int]] = []
    found = False
    for tag, perm, ident in entries:
        if tag == _ACL_MASK:
            continue
        effective = perm & mask if tag in _ACL_GROUP_CLASS and mask is not None else perm
        if tag == _ACL_USER and ident == uid:
            effective |= 0o1
            found = True
        updated.append((tag, effective, ident))
    if not found:
        updated.append((_ACL_USER, 0o1, uid))
    new_mask = 0
    for tag, perm, _ in updated:
        if tag in _ACL_GROUP_CLASS:
            new_mask |= perm
    updated.append((_ACL_MASK, new_mask, _ACL_UNDEFINED_ID))
    updated.sort(key=lambda e: (e[0], e[2]))
    os.setxattr(directory, _ACL_XATTR, _format_acl(updated))


def _acl_from_mode(mode: int) -> list[tuple[int, int, int]]:
    return [
        (_ACL_USER_OBJ, (mode >> 6) & 7, _ACL_UNDEFINED_ID),
        (_ACL_GROUP_OBJ, (mode >> 3) & 7, _ACL_UNDEFINED_ID),
        (_ACL_OTHER, mode & 7, _ACL_UNDEFINED_ID),
    ]


def _parse_acl(raw: bytes) -> list[tuple[int, int, int]]:
    (version,) = struct.unpack_from("<I", raw)
    if version != _ACL_VERSION or (len(raw) - 4) % 8:
        raise OSError(errno.EOPNOTSUPP, f"unknown ACL format (version {version})")
    return [struct.unpack_from("<HHI", raw, off) for off in range(4, len(raw), 8)]


def _format_acl(entries: Iterable[tuple[int, int, int]]) -> bytes:
    return struct.pack("<I", _ACL_VERSION) + b"".join(struct.pack("<HHI", *e) for e in entries)
