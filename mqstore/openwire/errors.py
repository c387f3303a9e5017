"""Exceptions raised by the OpenWire codec."""

from __future__ import annotations


class DecodeError(ValueError):
    """Malformed, truncated or unsupported OpenWire bytes.

    ``offset`` is the byte position (from the start of the decoded buffer) where the
    problem was found; the message names it and what was expected there.
    """

    def __init__(self, offset: int, expected: str, detail: str = "") -> None:
        self.offset = offset
        self.expected = expected
        self.detail = detail
        msg = f"at offset {offset}: expected {expected}"
        super().__init__(f"{msg} ({detail})" if detail else msg)

    def shifted(self, delta: int, context: str = "") -> DecodeError:
        """The same error with ``offset`` moved by ``delta`` (e.g. to frame coordinates)."""
        detail = f"{context}: {self.detail}" if context and self.detail else context or self.detail
        return DecodeError(self.offset + delta, self.expected, detail)


class EncodeError(ValueError):
    """A value cannot be represented in ActiveMQ's OpenWire store format."""
