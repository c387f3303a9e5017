"""An embedded PostgreSQL for running without a server (see :mod:`mqstore.embedded.server`)."""

from __future__ import annotations

from mqstore.embedded.account import SERVER_USER
from mqstore.embedded.cluster import store_exists
from mqstore.embedded.loopback import LoopbackEndpoint
from mqstore.embedded.server import EmbeddedPostgres

__all__ = ["SERVER_USER", "EmbeddedPostgres", "LoopbackEndpoint", "store_exists"]
