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
    """Drop STOPPED_AT; refused while a journal has no clean stop on record (see
    :func:`_refuse_journals_left_running`)."""
    journal = _name("MQSTORE_JOURNAL")
    if not context.is_offline_mode():
        _refuse_journals_left_running(journal)
    op.drop_column(journal, "stopped_at")


def _refuse_journals_left_running(journal: str) -> None:
    """An upgrade counts every journal as stopped: going down and up again would hide one
    whose broker runs, or died with writes acknowledged past its last checkpoint, from a
    broker that starts on another journal (which warns of it, and refuses to start)."""
    from mqstore.errors import SchemaError

    running = op.get_bind().execute(
        sa.text(f"SELECT journal_id FROM {journal} WHERE stopped_at IS NULL ORDER BY 1")
    )
    ids = [str(journal_id) for (journal_id,) in running]
    if ids:
        raise SchemaError(
            f"journal {', '.join(ids)} has no clean stop on record in {journal} (its broker "
            "runs, or died before it checkpointed everything): below revision 0003 that is "
            "forgotten. Stop its broker, or start a died one again on its journal directory "
            "and stop it; for a journal that is gone for good, accept the loss of its "
            "uncheckpointed writes with `mqstore journal forget ID --yes`. Then downgrade "
            "again; nothing was changed"
        )
