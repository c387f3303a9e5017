"""mqstore's local write-ahead journal.

The log layer (this package's ``records``, ``format``, ``frames``, ``segments``, ``seals``,
``scans``, ``resumption``, ``sync_policy``, ``stats``, ``writer``, ``reader``, ``maintenance``,
``repair`` and its ``repair_*`` modules) stores atomic batches of store operations in CRC-protected
records inside numbered segment files, with group-commit durability::

    with Journal.open(directory, sync_policy="always") as journal:
        for end, ops in journal.recover(after=last_checkpoint):
            ...  # replay
        end = journal.append([AddMessage(...), RemoveMessages(...)])  # durable on return
        journal.release(checkpoint_position)  # drop segments wholly behind a checkpoint

The log layer never imports ``mqstore``. The store layer (``store``, ``lifecycle``,
``writes``, ``checkpointing``, ``reads``, ``state``, ``checkpoint``, ``merge`` and their
helpers) builds :class:`JournaledStore`, the store port with the journal in front of
PostgreSQL; import it from ``journal.store`` (see docs/journal.md).
"""

from __future__ import annotations

from journal.errors import (
    JournalClosedError,
    JournalCorruptError,
    JournalDecodeError,
    JournalError,
    JournalFullError,
    JournalLockedError,
    JournalRecordTooLargeError,
    JournalTailMissingError,
)
from journal.format import MAX_PAYLOAD, RECORD_BATCH, RECORD_CHECKPOINT, Position
from journal.maintenance import InspectReport, Problem, SegmentInfo, inspect
from journal.reader import read_records
from journal.records import (
    AckSubscription,
    AddMessage,
    AddSubscription,
    CheckpointMark,
    DeleteSubscription,
    Op,
    PurgeDestination,
    RemoveMessages,
    UpdateMessage,
    XaCommit,
    XaPrepare,
    XaRollback,
    decode_batch,
    encode_batch,
)
from journal.repair import RepairAction, RepairPlan, repair
from journal.scans import RecoveryReport
from journal.stats import JournalStats
from journal.sync_policy import SyncPolicy
from journal.writer import DEFAULT_SEGMENT_SIZE, Journal

__all__ = [
    "DEFAULT_SEGMENT_SIZE",
    "MAX_PAYLOAD",
    "RECORD_BATCH",
    "RECORD_CHECKPOINT",
    "AckSubscription",
    "AddMessage",
    "AddSubscription",
    "CheckpointMark",
    "DeleteSubscription",
    "InspectReport",
    "Journal",
    "JournalClosedError",
    "JournalCorruptError",
    "JournalDecodeError",
    "JournalError",
    "JournalFullError",
    "JournalLockedError",
    "JournalRecordTooLargeError",
    "JournalStats",
    "JournalTailMissingError",
    "Op",
    "Position",
    "Problem",
    "PurgeDestination",
    "RecoveryReport",
    "RemoveMessages",
    "RepairAction",
    "RepairPlan",
    "SegmentInfo",
    "SyncPolicy",
    "UpdateMessage",
    "XaCommit",
    "XaPrepare",
    "XaRollback",
    "decode_batch",
    "encode_batch",
    "inspect",
    "read_records",
    "repair",
]
# The store layer, imported on first use so the log layer stays free of mqstore.
_STORE_NAMES = (
    "JournalBehindDatabaseError",
    "JournalDatabaseMismatchError",
    "JournalIdLostError",
    "JournalRowMissingError",
    "JournalMasterSlaveError",
    "JournalModeMismatchError",
    "JournalUnusableError",
    "JournaledStore",
)
__all__ += list(_STORE_NAMES)


def __getattr__(name: str) -> object:
    if name in _STORE_NAMES:
        from journal import store

        return getattr(store, name)
    raise AttributeError(f"module 'journal' has no attribute {name!r}")
