"""MQSTORE_JOURNAL.STOPPED_AT: when the broker on a journal stopped cleanly (NULL while one
runs on it, or after it died), so a broker that starts on another journal can tell that
the last one's acknowledged writes may live on only in a journal it does not have.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _name(base: str) -> str:
    """Table name for the configured prefix (ActiveMQ's unquoted names fold to lower)."""
    return str(context.config.attributes["table_prefix"] + base).lower()


def upgrade() -> None:
    """Add STOPPED_AT; journals known so far count as stopped (nothing tells otherwise)."""
    journal = _name("MQSTORE_JOURNAL")
    op.add_column(journal, sa.Column("stopped_at", sa.BigInteger(), nullable=True))
    op.execute(f"UPDATE {journal} SET stopped_at = updated_at")


def downgrade() -> None:
    """Drop STOPPED_AT."""
    op.drop_column(_name("MQSTORE_JOURNAL"), "stopped_at")
