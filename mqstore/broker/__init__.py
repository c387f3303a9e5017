"""A STOMP 1.0/1.1/1.2 broker with ActiveMQ's conventions, hosting a :class:`Store`.

``Broker(store, BrokerConfig(...))``; ``await broker.start(host, port)``;
``broker.snapshot()``; ``await broker.stop()``. See ``docs/broker.md``.
"""

from __future__ import annotations

from mqstore.broker.config import BrokerConfig, RedeliveryPolicy
from mqstore.broker.frames import Limits
from mqstore.broker.server import Broker

__all__ = ["Broker", "BrokerConfig", "Limits", "RedeliveryPolicy"]
