"""The store port, its values, and the PostgreSQL implementation."""

from __future__ import annotations

from mqstore.store.model import (
    Ack,
    Batch,
    Cursor,
    NewMessage,
    Outcome,
    PreparedTransaction,
    Removal,
    StoredMessage,
    StoreStats,
    Subscription,
    SubscriptionKey,
    Xid,
)
from mqstore.store.port import Store
from mqstore.store.postgres import PostgresStore

__all__ = [
    "Ack",
    "Batch",
    "Cursor",
    "NewMessage",
    "Outcome",
    "PostgresStore",
    "PreparedTransaction",
    "Removal",
    "Store",
    "StoreStats",
    "StoredMessage",
    "Subscription",
    "SubscriptionKey",
    "Xid",
]
