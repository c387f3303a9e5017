"""`mqstore db adopt`'s transaction: take over tables a real ActiveMQ broker created, or
record the revision of mqstore's own tables whose version table was lost."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.util.exc import CommandError
from sqlalchemy.engine import Connection, Engine

from mqstore import adoption
from mqstore.adoption import AdoptReport
from mqstore.drift import schema_differences
from mqstore.errors import NotActiveMQSchemaError, SchemaError
from mqstore.migrate import (
    BASELINE_REVISION,
    alembic_config,
    current_revision,
    existing_tables,
    head_revision,
    known_revisions,
    own_tables,
    restore_lock_row,
)
from mqstore.migration_guards import (
    database_errors,
    lock_migrations,
    refuse_live_lease,
    refuse_row_locked,
)
from mqstore.schema import StoreSchema, build_schema


def adopt(engine: Engine, prefix: str = "") -> AdoptReport:
    """Take over tables a real ActiveMQ broker created, keeping every row.

    Verifies every column, moves the ACKS primary key to (CONTAINER, CLIENT_ID, SUB_NAME,
    PRIORITY) under a prefixed name, adds any missing ActiveMQ index and mqstore's indexes,
    gives rows without a PRIORITY the 0 ActiveMQ writes, ensures the lock row, and stamps
    the baseline revision, then upgrades to head. All in one transaction: on any refusal
    nothing changes. Refuses while a live broker holds the lock row or its lease (its tables
    would change under it), and keeps the row locked so none starts meanwhile.

    Tables mqstore made whose version table was lost (dropped or emptied; mqstore's own
    tables tell them apart) get the revision they match recorded instead, changing no row
    (:func:`_record_lost_revision`).
    """
    schema = build_schema(prefix)
    report = AdoptReport()
    with database_errors("adopt"), engine.begin() as conn:
        lock_migrations(conn, prefix)
        tables = existing_tables(conn)
        if current_revision(conn, prefix) is not None:
            raise SchemaError(
                f"this database is already managed by mqstore (prefix {prefix!r}); "
                "use `mqstore db check` or `mqstore db upgrade`"
            )
        own = own_tables(conn, prefix)
        if own:
            _record_lost_revision(conn, prefix, own, report)
            _count_rows(conn, schema, report)
            return report
        present = [t for t in schema.activemq_tables if t in tables]
        if not present:
            where = conn.execute(sa.text("SELECT current_schema()")).scalar()
            raise NotActiveMQSchemaError(
                f"no ActiveMQ tables found (looked for {', '.join(schema.activemq_tables)} "
                f"in schema {where}, the first of the DSN's search_path); for an empty "
                "database run `mqstore db upgrade`, or pass the broker's --table-prefix, or "
                "the schema ActiveMQ uses (options=-csearch_path=...)"
            )
        refuse_row_locked(conn, prefix)
        adoption.refuse_acks_lost_to_another_prefix(conn, schema, tables)
        problems = adoption.verify_activemq_tables(conn, prefix)
        if problems:
            raise NotActiveMQSchemaError(
                "these tables are not ActiveMQ 5.x JDBC store tables, nothing was changed: "
                + "; ".join(problems)
            )
        refuse_live_lease(conn, prefix, override=None)  # an ActiveMQ lease-locker master
        adoption.fix_acks_key(conn, schema, report)
        adoption.ensure_indexes(conn, schema, report)
        adoption.fill_missing_priorities(conn, schema, report)
        if restore_lock_row(conn, schema):
            report.actions.append(f"inserted the lock row into {schema.lock.name}")
        command.stamp(alembic_config(prefix, conn), BASELINE_REVISION)
        command.upgrade(alembic_config(prefix, conn), "head")
        reached = current_revision(conn, prefix)
        upgraded = f", upgraded to {reached}" if reached != BASELINE_REVISION else ""
        report.actions.append(f"stamped revision {BASELINE_REVISION} (ActiveMQ's tables){upgraded}")
        drift = schema_differences(conn, prefix)
        if drift:  # what the column check cannot see: keys, defaults, extra lock rows
            raise NotActiveMQSchemaError(
                "these tables differ from ActiveMQ 5.x JDBC store tables in ways adopt does not "
                "repair, nothing was changed: " + "; ".join(drift)
            )
        adoption.warn_selectors(conn, schema, report)
        adoption.note_priorities(conn, schema, report)
        _count_rows(conn, schema, report)
    return report


def _count_rows(conn: Connection, schema: StoreSchema, report: AdoptReport) -> None:
    for table in (schema.msgs, schema.acks, schema.lock):
        count = conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
        report.rows[table.name] = int(count)


def _record_lost_revision(
    conn: Connection, prefix: str, own: list[str], report: AdoptReport
) -> None:
    """mqstore made these tables (``own`` are its own) but their revision is not recorded:
    record the newest revision they match, trying each from head down (stamp it, upgrade
    to head, compare with the declared schema; each try in a savepoint rolled back unless
    it matched). Raise, naming every difference from head, when none matches. Refuses
    while a live broker holds the lock row or its lease, as an adoption does."""
    refuse_row_locked(conn, prefix)
    refuse_live_lease(conn, prefix, override=None)
    schema, head = build_schema(prefix), head_revision()
    if restore_lock_row(conn, schema):
        report.actions.append(f"inserted the lock row into {schema.lock.name}")
    head_drift: list[str] = []
    for revision in reversed(known_revisions()):
        attempt = conn.begin_nested()
        try:
            command.stamp(alembic_config(prefix, conn), revision)
            command.upgrade(alembic_config(prefix, conn), "head")
            drift = schema_differences(conn, prefix)
        except (sa.exc.DBAPIError, SchemaError, CommandError):
            attempt.rollback()  # its migrations cannot run on these tables: not that one
            continue
        if drift:
            head_drift = head_drift or (drift if revision == head else [])
            attempt.rollback()
            continue
        attempt.commit()
        upgraded = f", then upgraded them to {head}" if revision != head else ""
        report.actions.append(
            f"{schema.version_table} recorded no revision, but mqstore's own tables "
            f"({', '.join(own)}) are there and the tables match revision {revision}: "
            f"recorded revision {revision}{upgraded}; every row kept"
        )
        return
    differences = "; ".join(head_drift) or "its migrations cannot run on them"
    raise SchemaError(
        f"mqstore's own tables ({', '.join(own)}) are there but {schema.version_table} "
        f"records no revision, and the tables match none this mqstore ships (against head "
        f"{head}: {differences}), nothing was changed: make the tables match revision "
        f"{head} (or use the mqstore that made them, if it is newer), then run `mqstore db "
        "adopt` again"
    )


__all__ = ["AdoptReport", "adopt"]
