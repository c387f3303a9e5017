"""mqstore: an ActiveMQ-compatible broker store on PostgreSQL.

The public API: the store port and its values (:mod:`mqstore.store`), the PostgreSQL store,
settings, errors. The journal lives in the top-level ``journal`` package and is composed in
by :mod:`mqstore.app`; this package never imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Imported on first use: the codec (mqstore.openwire) must load without SQLAlchemy, psycopg
# and pydantic, e.g. in every Spark Python worker, which only decodes.
_LAZY = {
    "MqstoreError": "mqstore.errors",
    "Settings": "mqstore.settings",
    "load_settings": "mqstore.settings",
    **dict.fromkeys(
        (
            "Ack",
            "Batch",
            "Cursor",
            "NewMessage",
            "Outcome",
            "PostgresStore",
            "Store",
            "StoredMessage",
            "Subscription",
            "SubscriptionKey",
            "Xid",
        ),
        "mqstore.store",
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mqstore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
