"""mqstore's own tables: the journal's checkpoint position and the message history.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _name(base: str) -> str:
    """Table or index name for the configured prefix (ActiveMQ's unquoted names fold to lower)."""
    return str(context.config.attributes["table_prefix"] + base).lower()


def upgrade() -> None:
    """Add MQSTORE_JOURNAL (checkpoint positions) and MQSTORE_HISTORY (what became of messages)."""
    journal = _name("MQSTORE_JOURNAL")
    op.create_table(
        journal,
        sa.Column("journal_id", sa.String(64), nullable=False),
        sa.Column("segment", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("broker_name", sa.String(250), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("journal_id", name=f"{journal}_pkey"),
    )
    history = _name("MQSTORE_HISTORY")
    op.create_table(
        history,
        sa.Column("hist_id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("container", sa.String(250), nullable=False),
        sa.Column("msgid_prod", sa.String(250), nullable=True),
        sa.Column("msgid_seq", sa.BigInteger(), nullable=True),
        sa.Column("priority", sa.BigInteger(), nullable=True),
        sa.Column("expiration", sa.BigInteger(), nullable=True),
        sa.Column("enqueued_at", sa.BigInteger(), nullable=True),
        sa.Column("removed_at", sa.BigInteger(), nullable=False),
        sa.Column("outcome", sa.String(20), nullable=False),
        sa.Column("msg", sa.LargeBinary(), nullable=True),
        sa.PrimaryKeyConstraint("hist_id", name=f"{history}_pkey"),
    )
    op.create_index(f"{history}_ridx", history, ["removed_at"])
    op.create_index(f"{history}_cidx", history, ["container", "id"])


def downgrade() -> None:
    """Drop mqstore's own tables (the journal position and the history)."""
    op.drop_table(_name("MQSTORE_HISTORY"))
    op.drop_table(_name("MQSTORE_JOURNAL"))
