"""Schema lifecycle: upgrade, downgrade and revision checks (adoption of ActiveMQ's tables is
:mod:`mqstore.takeover`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy.engine import Connection, Engine

from mqstore.drift import schema_differences
from mqstore.errors import SchemaError, SchemaVersionError
from mqstore.lock.status import describe_lock, find_lock
from mqstore.migration_guards import (
    BROKER_PRIVILEGES,
    RENEWAL_SLACK_MS,
    database_errors,
    lock_migrations,
    refuse_live_lease,
    refuse_row_locked,
    require_privileges,
    watch_lease,
)
from mqstore.schema import StoreSchema, build_schema, table_name

#: The revision whose DDL equals ActiveMQ 5.17's tables (plus mqstore's corrections).
BASELINE_REVISION = "0001"

#: The lease renewal period brokers use unless told otherwise (``MQSTORE_RENEW_MS``, the
#: default of :attr:`mqstore.settings.Settings.renew_ms`, which imports more than the store may).
DEFAULT_RENEW_MS = 5000


def migrations_dir() -> Path:
    """The ``migrations`` directory (top level of the repository and of the installed wheel)."""
    import migrations

    return Path(migrations.__file__).resolve().parent


def alembic_config(prefix: str = "", connection: Connection | None = None) -> Config:
    """An Alembic config for ``prefix``; with ``connection``, migrations run on it."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.attributes["table_prefix"] = prefix
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest revision this mqstore ships."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(conn: Connection, prefix: str = "") -> str | None:
    """The revision the database is at for ``prefix``, or None when mqstore never migrated it."""
    version_table = build_schema(prefix).version_table
    require_privileges(conn, {version_table: ("SELECT",)})
    ctx = MigrationContext.configure(conn, opts={"version_table": version_table})
    return ctx.get_current_revision()


def existing_tables(conn: Connection) -> set[str]:
    """The tables in the connection's current schema."""
    return set(sa.inspect(conn).get_table_names())


#: Where the prefix's tables (and its version table) are, in every schema.
_WHERE = sa.text(
    "SELECT c.relname, n.nspname, pg_table_is_visible(c.oid), "
    "n.nspname IS NOT DISTINCT FROM current_schema(), current_schema(), "
    "current_setting('search_path') FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE c.relname = ANY(CAST(:names AS text[])) AND c.relkind IN ('r', 'p') ORDER BY 2, 1"
)


def split_schema_error(conn: Connection, prefix: str = "") -> str | None:
    """What to do when the prefix's tables are not all in one schema as this session sees
    them, else None: tables it finds through its search_path outside its current schema
    (where mqstore makes its own, and the version table), as when ActiveMQ's are in
    ``public`` but the role has a schema of its own name (``"$user"`` comes first in the
    default search_path); or a version table without ACTIVEMQ_MSGS in another schema while
    the current one has ACTIVEMQ_MSGS but no version table (those were adopted through
    another search_path). Either way every command would read one set and write another."""
    schema = build_schema(prefix)
    names = [t.name for t in schema.tables] + [schema.version_table]
    rows = conn.execute(_WHERE, {"names": names}).all()
    if not rows:
        return None
    here, path = rows[0][4], rows[0][5]
    mine = [name for name, _, _, current, _, _ in rows if current]
    visible: dict[str, list[str]] = {}
    for name, where, seen, current, _, _ in rows:
        if seen and not current:
            visible.setdefault(where, []).append(name)
    if visible:
        where, found = next(iter(visible.items()))
        also = f", which holds {', '.join(mine)}," if mine else ""
        fix = (
            f"move those into schema {where} (ALTER TABLE {here}.NAME SET SCHEMA {where}) "
            "while no broker runs, then "
            if mine
            else ""
        )
        return (
            f"tables {', '.join(found)} are in schema {where}, but this session's current "
            f"schema (the first of its search_path {path} that exists) is {here}{also}, "
            "where mqstore makes its own tables: they would be split across two schemas; "
            f"{fix}give every mqstore command and broker the search_path {where} "
            f"(options=-csearch_path={where} in the DSN, or ALTER ROLE ... SET search_path)"
        )
    if schema.msgs.name not in mine or schema.version_table in mine:
        return None
    others = sorted(
        where
        for where in {w for n, w, _, c, _, _ in rows if not c and n == schema.version_table}
        if not any(n == schema.msgs.name and w == where for n, w, _, _, _, _ in rows)
    )
    if not others:
        return None
    there = others[0]
    moved = [name for name, where, _, _, _, _ in rows if where == there]
    return (
        f"{', '.join(moved)} (mqstore's record and own tables of {schema.msgs.name}) are in "
        f"schema {there}, while {schema.msgs.name} is in schema {here}: these tables were "
        f"taken over through another search_path; while no broker runs, move them into "
        f"schema {here} (ALTER TABLE {there}.NAME SET SCHEMA {here}), then give every "
        f"mqstore command and broker the search_path {here} (options=-csearch_path={here} "
        "in the DSN, or ALTER ROLE ... SET search_path)"
    )


def refuse_split_schema(conn: Connection, prefix: str = "") -> None:
    """Raise :class:`SchemaError` with :func:`split_schema_error`'s words, if any."""
    said = split_schema_error(conn, prefix)
    if said is not None:
        raise SchemaError(f"{said}; nothing was changed")


def prefixes_beside(conn: Connection, prefix: str = "") -> list[str]:
    """When ``prefix`` has no table yet in the current schema, the other prefixes (as
    ActiveMQ spells them, upper case) whose ACTIVEMQ_MSGS is there: an upgrade would make
    a new, empty set beside them, which is what a forgotten ``--table-prefix`` looks like."""
    tables = existing_tables(conn)
    schema = build_schema(prefix)
    if any(t.name in tables for t in (schema.msgs, schema.acks, schema.lock)):
        return []
    base = table_name("", "ACTIVEMQ_MSGS")
    return sorted(t[: -len(base)].upper() for t in tables if t.endswith(base) and t != base) + (
        [""] if base in tables and prefix else []
    )


def new_prefix_note(prefix: str, beside: list[str], option: str, downgrade: str) -> str:
    """The note after an upgrade made a new, empty set of tables beside ``beside``'s:
    ``option`` is how the caller's command names a prefix, with ``{}`` for it
    (``--table-prefix {}``), and ``downgrade`` the command that drops the empty set again."""
    others = ", ".join(repr(p) for p in beside)
    hint = option.format(beside[0] or "''")
    return (
        f"note: made a new, empty set of tables ({option.format(repr(prefix))}) beside the "
        f"tables of prefix {others} in this schema; if the broker's messages are in those, "
        f"give {hint} (or MQSTORE_TABLE_PREFIX) to every command, and `{downgrade}` drops "
        f"the empty set"
    )


def upgrade(engine: Engine, prefix: str = "", revision: str = "head") -> None:
    """Migrate to ``revision``; refuses (with the fix) on tables mqstore never managed. Puts
    back the lock row ID=1 if it was deleted, as ActiveMQ's start does (a locker refuses to
    start without it and says to run this)."""
    with database_errors("upgrade"), engine.begin() as conn:
        lock_migrations(conn, prefix)
        refuse_split_schema(conn, prefix)
        refuse_unmanaged_tables(conn, prefix)
        with _revision_errors(conn, prefix, revision):
            command.upgrade(alembic_config(prefix, conn), revision)
        if current_revision(conn, prefix) is not None:
            restore_lock_row(conn, build_schema(prefix))


def restore_lock_row(conn: Connection, schema: StoreSchema) -> bool:
    """Insert the lock row (1, NULL, NULL) ActiveMQ's DDL makes, if the lock table lacks it."""
    lock = schema.lock
    if lock.name not in existing_tables(conn):
        return False
    if conn.execute(sa.select(lock.c.id).where(lock.c.id == 1)).first() is not None:
        return False
    conn.execute(sa.insert(lock).values(id=1))
    return True


def own_tables(conn: Connection, prefix: str = "") -> list[str]:
    """mqstore's own tables of ``prefix`` (the journal's and the history's) that exist
    beside its ACTIVEMQ_MSGS (none without it: a table another tool named so): ActiveMQ
    never makes them, so with no revision recorded the version table was lost."""
    schema = build_schema(prefix)
    tables = existing_tables(conn)
    if schema.msgs.name not in tables:
        return []
    return [t.name for t in (schema.journal, schema.history) if t.name in tables]


def lost_version_error(conn: Connection, prefix: str = "") -> str | None:
    """What to do when mqstore's own tables of ``prefix`` are there but no revision is
    recorded (the version table dropped or emptied), or None when that is not so."""
    own = own_tables(conn, prefix)
    if not own or current_revision(conn, prefix) is not None:
        return None
    version_table = build_schema(prefix).version_table
    return (
        f"mqstore's own tables ({', '.join(own)}, prefix {prefix!r}) are there but "
        f"{version_table} records no revision (it was dropped or emptied): run `mqstore db "
        "adopt` to record the revision the tables match, keeping every row"
    )


def refuse_unmanaged_tables(conn: Connection, prefix: str = "") -> None:
    """Raise when tables of ``prefix`` exist but the database is at no mqstore revision
    (never migrated, or downgraded to base since): creating them again would fail."""
    schema = build_schema(prefix)
    tables = existing_tables(conn)
    if schema.version_table in tables and current_revision(conn, prefix) is not None:
        return
    lost = lost_version_error(conn, prefix)
    if lost is not None:
        raise SchemaError(f"{lost}; nothing was changed")
    if schema.msgs.name in tables:
        raise SchemaError(
            f"table {schema.msgs.name} exists but mqstore never migrated this database "
            f"(prefix {prefix!r}): it was made by ActiveMQ; run `mqstore db adopt` first"
        )
    found = [t.name for t in schema.metadata.sorted_tables if t.name in tables]
    if found:
        one = len(found) == 1
        what = f"table {found[0]} exists" if one else f"tables {', '.join(found)} exist"
        them = "it" if one else "them"
        raise SchemaError(
            f"{what} but mqstore never migrated this database "
            f"(prefix {prefix!r}), nothing was changed: drop {them} or use another "
            f"--table-prefix (if ActiveMQ made {them}, `mqstore db adopt` takes over all three "
            "of its tables)"
        )


def downgrade(
    engine: Engine,
    prefix: str = "",
    revision: str = "base",
    *,
    force: bool = False,
    renew_ms: int = DEFAULT_RENEW_MS,
    note: Callable[[str], None] | None = None,
) -> tuple[str | None, str | None]:
    """Migrate down to ``revision`` (``base`` drops every mqstore and ActiveMQ table);
    ``force`` goes ahead under a live master lease only when its holder is gone (never under
    a held row lock, see :func:`refuse_downgrade`); ``note`` is told when it did. Returns
    the revisions before and after: equal when the database was at ``revision`` already."""
    with (
        database_errors("downgrade"),
        engine.begin() as conn,
        _revision_errors(conn, prefix, revision),
    ):
        lock_migrations(conn, prefix)
        said = refuse_downgrade(conn, prefix, forced=force, renew_ms=renew_ms)
        if said is not None and note is not None:
            note(said)
        before = current_revision(conn, prefix)
        command.downgrade(alembic_config(prefix, conn), revision)
        return before, current_revision(conn, prefix)


def refuse_downgrade(
    conn: Connection,
    prefix: str = "",
    *,
    override: str = "--force",
    forced: bool = False,
    renew_ms: int = DEFAULT_RENEW_MS,
) -> str | None:
    """Raise when there is nothing to downgrade (alembic would make an empty version table)
    or a live broker holds the lock row in an open transaction (mqstore's ``--lock row``,
    ActiveMQ's default locker): dropping its tables would either pull them from under it or
    wait for it forever while blocking its every query. Also raise while a broker holds the
    master lease (``--lock lease``) or the guard session of the lease's holder is connected.

    ``forced`` (the option ``override``, named in the errors) goes ahead under a live lease
    whose holder is gone: no guard session of it is connected (an mqstore broker keeps one
    while it holds the lease), and the lease is not renewed while watched for ``renew_ms``
    (the brokers' renewal period) plus :data:`RENEWAL_SLACK_MS`; the line saying so is
    returned. Otherwise keep the row locked until the downgrade commits, so no broker starts
    or renews meanwhile."""
    if current_revision(conn, prefix) is None:
        no_schema = no_schema_error(conn)
        if no_schema is not None:
            raise SchemaVersionError(f"nothing to downgrade: {no_schema}")
        where = conn.execute(sa.text("SELECT current_schema()")).scalar()
        raise SchemaVersionError(
            f"nothing to downgrade: there is no mqstore schema for prefix {prefix!r} in "
            f"schema {where}; check --table-prefix (and the DSN's search_path)"
        )
    gone = watch_lease(conn.engine, prefix, renew_ms + RENEWAL_SLACK_MS) if forced else None
    refuse_row_locked(conn, prefix)
    return refuse_live_lease(conn, prefix, override=override, gone=gone)


def known_revisions() -> list[str]:
    """The revisions this mqstore ships, oldest first."""
    walk = ScriptDirectory.from_config(alembic_config()).walk_revisions()
    return [script.revision for script in reversed(list(walk))]


@contextmanager
def _revision_errors(conn: Connection, prefix: str, target: str) -> Iterator[None]:
    """Alembic's refusals (an unknown target, a database newer than this mqstore) as
    :class:`SchemaVersionError` naming what to do."""
    try:
        yield
    except CommandError as exc:
        newer = newer_schema_error(conn, prefix)
        if newer is not None:
            raise newer from None
        raise SchemaVersionError(
            f"cannot migrate to {target!r}: {exc}; revisions: {', '.join(known_revisions())}, "
            "`head` or `base`"
        ) from None


def newer_schema_error(conn: Connection, prefix: str = "") -> SchemaVersionError | None:
    """The refusal of a database a newer mqstore migrated (at a revision this one does not
    ship), or None."""
    current = current_revision(conn, prefix)
    if current is None or current in known_revisions():
        return None
    return SchemaVersionError(
        f"database schema is at revision {current}, newer than this mqstore knows "
        f"(head {head_revision()}): upgrade mqstore"
    )


def no_schema_error(conn: Connection) -> str | None:
    """When the session's search_path names no schema that exists (``current_schema()`` is
    NULL: no table can be found or made), what to do; else None."""
    where, path = conn.execute(
        sa.text("SELECT current_schema(), current_setting('search_path')")
    ).one()
    if where is not None:
        return None
    return (
        f"the session's search_path ({path}) names no schema that exists in this database, "
        "so no table is found or made: give the schema the tables are in "
        "(options=-csearch_path=SCHEMA in the DSN; public unless they were made elsewhere)"
    )


def require_head(conn: Connection, prefix: str = "", *, read_only: bool = False) -> None:
    """Raise :class:`SchemaVersionError` unless the database is at this mqstore's head, and
    :class:`SchemaError` unless the session's role may read and write every table (only
    read, for ``read_only`` commands: ``db check``, a dry run)."""
    split = split_schema_error(conn, prefix)
    if split is not None:
        raise SchemaError(split)
    current, head = current_revision(conn, prefix), head_revision()
    if current == head:
        tables = build_schema(prefix).tables
        wanted = ("SELECT",) if read_only else BROKER_PRIVILEGES
        require_privileges(conn, {table.name: wanted for table in tables})
        return
    if current is None:
        no_schema = no_schema_error(conn)
        if no_schema is not None:
            raise SchemaVersionError(f"database has no mqstore schema: {no_schema}")
        where = conn.execute(sa.text("SELECT current_schema()")).scalar()
        lost = lost_version_error(conn, prefix)
        if lost is not None:
            raise SchemaVersionError(f"database has no mqstore revision in schema {where}: {lost}")
        msgs = build_schema(prefix).msgs.name
        if msgs in existing_tables(conn):  # `db upgrade` refuses these: it says adopt
            raise SchemaVersionError(
                f"database has no mqstore schema for prefix {prefix!r} in schema {where}, "
                f"but table {msgs} is there: ActiveMQ made it; run `mqstore db adopt` to "
                "take its tables over, keeping every row"
            )
        beside = prefixes_beside(conn, prefix)
        named = ", ".join(repr(b) for b in beside)
        there = f" (tables with prefix {named} are there)" if beside else ""
        raise SchemaVersionError(
            f"database has no mqstore schema for prefix {prefix!r} in schema {where}{there}: "
            "run `mqstore db upgrade` (or `mqstore db adopt` if ActiveMQ created the tables), "
            "or give the --table-prefix or search_path (options=-csearch_path=...) they are under"
        )
    if current not in known_revisions():
        raise SchemaVersionError(
            f"database schema is at revision {current}, newer than this mqstore knows "
            f"(head {head}): upgrade mqstore"
        )
    raise SchemaVersionError(
        f"database schema is at revision {current}, this mqstore needs {head}: "
        "run `mqstore db upgrade`"
    )


def check(engine: Engine, prefix: str = "") -> list[str]:
    """Differences between the database and this mqstore: revision first, then schema drift.
    Reads only: a role with SELECT alone may run it."""
    with engine.connect() as conn:
        problems: list[str] = []
        try:
            require_head(conn, prefix, read_only=True)
        except SchemaVersionError as exc:
            problems.append(str(exc))
        if no_schema_error(conn) is None:  # else every table is "missing": noise
            problems.extend(schema_differences(conn, prefix))
        return problems


def drift_advice(prefix: str = "", differences: list[str] | None = None) -> str:
    """What to do about tables at the head revision that differ from what it declares
    (listing ``differences`` when given)."""
    flag = f" --table-prefix {prefix}" if prefix else ""
    listed = f" ({'; '.join(differences)})" if differences else ""
    return (
        f"the tables differ from what revision {head_revision()} declares{listed}, which no "
        "migration mends: restore what is missing (from a backup, or with the statement a "
        f"difference names) and drop what was added, then run `mqstore db check{flag}` again"
    )


def behind_advice(prefix: str = "") -> str:
    """What to do about differences from the head revision listed for a database not at it
    (behind it, or ActiveMQ's tables not adopted yet): the first line's command mends them."""
    flag = f" --table-prefix {prefix}" if prefix else ""
    return (
        f"the database is not at revision {head_revision()}, so the differences from it are "
        "listed as well: do what the first line says first (`mqstore db upgrade` or `mqstore "
        f"db adopt` mends what the migrations make), then run `mqstore db check{flag}` again "
        "for what is left"
    )


@dataclass
class TableStatus:
    """Rows per table, for the CLI's status print."""

    name: str
    exists: bool
    rows: int | None
    detail: str = ""


def table_status(engine: Engine, prefix: str = "") -> list[TableStatus]:
    """Row counts of the three ActiveMQ tables, and who holds the lock (a lease, or a
    row-lock master: :func:`mqstore.lock.describe_lock`)."""
    schema = build_schema(prefix)
    out: list[TableStatus] = []
    with engine.connect() as conn:
        tables = existing_tables(conn)
        for table in (schema.msgs, schema.acks, schema.lock):
            if table.name not in tables:
                out.append(TableStatus(table.name, False, None))
                continue
            rows = conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
            detail = ""
            if table is schema.lock and find_lock(conn, schema) is not None:
                lock, state = describe_lock(conn, schema)
                detail = f"{state} (holder={lock.broker_name} lease_until={lock.time})"
            out.append(TableStatus(table.name, True, int(rows), detail))
    return out


__all__ = [
    "BASELINE_REVISION",
    "TableStatus",
    "alembic_config",
    "behind_advice",
    "check",
    "current_revision",
    "downgrade",
    "drift_advice",
    "existing_tables",
    "head_revision",
    "known_revisions",
    "lost_version_error",
    "migrations_dir",
    "new_prefix_note",
    "newer_schema_error",
    "no_schema_error",
    "own_tables",
    "prefixes_beside",
    "refuse_downgrade",
    "refuse_split_schema",
    "refuse_unmanaged_tables",
    "require_head",
    "restore_lock_row",
    "schema_differences",
    "split_schema_error",
    "table_status",
    "upgrade",
]
