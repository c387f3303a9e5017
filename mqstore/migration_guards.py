"""Guards around a migration: one migration of a prefix at a time, the role's privileges,
a live broker's row lock or lease, and PostgreSQL's refusals a user can fix, each as one
line."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mqstore.db import LOCK_NOT_AVAILABLE, sqlstate
from mqstore.errors import SchemaError
from mqstore.lock.status import read_lock
from mqstore.schema import build_schema, version_table_name


def lock_migrations(conn: Connection, prefix: str = "") -> None:
    """Wait until no other session migrates ``prefix`` in this schema; held to the end of
    ``conn``'s transaction, so two brokers upgrading at once run one after the other and the
    second finds the work done."""
    conn.execute(
        sa.text(
            "SELECT pg_advisory_xact_lock(hashtextextended("
            "'mqstore migrations ' || coalesce(current_schema(), '') || '.' || :table, 0))"
        ),
        {"table": version_table_name(prefix)},
    )


#: What a broker's database role needs on each of the prefix's tables.
BROKER_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")


def require_privileges(conn: Connection, wanted: dict[str, tuple[str, ...]]) -> None:
    """Raise :class:`SchemaError` naming the GRANT to run when the session's role lacks a
    privilege on one of the existing tables in ``wanted`` (tables that adopt or upgrade
    created are not covered by grants made before them)."""
    names = [name for name, privileges in wanted.items() for _ in privileges]
    privileges = [privilege for each in wanted.values() for privilege in each]
    rows = conn.execute(
        sa.text(
            "SELECT w.name, w.privilege, quote_ident(current_user), quote_ident(current_schema()) "
            "FROM unnest(CAST(:names AS text[]), CAST(:privileges AS text[])) "
            "AS w(name, privilege) "
            "WHERE to_regclass(quote_ident(w.name)) IS NOT NULL "
            "AND NOT has_table_privilege(to_regclass(quote_ident(w.name)), w.privilege)"
        ),
        {"names": names, "privileges": privileges},
    ).all()
    if not rows:
        return
    lacking: dict[str, list[str]] = {}
    for name, privilege, _, _ in rows:
        lacking.setdefault(name, []).append(privilege)
    user, schema = rows[0][2], rows[0][3]
    listed = "; ".join(f"{', '.join(p)} on {name}" for name, p in lacking.items())
    raise SchemaError(
        f"the database role {user} lacks {listed}: as the tables' owner run GRANT "
        f"{', '.join(BROKER_PRIVILEGES)} ON ALL TABLES IN SCHEMA {schema} TO {user}"
    )


def refuse_row_locked(conn: Connection, prefix: str = "") -> None:
    """Raise when a live broker holds the lock row in an open transaction (mqstore's
    ``--lock row``, ActiveMQ's default locker); otherwise keep the row locked until ``conn``'s
    transaction ends, so no broker starts meanwhile."""
    lock = build_schema(prefix).lock
    if lock.name not in set(sa.inspect(conn).get_table_names()):
        return
    try:
        with conn.begin_nested():
            conn.execute(sa.select(lock.c.id).with_for_update(nowait=True))
    except sa.exc.OperationalError as exc:
        if sqlstate(exc) != LOCK_NOT_AVAILABLE:
            raise
        raise SchemaError(
            f"{lock.name} is locked by a running broker (mqstore's --lock row or ActiveMQ's "
            "database locker), nothing was changed: stop that broker first"
        ) from None


def refuse_live_lease(conn: Connection, prefix: str, *, override: str | None) -> None:
    """Raise when a broker holds the master lease on the lock row (mqstore's ``--lock
    lease``, ActiveMQ's lease locker), which takes no database lock a migration could see;
    ``override`` names the option that goes ahead when that broker is gone and its lease
    merely stale (None: there is none, the lease runs out)."""
    schema = build_schema(prefix)
    if schema.lock.name not in set(sa.inspect(conn).get_table_names()):
        return
    if conn.execute(sa.select(schema.lock.c.id).where(schema.lock.c.id == 1)).first() is None:
        return
    status = read_lock(conn, schema)
    if status.live():
        stale = f"pass {override}" if override else "run it again once the lease has run out"
        raise SchemaError(
            f"{schema.lock.name} is {status.describe()}, nothing was changed: stop that broker "
            f"first (or {stale} if it is gone and its lease is stale)"
        )


#: SQLSTATEs a user causes with the DSN (its role, search_path, server), and what to do.
_DATABASE_FIXES = {
    "42501": "run it as the owner of the tables, or a role granted CREATE on the schema",
    "3F000": "the DSN's search_path names no existing schema: create the schema or fix "
    "options=-csearch_path=...",
    "25006": "the database is read-only (a standby, or default_transaction_read_only): "
    "point the DSN at the primary",
    LOCK_NOT_AVAILABLE: "another session holds a lock on a table it needs (a running "
    "broker?): stop it, or retry when it is idle",
    "57014": "a statement ran past the role's statement_timeout (adopt indexes every row): "
    "run it with a longer one, e.g. options=-cstatement_timeout=0 in the DSN",
    "42P07": "mqstore did not make that table or index: drop or rename it, or use another "
    "--table-prefix",
    "42710": "mqstore did not make that object: drop or rename it, or use another --table-prefix",
}


def describe_refusal(exc: sa.exc.DBAPIError, command: str) -> str | None:
    """One line for PostgreSQL's refusal of ``command`` (as the user typed it) when a user
    can fix it (rights, search_path, a standby), else None; its transaction was rolled back."""
    fix = _DATABASE_FIXES.get(sqlstate(exc))
    if fix is None:
        return None
    first = str(exc.orig).splitlines()[0]
    return f"`{command}` was refused by the database ({first}), nothing was changed: {fix}"


@contextmanager
def database_errors(command_name: str) -> Iterator[None]:
    """PostgreSQL's refusals a user can fix as one-line :class:`SchemaError`
    (:func:`describe_refusal`)."""
    try:
        yield
    except sa.exc.DBAPIError as exc:
        message = describe_refusal(exc, f"mqstore db {command_name}")
        if message is None:
            raise
        raise SchemaError(message) from None
