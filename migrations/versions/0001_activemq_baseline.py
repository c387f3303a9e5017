"""ActiveMQ 5.17 JDBC store tables (baseline), with the corrected ACKS key and prefixed names.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _name(base: str) -> str:
    """Table or index name for the configured prefix (ActiveMQ's unquoted names fold to lower)."""
    return str(context.config.attributes["table_prefix"] + base).lower()


def upgrade() -> None:
    """Create ACTIVEMQ_MSGS, ACTIVEMQ_ACKS, ACTIVEMQ_LOCK as ActiveMQ 5.17 does on PostgreSQL."""
    msgs, acks, lock = _name("ACTIVEMQ_MSGS"), _name("ACTIVEMQ_ACKS"), _name("ACTIVEMQ_LOCK")
    op.create_table(
        msgs,
        sa.Column("id", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("container", sa.String(250), nullable=False),
        sa.Column("msgid_prod", sa.String(250), nullable=True),
        sa.Column("msgid_seq", sa.BigInteger(), nullable=True),
        sa.Column("expiration", sa.BigInteger(), nullable=True),
        sa.Column("msg", sa.LargeBinary(), nullable=True),
        sa.Column("priority", sa.BigInteger(), nullable=True),
        sa.Column("xid", sa.String(250), nullable=True),
        sa.PrimaryKeyConstraint("id", name=f"{msgs}_pkey"),
    )
    op.create_index(f"{msgs}_midx", msgs, ["msgid_prod", "msgid_seq"])
    op.create_index(f"{msgs}_cidx", msgs, ["container"])
    op.create_index(f"{msgs}_eidx", msgs, ["expiration"])
    op.create_index(f"{msgs}_pidx", msgs, ["priority"])
    op.create_index(f"{msgs}_xidx", msgs, ["xid"])
    op.create_index(f"{msgs}_iidx", msgs, ["id", "xid", "container"])
    add_mqstore_indexes(msgs)

    op.create_table(
        acks,
        sa.Column("container", sa.String(250), nullable=False),
        sa.Column("sub_dest", sa.String(250), nullable=True),
        sa.Column("client_id", sa.String(250), nullable=False),
        sa.Column("sub_name", sa.String(250), nullable=False),
        sa.Column("selector", sa.String(250), nullable=True),
        sa.Column("last_acked_id", sa.BigInteger(), nullable=True),
        sa.Column("priority", sa.BigInteger(), server_default=sa.text("5"), nullable=False),
        sa.Column("xid", sa.String(250), nullable=True),
        sa.PrimaryKeyConstraint(
            "container", "client_id", "sub_name", "priority", name=f"{acks}_pkey"
        ),
    )
    op.create_index(f"{acks}_xidx", acks, ["xid"])

    op.create_table(
        lock,
        sa.Column("id", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("time", sa.BigInteger(), nullable=True),
        sa.Column("broker_name", sa.String(250), nullable=True),
        sa.PrimaryKeyConstraint("id", name=f"{lock}_pkey"),
    )
    op.execute(sa.text(f"INSERT INTO {lock} (id) VALUES (1)"))


def add_mqstore_indexes(msgs: str) -> None:
    """mqstore's additions: the delivery-order page index and one JMS id per destination."""
    op.execute(
        sa.text(
            f"CREATE INDEX {msgs}_cpidx ON {msgs} (container, (- priority), id) WHERE xid IS NULL"
        )
    )
    op.create_index(f"{msgs}_uidx", msgs, ["container", "msgid_prod", "msgid_seq"], unique=True)


def downgrade() -> None:
    """Drop the three tables (and every message in them)."""
    for base in ("ACTIVEMQ_ACKS", "ACTIVEMQ_MSGS", "ACTIVEMQ_LOCK"):
        op.drop_table(_name(base))
