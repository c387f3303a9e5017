"""The steps of adopting tables a real ActiveMQ broker created (:func:`mqstore.takeover.adopt`
runs them in one transaction): ActiveMQ's columns verified, its ACKS key, indexes and empty
PRIORITY values put right, and the warnings and notes the CLI prints after."""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mqstore.drift import type_name
from mqstore.errors import NotActiveMQSchemaError, SchemaError
from mqstore.schema import StoreSchema, table_name

#: ActiveMQ 5.17's columns on PostgreSQL: name -> (type, nullable).
ACTIVEMQ_COLUMNS: dict[str, dict[str, tuple[str, bool]]] = {
    "ACTIVEMQ_MSGS": {
        "id": ("BIGINT", False),
        "container": ("VARCHAR(250)", False),
        "msgid_prod": ("VARCHAR(250)", True),
        "msgid_seq": ("BIGINT", True),
        "expiration": ("BIGINT", True),
        "msg": ("BYTEA", True),
        "priority": ("BIGINT", True),
        "xid": ("VARCHAR(250)", True),
    },
    "ACTIVEMQ_ACKS": {
        "container": ("VARCHAR(250)", False),
        "sub_dest": ("VARCHAR(250)", True),
        "client_id": ("VARCHAR(250)", False),
        "sub_name": ("VARCHAR(250)", False),
        "selector": ("VARCHAR(250)", True),
        "last_acked_id": ("BIGINT", True),
        "priority": ("BIGINT", False),
        "xid": ("VARCHAR(250)", True),
    },
    "ACTIVEMQ_LOCK": {
        "id": ("BIGINT", False),
        "time": ("BIGINT", True),
        "broker_name": ("VARCHAR(250)", True),
    },
}


@dataclass
class AdoptReport:
    """What ``adopt`` did."""

    actions: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)


def verify_activemq_tables(conn: Connection, prefix: str) -> list[str]:
    """How ``prefix``'s tables differ from ActiveMQ's columns (:data:`ACTIVEMQ_COLUMNS`)."""
    inspector = sa.inspect(conn)
    tables = set(inspector.get_table_names())
    problems: list[str] = []
    for base, columns in ACTIVEMQ_COLUMNS.items():
        name = table_name(prefix, base)
        if name not in tables:
            problems.append(f"table {name} is missing")
            continue
        actual = {c["name"]: c for c in inspector.get_columns(name)}
        for col, (want_type, nullable) in columns.items():
            got = actual.get(col)
            if got is None:
                problems.append(f"{name}.{col} is missing")
                continue
            got_type = type_name(got["type"])
            if got_type != want_type:
                problems.append(f"{name}.{col} is {got_type}, ActiveMQ's is {want_type}")
            if bool(got["nullable"]) != nullable:
                problems.append(f"{name}.{col} nullability differs from ActiveMQ's")
        for extra in set(actual) - set(columns):
            problems.append(f"{name}.{extra} is not an ActiveMQ column")
    return problems


def refuse_acks_lost_to_another_prefix(
    conn: Connection, schema: StoreSchema, tables: set[str]
) -> None:
    """ActiveMQ names the ACKS key PK_ACTIVEMQ_ACKS whatever the prefix, so a second prefix's
    CREATE TABLE of ACKS fails in a schema that has one: say how to get that table made."""
    if schema.acks.name in tables or schema.msgs.name not in tables:
        return
    owner = conn.execute(
        sa.text(
            "SELECT i.indrelid::regclass::text FROM pg_index i "
            "WHERE i.indexrelid = to_regclass('pk_activemq_acks')"
        )
    ).scalar()
    if owner is None:
        return
    other = owner.removesuffix("activemq_acks")
    first = "`mqstore db adopt" + (f" --table-prefix {other.upper()}" if other else "") + "`"
    raise NotActiveMQSchemaError(
        f"table {schema.acks.name} is missing, nothing was changed: ActiveMQ could not create "
        f"it because {owner}'s key already holds the name pk_activemq_acks (ActiveMQ leaves "
        f"the prefix out of it). Run {first} first (it renames that key), restart this "
        "prefix's ActiveMQ broker so it creates its ACKS table, then adopt again"
    )


#: At most this many subscriptions with a selector are named in adopt's warning.
SELECTORS_LISTED = 10


def warn_selectors(conn: Connection, schema: StoreSchema, report: AdoptReport) -> None:
    """Durable subscriptions with a SELECTOR are kept, but `mqstore serve` does not evaluate
    selectors and refuses to resume them: name them (in ``report.actions``, which the CLI
    prints), and say what to do."""
    a = schema.acks.c
    rows = conn.execute(
        sa.select(a.container, a.client_id, a.sub_name, sa.func.max(a.selector))
        .where(a.selector.is_not(None), a.priority < 10, a.container.like("topic://%"))
        .group_by(a.container, a.client_id, a.sub_name)
        .order_by(a.container, a.client_id, a.sub_name)
    ).all()
    if not rows:
        return
    named = "; ".join(f"{r[0]} {r[1]}/{r[2]} selector {r[3]!r}" for r in rows[:SELECTORS_LISTED])
    more = f"; and {len(rows) - SELECTORS_LISTED} more" if len(rows) > SELECTORS_LISTED else ""
    report.actions.append(
        f"warning: {len(rows)} durable subscription(s) have a message selector, which "
        f"mqstore's broker does not evaluate: {named}{more}. `mqstore serve` refuses to "
        "resume them and keeps their messages stored: consume them with ActiveMQ first, or "
        "delete them (STOMP UNSUBSCRIBE with activemq.subscriptionName) and subscribe again "
        "without a selector"
    )


def note_priorities(conn: Connection, schema: StoreSchema, report: AdoptReport) -> None:
    """Messages stored with a PRIORITY other than 0 show ActiveMQ ran with
    ``prioritizedMessages``: say which mqstore setting keeps delivering by priority, and what
    the default does with them (reads them in ID order, as ActiveMQ's plain mode)."""
    m = schema.msgs.c
    prioritized = conn.execute(
        sa.select(sa.exists().where(m.priority.is_not(None), m.priority != 0))
    ).scalar_one()
    if not prioritized:
        return
    report.actions.append(
        "note: messages are stored with a PRIORITY other than 0, so ActiveMQ ran with "
        "prioritizedMessages=true. Set MQSTORE_PRIORITIZED_MESSAGES=true (or run serve with "
        "--prioritized-messages) for mqstore to deliver by priority too; without it (the "
        "default, ActiveMQ's plain mode) every message is still delivered, durable "
        "subscriptions in ID order"
    )


def fix_acks_key(conn: Connection, schema: StoreSchema, report: AdoptReport) -> None:
    """Give ACKS the primary key (and prefixed name) of the declared schema."""
    acks = schema.acks
    pk = sa.inspect(conn).get_pk_constraint(acks.name)
    want_cols = [c.name for c in acks.primary_key.columns]
    name = pk.get("name")
    cols = list(pk.get("constrained_columns") or [])
    if cols == want_cols and name == acks.primary_key.name:
        return
    if name:
        conn.execute(sa.text(f'ALTER TABLE {acks.name} DROP CONSTRAINT "{name}"'))
    conn.execute(
        sa.text(
            f"ALTER TABLE {acks.name} ADD CONSTRAINT {acks.primary_key.name} "
            f"PRIMARY KEY ({', '.join(want_cols)})"
        )
    )
    report.actions.append(
        f"{acks.name}: primary key {name}{tuple(cols)} -> {acks.primary_key.name}{tuple(want_cols)}"
    )


def fill_missing_priorities(conn: Connection, schema: StoreSchema, report: AdoptReport) -> None:
    """Rows without a PRIORITY (brokers before 5.4 had no such column; ActiveMQ added it
    empty) get 0, what ActiveMQ writes unless ``prioritizedMessages`` is on: mqstore pages in
    (PRIORITY, ID) order, so it would count such rows but never deliver them."""
    msgs = schema.msgs
    filled = conn.execute(
        sa.update(msgs).where(msgs.c.priority.is_(None)).values(priority=0)
    ).rowcount
    if filled:
        report.actions.append(f"{msgs.name}: PRIORITY 0 given to {filled} row(s) that had none")


def ensure_indexes(conn: Connection, schema: StoreSchema, report: AdoptReport) -> None:
    """Create the declared indexes MSGS and ACKS lack; refuse duplicate JMS message ids."""
    msgs = schema.msgs
    dups = conn.execute(
        sa.select(msgs.c.container, msgs.c.msgid_prod, msgs.c.msgid_seq, sa.func.count())
        .group_by(msgs.c.container, msgs.c.msgid_prod, msgs.c.msgid_seq)
        .having(sa.func.count() > 1)
        .limit(5)
    ).all()
    if dups:
        listed = ", ".join(f"{d[0]} {d[1]}:{d[2]} x{d[3]}" for d in dups)
        raise SchemaError(
            f"{msgs.name} holds duplicate JMS message ids in one destination ({listed}); "
            "remove the duplicates, then run adopt again. Nothing was changed."
        )
    for table in (schema.msgs, schema.acks):
        existing = {str(i["name"]) for i in sa.inspect(conn).get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in existing:
                index.create(conn)
                report.actions.append(f"created index {index.name}")
