"""OpenWire data-structure type codes for messages and destinations."""

from __future__ import annotations

import enum


class MessageKind(enum.IntEnum):
    """OpenWire data-structure type of the stored message."""

    MESSAGE = 23
    BYTES = 24
    MAP = 25
    OBJECT = 26
    STREAM = 27
    TEXT = 28
    BLOB = 29


class DestinationKind(enum.IntEnum):
    """OpenWire data-structure type of a destination."""

    QUEUE = 100
    TOPIC = 101
    TEMP_QUEUE = 102
    TEMP_TOPIC = 103

    @property
    def scheme(self) -> str:
        """Prefix used in qualified names: ``queue``, ``topic``, ``temp-queue``, ``temp-topic``."""
        return _SCHEMES[self]


_SCHEMES = {
    DestinationKind.QUEUE: "queue",
    DestinationKind.TOPIC: "topic",
    DestinationKind.TEMP_QUEUE: "temp-queue",
    DestinationKind.TEMP_TOPIC: "temp-topic",
}
