"""The one exception hierarchy of mqstore.

Every error a user can cause carries a message that says what happened and what to do.
"""

from __future__ import annotations


class MqstoreError(Exception):
    """Base class of every error mqstore raises on purpose."""


class ConfigError(MqstoreError):
    """A setting or command-line value is invalid."""


class DatabaseUnavailableError(MqstoreError):
    """The database cannot be reached, or went away mid-operation."""


class CommitOutcomeUnknownError(DatabaseUnavailableError):
    """The connection ended while a COMMIT was under way: the write may or may not have
    been committed."""


class SchemaError(MqstoreError):
    """The database schema is missing, behind, ahead of, or different from what mqstore expects."""


class SchemaVersionError(SchemaError):
    """The database is not at the schema revision this mqstore needs."""


class NotActiveMQSchemaError(SchemaError):
    """`adopt` was pointed at tables that are not ActiveMQ's."""


class StoreError(MqstoreError):
    """A store operation failed; nothing of it was written."""


class InvalidMessageError(StoreError):
    """A message or destination was refused before anything was written."""


class DuplicateMessageError(StoreError):
    """A message with the same (MSGID_PROD, MSGID_SEQ) is already stored in that destination."""


class MessageNotFoundError(StoreError):
    """The message to update or remove is not stored."""


class SubscriptionNotFoundError(StoreError):
    """The durable subscription does not exist."""


class TransactionError(StoreError):
    """A local or XA transaction was used wrongly (unknown, already ended, ...)."""


class LockError(MqstoreError):
    """Master election failed or was refused."""


class LockLostError(LockError):
    """This store lost the master lock; it stopped writing at once."""


class LeaseNotRenewedError(LockLostError, DatabaseUnavailableError):
    """The database did not answer before the lease ran out: writes wait for a renewal."""


class NotMasterError(LockError):
    """A write was attempted by a store that does not hold the master lock."""


class StoreClosedError(StoreError):
    """The store is not started or already stopped."""


class JournalFailedError(StoreError):
    """The journal failed while the broker ran (a write, sync or rotation)."""


class JournalUnavailableError(StoreError):
    """The local journal took no write: its disk is full (writes go on once there is room),
    or it failed (the broker stops; what it acknowledged before is kept)."""
