"""What a Spark export directory (``mqstore export --out DIR``) says it has archived.

``mqstore history trim --exported DIR`` deletes only history rows that export has already
written to Parquet. The export records, in ``DIR/_watermarks.json`` (written last, atomically),
the highest ``hist_id`` it read and when it ran. A history row at or below that id was in
the export's snapshot unless its transaction committed after the export read the table; a
row stamped well before the export started cannot have been that late, so the bound also
requires ``removed_at`` to be :data:`LATE_COMMIT_GRACE_MS` before the export's start.

A watermark is only a watermark *of one table set*: ids of another database, or of another
table prefix in the same one, say nothing about this one. The watermarks therefore name
what they describe: the table prefix (``prefix``) and the database (``database``: the
cluster's ``system_identifier`` from ``pg_control_system()`` and ``current_database()``).
The export refuses to continue an archive of another database or prefix, and the trim
refuses to trust one. Archives written before the database was recorded (no ``database``
key) are not trusted by the trim until an export has checked them against the database and
recorded it (``spark_etl.export``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from mqstore.errors import ConfigError
from mqstore.schema import table_name

#: The export's commit file (``spark_etl.export.WATERMARKS``).
WATERMARKS = "_watermarks.json"
#: The key of the watermarks that names the database they describe.
DATABASE_KEY = "database"
#: A removal whose transaction was still open this long after it was stamped is not
#: counted as exported (removals commit within milliseconds; this is a wide margin).
LATE_COMMIT_GRACE_MS = 3_600_000

Identity = dict[str, str | None]


class ArchivedHistory(NamedTuple):
    """The history rows an export has archived: ``hist_id <= upto_hist_id`` and removed
    before ``before_ms`` (the fields of ``mqstore.store.history.TrimBound``; this module
    stays free of the store so the Spark jobs can share it)."""

    before_ms: int
    upto_hist_id: int


def database_identity(conn: sa.Connection) -> Identity:
    """Which database ``conn`` is on: ``{"system_identifier": ..., "name": ...}``.

    ``system_identifier`` tells PostgreSQL clusters apart (initdb draws it; a physical
    replica shares its primary's, which is right: same data). It is None where the server
    does not let the role call ``pg_control_system()``; the name alone is compared then.
    """
    name = str(conn.execute(sa.text("SELECT current_database()")).scalar_one())
    system: str | None
    try:
        with conn.begin_nested():
            row = conn.execute(sa.text("SELECT system_identifier FROM pg_control_system()"))
            system = str(row.scalar_one())
    except DBAPIError:
        system = None
    return {"system_identifier": system, "name": name}


def describe_identity(identity: Any) -> str:
    """``database 'broker' (system 7311...)`` for messages."""
    if not isinstance(identity, dict):
        return "an unknown database"
    system = identity.get("system_identifier")
    return f"database {identity.get('name')!r}" + (f" (system {system})" if system else "")


def read_watermarks(export_dir: Path) -> dict[str, Any] | None:
    """The watermarks in ``export_dir``; None when there are none.

    Raises :class:`ConfigError` when the file cannot be read or is not an export's
    watermarks (truncated, blank, ``{}``...).
    """
    path = export_dir / WATERMARKS
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        marks = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"cannot read {path}: not JSON ({exc})") from None
    if not isinstance(marks, dict) or not isinstance(marks.get("run_id"), str):
        raise ConfigError(f"cannot read {path}: not an export's watermarks (no run_id)")
    return marks


def origin_mismatch(marks: dict[str, Any], identity: Identity, prefix: str) -> str | None:
    """Why ``marks`` are not watermarks of ``prefix``'s tables in ``identity``'s database.

    None when they are, or when they do not say which database they describe (older
    archives; see :func:`has_identity`). Prefixes compare as PostgreSQL folds them.
    """
    exported_prefix = marks.get("prefix", "")
    if not isinstance(exported_prefix, str) or table_name(exported_prefix, "") != table_name(
        prefix, ""
    ):
        return f"it archives table prefix {exported_prefix!r}, not {prefix!r}"
    recorded = marks.get(DATABASE_KEY)
    if recorded is None:
        return None
    if not isinstance(recorded, dict) or not _same_database(recorded, identity):
        return f"it archives {describe_identity(recorded)}, not {describe_identity(identity)}"
    return None


def has_identity(marks: dict[str, Any]) -> bool:
    """Whether ``marks`` name the database they describe (written since format 3)."""
    return isinstance(marks.get(DATABASE_KEY), dict)


def _same_database(recorded: dict[str, Any], identity: Identity) -> bool:
    if recorded.get("name") != identity.get("name"):
        return False
    mine, theirs = identity.get("system_identifier"), recorded.get("system_identifier")
    return mine is None or theirs is None or mine == theirs


def exported_history_bound(export_dir: Path, prefix: str, identity: Identity) -> ArchivedHistory:
    """The history rows the export in ``export_dir`` has archived (``TrimBound(*bound)``).

    ``identity`` is the database being trimmed (:func:`database_identity`). An export that
    read no history (empty table, or a database without ``MQSTORE_HISTORY``) gives a bound
    that allows nothing. Raises :class:`ConfigError` when ``export_dir`` holds no export,
    an export of another table prefix or database, or one that has not recorded its
    database yet.
    """
    path = export_dir / WATERMARKS
    marks = read_watermarks(export_dir)
    if marks is None:
        raise ConfigError(
            f"{export_dir} holds no finished export ({WATERMARKS} is missing): give the "
            "directory passed to `mqstore export --out`, after at least one export has run"
        )
    wrong = origin_mismatch(marks, identity, prefix)
    if wrong is not None:
        raise ConfigError(
            f"{export_dir} is not an export of these tables ({wrong}): give the export "
            "directory of this database and --table-prefix"
        )
    if not has_identity(marks):
        raise ConfigError(
            f"{export_dir} does not record which database it archives (written by an older "
            "mqstore): run `mqstore export --out` into it once more, then trim"
        )
    upto, started = marks.get("hist_max_id"), marks.get("exported_at")
    if marks.get("history_source") != "mqstore_history" or upto is None:
        return ArchivedHistory(before_ms=0, upto_hist_id=0)
    if not isinstance(upto, int) or not isinstance(started, int):
        raise ConfigError(f"{path} holds no valid hist_max_id/exported_at")
    return ArchivedHistory(before_ms=started - LATE_COMMIT_GRACE_MS, upto_hist_id=upto)


__all__ = [
    "DATABASE_KEY",
    "LATE_COMMIT_GRACE_MS",
    "WATERMARKS",
    "ArchivedHistory",
    "Identity",
    "database_identity",
    "describe_identity",
    "exported_history_bound",
    "has_identity",
    "origin_mismatch",
    "read_watermarks",
]
