"""mqstore: an ActiveMQ-compatible broker store on PostgreSQL.

The public API: the store port and its values (:mod:`mqstore.store`), the PostgreSQL store,
settings, errors. The journal lives in the top-level ``journal`` package and is composed in
by :mod:`mqstore.app`; this package never imports it.
"""

from __future__ import annotations

from mqstore.errors import MqstoreError
from mqstore.settings import Settings, load_settings
from mqstore.store import (
    Ack,
    Batch,
    Cursor,
    NewMessage,
    Outcome,
    PostgresStore,
    Store,
    StoredMessage,
    Subscription,
    SubscriptionKey,
    Xid,
)

__version__ = "0.1.0"

__all__ = [
    "Ack",
    "Batch",
    "Cursor",
    "MqstoreError",
    "NewMessage",
    "Outcome",
    "PostgresStore",
    "Settings",
    "Store",
    "StoredMessage",
    "Subscription",
    "SubscriptionKey",
    "Xid",
    "__version__",
    "load_settings",
]
