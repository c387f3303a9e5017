"""Which database (and table prefix) a journal directory belongs to.

A journal's records are meant for one database: replaying them into another (the DSN or
table prefix changed, or the directory was copied beside another broker) would write that
database's messages, acks and purges into this one. The first start records the database
in ``<journal>/database.json``; later starts refuse any other database.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from journal.support import JournalDatabaseMismatchError
from mqstore.archive import database_identity, describe_identity
from mqstore.store.postgres import PostgresStore

__all__ = ["BINDING_FILE", "check_binding"]

BINDING_FILE = "database.json"

log = logging.getLogger(__name__)


def _describe(binding: dict[str, Any]) -> str:
    return f"{describe_identity(binding)} with table prefix {binding.get('table_prefix')!r}"


def _same(stored: dict[str, Any], current: dict[str, Any]) -> bool:
    if stored.get("name") != current["name"]:
        return False
    if stored.get("table_prefix") != current["table_prefix"]:
        return False
    system = stored.get("system_identifier")
    return (
        system is None
        or current["system_identifier"] is None
        or system == current["system_identifier"]
    )


def _write(path: Path, binding: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(binding, fh)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_binding(directory: Path, pg: PostgresStore, *, holds_records: bool) -> None:
    """Bind the journal in ``directory`` to ``pg``'s database and prefix on first use;
    raise :class:`JournalDatabaseMismatchError` when it belongs to another one and
    ``holds_records`` (a journal without records has nothing to replay: it is rebound)."""
    current: dict[str, Any] = dict(pg.read(database_identity))
    current["table_prefix"] = pg.prefix
    path = directory / BINDING_FILE
    try:
        stored = json.loads(path.read_text())
    except FileNotFoundError:
        _write(path, current)
        return
    except ValueError:
        stored = None
    if not isinstance(stored, dict):
        raise JournalDatabaseMismatchError(
            f"{path} is not readable JSON, so which database the journal in {directory} "
            f"belongs to cannot be told; restore the file from a backup of the directory, or "
            f"delete it if this broker's database ({_describe(current)}) is the journal's"
        )
    if not _same(stored, current) and not holds_records:
        log.warning("the empty journal in %s now belongs to %s", directory, _describe(current))
        _write(path, current)
    elif not _same(stored, current):
        raise JournalDatabaseMismatchError(
            f"the journal in {directory} belongs to {_describe(stored)}, but this broker is "
            f"connected to {_describe(current)}: replaying it here would write the other "
            "database's messages into this one. Start with the journal's database and prefix "
            "(--dsn, --table-prefix), or give this database its own --journal-dir; if this "
            f"really is the same data moved (restored on another server or renamed), delete "
            f"{path} and start again."
        )
