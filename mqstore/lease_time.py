"""ACTIVEMQ_LOCK.TIME as stored: a lease end in epoch ms, or a journaled broker's.

ActiveMQ's lease locker, and every lease standby, takes the lease once ``TIME < now``. A
broker with a local journal keeps acknowledged writes in that journal until a checkpoint,
so nothing may take its lease over when it dies: a standby would serve a database without
them. It writes its lease end plus :data:`JOURNALED_LEASE_OFFSET_MS`, a time no clock
reaches, so no standby ever sees that lease run out; only that broker, started again on
its journal, takes it back (or `mqstore journal forget` frees it once the journal is
accepted as lost). Readers decode the stored value with :func:`decode_lease_time`.
"""

from __future__ import annotations

#: Added to a journaled broker's lease end (10^13 ms, about 317 years): stored ends from
#: this on are journaled ones, normal ends stay below it until the year 2286.
JOURNALED_LEASE_OFFSET_MS = 10**13


def encode_lease_time(end_ms: int, *, journaled: bool) -> int:
    """The TIME to store for a lease ending at ``end_ms``."""
    return end_ms + JOURNALED_LEASE_OFFSET_MS if journaled else end_ms


def decode_lease_time(stored: int | None) -> tuple[int | None, bool]:
    """A stored TIME as (the lease end in epoch ms, whether a journaled broker wrote it)."""
    if stored is not None and stored >= JOURNALED_LEASE_OFFSET_MS:
        return stored - JOURNALED_LEASE_OFFSET_MS, True
    return stored, False
