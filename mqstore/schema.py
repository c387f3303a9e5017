"""SQLAlchemy Core tables of ActiveMQ's JDBC store, plus mqstore's own, for any table prefix.

The one place that knows table, column, index and constraint names. ActiveMQ creates its
tables with unquoted upper-case names, which PostgreSQL folds to lower case, so every name
here is lower case (``BRK1_`` + ``ACTIVEMQ_MSGS`` is the table ``brk1_activemq_msgs``).

Two deliberate corrections over what ActiveMQ 5.17 ends up with on PostgreSQL:
the ACKS primary key includes PRIORITY (ActiveMQ's own DDL intends it, but its drop of the
3-column key fails there), and every constraint and index name carries the table prefix so
several prefixes can share one schema.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from sqlalchemy import (
    BigInteger,
    Column,
    Identity,
    Index,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    text,
)

from mqstore.errors import ConfigError

#: ActiveMQ's VARCHAR(250) for container names, ids and strings.
NAME_LENGTH = 250

#: The largest message body (MSG) the store takes. PostgreSQL sends BYTEA hex-encoded, two
#: characters a byte, in one value of less than 1 GiB: a larger body could be stored and
#: then never read back (every page of its destination would fail).
MAX_BODY_BYTES = 511 * 1024 * 1024

#: A prefix ActiveMQ can use unquoted and whose longest name (``<prefix>mqstore_history_pkey``)
#: stays within PostgreSQL's 63 characters, so no two names are cut to the same one.
PREFIX_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,30}")


def check_prefix(prefix: str) -> str:
    """``prefix`` if usable as a table prefix, else :class:`ConfigError` saying what is."""
    if prefix and not PREFIX_PATTERN.fullmatch(prefix):
        raise ConfigError(
            f"table prefix {prefix!r} is not usable: it must start with a letter and hold only "
            "letters, digits and '_' (at most 31 characters), e.g. BRK1_"
        )
    return prefix


@dataclass(frozen=True)
class StoreSchema:
    """The tables of one table prefix."""

    prefix: str
    metadata: MetaData
    msgs: Table
    acks: Table
    lock: Table
    journal: Table
    history: Table
    version_table: str
    activemq_tables: tuple[str, str, str]

    @property
    def tables(self) -> tuple[Table, ...]:
        """Every table of the prefix, ActiveMQ's and mqstore's own (not the version table)."""
        return (self.msgs, self.acks, self.lock, self.journal, self.history)


def table_name(prefix: str, base: str) -> str:
    """The PostgreSQL name ActiveMQ's unquoted ``prefix + base`` folds to."""
    return f"{prefix}{base}".lower()


def version_table_name(prefix: str) -> str:
    """Alembic's version table for this prefix (one per prefix, so prefixes migrate apart)."""
    return table_name(prefix, "mqstore_version")


@lru_cache(maxsize=16)
def build_schema(prefix: str = "") -> StoreSchema:
    """Declare the tables for ``prefix`` (``""`` is ActiveMQ's default)."""
    check_prefix(prefix)
    metadata = MetaData()
    msgs_name = table_name(prefix, "ACTIVEMQ_MSGS")
    acks_name = table_name(prefix, "ACTIVEMQ_ACKS")
    lock_name = table_name(prefix, "ACTIVEMQ_LOCK")

    msgs = Table(
        msgs_name,
        metadata,
        Column("id", BigInteger, nullable=False, autoincrement=False),
        Column("container", String(NAME_LENGTH), nullable=False),
        Column("msgid_prod", String(NAME_LENGTH)),
        Column("msgid_seq", BigInteger),
        Column("expiration", BigInteger),
        Column("msg", LargeBinary),
        Column("priority", BigInteger),
        Column("xid", String(NAME_LENGTH)),
        PrimaryKeyConstraint("id", name=f"{msgs_name}_pkey"),
    )
    # ActiveMQ's own indexes (names already carry the prefix in ActiveMQ's DDL).
    Index(f"{msgs_name}_midx", msgs.c.msgid_prod, msgs.c.msgid_seq)
    Index(f"{msgs_name}_cidx", msgs.c.container)
    Index(f"{msgs_name}_eidx", msgs.c.expiration)
    Index(f"{msgs_name}_pidx", msgs.c.priority)
    Index(f"{msgs_name}_xidx", msgs.c.xid)
    Index(f"{msgs_name}_iidx", msgs.c.id, msgs.c.xid, msgs.c.container)
    # mqstore's: the delivery-order page of a destination (PRIORITY DESC, ID), visible rows
    # only. Keyed on -PRIORITY so a page is one row-comparison range scan:
    # (-priority, id) > (-p, last_id) ORDER BY -priority, id.
    Index(
        f"{msgs_name}_cpidx",
        msgs.c.container,
        text("(- priority)"),
        msgs.c.id,
        postgresql_where=text("xid IS NULL"),
    )
    # mqstore's: one (MSGID_PROD, MSGID_SEQ) per destination.
    Index(
        f"{msgs_name}_uidx",
        msgs.c.container,
        msgs.c.msgid_prod,
        msgs.c.msgid_seq,
        unique=True,
    )

    acks = Table(
        acks_name,
        metadata,
        Column("container", String(NAME_LENGTH), nullable=False),
        Column("sub_dest", String(NAME_LENGTH)),
        Column("client_id", String(NAME_LENGTH), nullable=False),
        Column("sub_name", String(NAME_LENGTH), nullable=False),
        Column("selector", String(NAME_LENGTH)),
        Column("last_acked_id", BigInteger),
        Column("priority", BigInteger, nullable=False, server_default=text("5")),
        Column("xid", String(NAME_LENGTH)),
        PrimaryKeyConstraint(
            "container", "client_id", "sub_name", "priority", name=f"{acks_name}_pkey"
        ),
    )
    Index(f"{acks_name}_xidx", acks.c.xid)

    lock = Table(
        lock_name,
        metadata,
        Column("id", BigInteger, nullable=False, autoincrement=False),
        Column("time", BigInteger),
        Column("broker_name", String(NAME_LENGTH)),
        PrimaryKeyConstraint("id", name=f"{lock_name}_pkey"),
    )

    journal_name = table_name(prefix, "MQSTORE_JOURNAL")
    journal = Table(
        journal_name,
        metadata,
        Column("journal_id", String(64), nullable=False),
        Column("segment", BigInteger, nullable=False),
        Column("position", BigInteger, nullable=False),
        Column("broker_name", String(NAME_LENGTH)),
        Column("updated_at", BigInteger, nullable=False),
        Column("stopped_at", BigInteger),  # a clean stop; NULL while running or after a crash
        PrimaryKeyConstraint("journal_id", name=f"{journal_name}_pkey"),
    )

    history_name = table_name(prefix, "MQSTORE_HISTORY")
    history = Table(
        history_name,
        metadata,
        Column("hist_id", BigInteger, Identity(always=True), nullable=False),
        Column("id", BigInteger, nullable=False, autoincrement=False),
        Column("container", String(NAME_LENGTH), nullable=False),
        Column("msgid_prod", String(NAME_LENGTH)),
        Column("msgid_seq", BigInteger),
        Column("priority", BigInteger),
        Column("expiration", BigInteger),
        Column("enqueued_at", BigInteger),
        Column("removed_at", BigInteger, nullable=False),
        Column("outcome", String(20), nullable=False),
        Column("msg", LargeBinary),
        PrimaryKeyConstraint("hist_id", name=f"{history_name}_pkey"),
    )
    Index(f"{history_name}_ridx", history.c.removed_at)
    Index(f"{history_name}_cidx", history.c.container, history.c.id)

    return StoreSchema(
        prefix=prefix,
        metadata=metadata,
        msgs=msgs,
        acks=acks,
        lock=lock,
        journal=journal,
        history=history,
        version_table=version_table_name(prefix),
        activemq_tables=(msgs_name, acks_name, lock_name),
    )


__all__ = [
    "NAME_LENGTH",
    "PREFIX_PATTERN",
    "StoreSchema",
    "build_schema",
    "check_prefix",
    "table_name",
    "version_table_name",
]
