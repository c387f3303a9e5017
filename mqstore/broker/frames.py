"""STOMP frames: an incremental parser with size limits, and the serializer.

Header escaping follows the negotiated version: none in 1.0, ``\\\\ \\n \\c`` in 1.1 and
``\\r`` as well in 1.2; CONNECT/CONNECTED frames are never escaped. A body is read up to
``content-length`` when that header is present (so it may contain NULs), else up to NUL.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_END_OF_HEADERS = re.compile(rb"\r?\n\r?\n")
COMMANDS = frozenset(
    {
        "CONNECT", "STOMP", "SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK",
        "BEGIN", "COMMIT", "ABORT", "DISCONNECT",
    }
)  # fmt: skip

_UNESCAPE_11 = {"\\\\": "\\", "\\n": "\n", "\\c": ":"}
_UNESCAPE_12 = {**_UNESCAPE_11, "\\r": "\r"}


#: Why a frame whose command or headers hold a NUL is refused: STOMP has no escape for it,
#: and a NUL passed on in a MESSAGE header would end that frame early for the consumer.
NUL_IN_HEADERS = "NUL before the end of the headers"

#: Headers that name a destination, a client, a user or a durable subscription: the broker
#: stores and logs them as names, so a control character in one (an escaped newline forging
#: a log line, a terminal escape) is refused.
NAME_HEADERS = (
    "destination", "client-id", "login", "activemq.subscriptionName",
    "durable-subscription-name",
)  # fmt: skip
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

#: Room a SEND frame has for its command and headers beyond the largest message.
FRAME_HEADROOM = 1024 * 1024


class FrameError(Exception):
    """A client sent something that is not a valid STOMP frame; the connection must close.

    ``receipt``: the ``receipt`` header of the frame at fault, when its headers were read
    (its ERROR carries it as ``receipt-id``)."""

    receipt: str | None = None


class TooLargeError(FrameError):
    """A frame, or the message it carries, is over the broker's size limit; the connection
    must close. Its text is the whole ERROR message (not a malformed frame)."""


@dataclass(slots=True)
class Frame:
    """One STOMP frame. Repeated headers keep the first value, as STOMP 1.2 requires."""

    command: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    #: Bytes of its command and headers as received (0: not parsed from the wire).
    head_size: int = 0

    def get(self, name: str, default: str | None = None) -> str | None:
        """A header value, or ``default``."""
        return self.headers.get(name, default)


@dataclass(frozen=True, slots=True)
class Limits:
    """Inbound frame limits (bytes / counts).

    ``max_connect_frame_size`` bounds every frame a connection sends until its CONNECT is
    answered with CONNECTED (a CONNECT frame is a few hundred bytes; a long token as
    passcode still fits): before that nobody is authenticated, so nobody can make the
    broker hold more than this for a connection.

    ``max_message_bytes`` (None: no limit of the broker's own) is the largest persistent
    message a SEND may carry, as stored (its OpenWire encoding: body, headers and
    properties); ``message_setting`` is where it is set, which the ERROR a larger SEND gets
    names. :meth:`for_messages` makes the frame limit fit such a message.
    """

    max_frame_size: int = 4 * 1024 * 1024
    max_connect_frame_size: int = 64 * 1024
    max_headers: int = 1000
    max_header_length: int = 10 * 1024
    max_message_bytes: int | None = None
    message_setting: str = "MQSTORE_MAX_MESSAGE_BYTES"

    @classmethod
    def for_messages(cls, max_message_bytes: int) -> Limits:
        """Limits for messages of at most ``max_message_bytes``; frames may be
        :data:`FRAME_HEADROOM` larger, for their command and headers."""
        return cls(
            max_frame_size=max_message_bytes + FRAME_HEADROOM, max_message_bytes=max_message_bytes
        )

    def frame_too_large(self, accepted: bool = True) -> TooLargeError:
        """The error for a frame over ``max_frame_size`` (``accepted`` False: over
        ``max_connect_frame_size``, before the connection's CONNECT was answered)."""
        if not accepted:
            return TooLargeError(
                f"frame too large: it exceeds {self.max_connect_frame_size} bytes, the limit "
                "for a frame before the connection is accepted (max_connect_frame_size); "
                "send a CONNECT frame first and wait for CONNECTED"
            )
        size = self.max_frame_size
        if self.max_message_bytes is None:
            return TooLargeError(
                f"frame too large: it exceeds {size} bytes, the broker's frame limit "
                "(max_frame_size); send a smaller message"
            )
        room = _bytes(size - self.max_message_bytes)
        return TooLargeError(
            f"message too large: the frame exceeds {size} bytes, the broker's limit for a "
            f"message ({self.message_setting}={self.max_message_bytes}, plus {room} for "
            "headers); send a smaller message or raise the setting"
        )

    def check_message(self, stored: int, body: int) -> None:
        """Raise :class:`TooLargeError` if a message of ``stored`` bytes as stored (``body``
        bytes of them its body) is over ``max_message_bytes``."""
        limit = self.max_message_bytes
        if limit is not None and stored > limit:
            raise TooLargeError(
                f"message too large: {stored} bytes as stored (body {body} bytes plus "
                f"headers and properties) exceeds {self.message_setting}={limit}; send a "
                "smaller message or raise the setting"
            )


def _check_names(headers: dict[str, str]) -> None:
    """Refuse a control character in a header of :data:`NAME_HEADERS`."""
    for name in NAME_HEADERS:
        value = headers.get(name)
        if value is not None and (found := _CONTROL.search(value)) is not None:
            raise FrameError(
                f"header {name} holds the control character {found.group()!r}: destination "
                "names, client-ids, logins and subscription names must not contain control "
                "characters (U+0000-U+001F, U+007F-U+009F)"
            )


def _bytes(n: int) -> str:
    """``n`` bytes in words: whole MiB as such."""
    return f"{n >> 20} MiB" if n > 0 and n % (1 << 20) == 0 else f"{n} bytes"


def unescape(value: str, version: str) -> str:
    """Decode header escapes of ``version``; undefined escapes are a :class:`FrameError`."""
    if version == "1.0" or "\\" not in value:
        return value
    table = _UNESCAPE_12 if version == "1.2" else _UNESCAPE_11
    out: list[str] = []
    i = 0
    n = len(value)
    while i < n:
        ch = value[i]
        if ch == "\\":
            pair = value[i : i + 2]
            repl = table.get(pair)
            if repl is None:
                raise FrameError(f"undefined escape sequence {pair!r} in header")
            out.append(repl)
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def escape(value: str, version: str) -> str:
    """Encode a header value for ``version``. STOMP has no escape for NUL, which would end
    the frame where it stands: one (in a property another client set) is sent as U+FFFD."""
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    if version == "1.0":
        return value.replace("\n", " ")
    value = value.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")
    if version == "1.2":
        value = value.replace("\r", "\\r")
    return value


def encode_frame(
    command: str,
    headers: Iterable[tuple[str, str]] = (),
    body: bytes = b"",
    version: str = "1.2",
    *,
    content_length: bool | None = None,
) -> bytes:
    """Serialize a frame; adds ``content-length`` when there is a body (``content_length``
    None), always (True, ``content-length:0`` too) or never (False)."""
    parts = [command, "\n"]
    raw = command == "CONNECTED"
    for key, value in headers:
        if raw:
            parts += [key, ":", value, "\n"]
        else:
            parts += [escape(key, version), ":", escape(value, version), "\n"]
    if content_length or (content_length is None and body):
        parts += ["content-length:", str(len(body)), "\n"]
    parts.append("\n")
    return "".join(parts).encode("utf-8") + body + b"\x00"


class FrameParser:
    """Feed bytes in, take complete frames out; raises :class:`FrameError` on bad input."""

    def __init__(self, limits: Limits, *, accepted: bool = True) -> None:
        self.limits = limits
        self.version = "1.0"
        #: Whether the connection was accepted: until then (see :meth:`accept`) frames are
        #: bounded by ``max_connect_frame_size`` instead of ``max_frame_size``.
        self.accepted = accepted
        self.max_frame_size = (
            limits.max_frame_size
            if accepted
            else min(limits.max_frame_size, limits.max_connect_frame_size)
        )
        self._buf = bytearray()
        self.heartbeats = 0  # EOLs seen between frames (client heart-beats)
        self._error: FrameError | None = None  # met after frames still to be acted on
        # The frame being read: where the search for the end of its headers (then for the
        # NUL after its body) goes on, so bytes arriving in small pieces are each looked at
        # once; its newlines so far and the last one; once its headers are read, they.
        self._scan = 0
        self._newlines = 0
        self._last_nl = -1
        self._head: tuple[str, dict[str, str], int, int | None] | None = None

    def accept(self) -> None:
        """The connection was accepted (its CONNECT answered): frames may now be as large as
        ``max_frame_size``."""
        self.accepted = True
        self.max_frame_size = self.limits.max_frame_size

    def _too_large(self) -> TooLargeError:
        return self.limits.frame_too_large(self.max_frame_size == self.limits.max_frame_size)

    @property
    def failed(self) -> bool:
        """Whether the next :meth:`feed` raises the error met after the frames it returned."""
        return self._error is not None

    def feed(self, data: bytes) -> list[Frame]:
        """Append ``data``; return every frame now complete.

        Parsing stops after a CONNECT/STOMP frame: what follows it is read in the version
        it negotiates, by the next call (``feed(b"")`` when no more data comes). A bad frame
        after good ones is raised by the next call (see :attr:`failed`), so the frames the
        client sent before it are acted on first, however the bytes arrived.
        """
        if self._error is not None:
            raise self._error
        self._buf += data
        frames: list[Frame] = []
        try:
            while (frame := self._next()) is not None:
                frames.append(frame)
                if frame.command in ("CONNECT", "STOMP"):
                    return frames
            if len(self._buf) > self.max_frame_size:
                raise self._too_large()
        except FrameError as exc:
            if exc.receipt is None and self._head is not None:
                exc.receipt = self._head[1].get("receipt")
            if not frames:
                raise
            self._error = exc
        return frames

    def _next(self) -> Frame | None:
        if self._head is None:
            self._head = self._read_head()
            if self._head is None:
                return None
        buf = self._buf
        command, headers, body_start, length = self._head
        if length is not None:
            if len(buf) < body_start + length + 1:
                return None
            if buf[body_start + length] != 0:
                raise FrameError("frame body is not followed by NUL after content-length bytes")
            end = body_start + length
        else:
            end = buf.find(b"\x00", max(body_start, self._scan))
            if end == -1:
                self._scan = len(buf)
                return None
            if end + 1 > self.max_frame_size:
                raise self._too_large()
        body = bytes(buf[body_start:end])
        del buf[: end + 1]
        self._head = None
        self._scan, self._newlines, self._last_nl = 0, 0, -1
        return Frame(command, headers, body, body_start)

    def _read_head(self) -> tuple[str, dict[str, str], int, int | None] | None:
        """The command, headers, body offset and content-length of the frame at the start of
        the buffer, or None while its headers are incomplete."""
        buf = self._buf
        start = 0
        while start < len(buf) and buf[start] in (0x0A, 0x0D):
            start += 1
            self.heartbeats += 1
        if start:
            del buf[:start]
            self._scan, self._newlines, self._last_nl = 0, 0, -1
        # An EOL, then an empty line: each [CR] LF. The 4 bytes before where the last search
        # ended may begin one.
        blank = _END_OF_HEADERS.search(buf, max(0, self._scan - 3))
        if blank is None:
            self._check_partial_head()
            return None
        head_end, body_start = blank.start(), blank.end()
        # Bytes before where the search stopped were looked at by _check_partial_head.
        if buf.find(b"\x00", min(self._scan, head_end), head_end) != -1:
            raise FrameError(NUL_IN_HEADERS)
        lines = bytes(buf[:head_end]).split(b"\n")
        command = self._text(lines[0].rstrip(b"\r"))
        if command not in COMMANDS:
            raise FrameError(f"unknown STOMP command {command[:40]!r}")
        if len(lines) - 1 > self.limits.max_headers:
            raise FrameError(f"too many headers (limit {self.limits.max_headers})")
        headers = self._headers(command, lines[1:])
        try:
            _check_names(headers)
            length = self._content_length(headers, body_start)
        except FrameError as exc:
            exc.receipt = headers.get("receipt")
            raise
        self._scan = body_start
        return command, headers, body_start, length

    def _content_length(self, headers: dict[str, str], body_start: int) -> int | None:
        """The frame's ``content-length``, within the frame limit (None: not given)."""
        length_text = headers.get("content-length")
        if length_text is None:
            return None
        # Spaces around the digits are trimmed, as ActiveMQ's StompWireFormat does.
        length_text = length_text.strip(" \t")
        if not (length_text.isascii() and length_text.isdigit()):
            raise FrameError(f"content-length must be a number of octets: {length_text[:40]!r}")
        # int() refuses over 4300 digits (ValueError): a length that long is too large anyway
        digits = length_text.lstrip("0") or "0"
        length = int(digits) if len(digits) <= 18 else self.max_frame_size + 1
        if body_start + length > self.max_frame_size:
            raise self._too_large()
        return length

    def _check_partial_head(self) -> None:
        """Limits on incomplete headers, looking only at the bytes not looked at yet."""
        buf = self._buf
        new = self._scan
        self._scan = len(buf)
        if buf.find(b"\x00", new) != -1:
            raise FrameError(NUL_IN_HEADERS)
        last_nl = buf.rfind(b"\n", new)
        if last_nl != -1:
            self._last_nl = last_nl
        tail = len(buf) - self._last_nl - 1
        if tail > self.limits.max_header_length:
            raise FrameError(f"header line longer than {self.limits.max_header_length} bytes")
        self._newlines += buf.count(b"\n", new)
        if self._newlines > self.limits.max_headers + 1:
            raise FrameError(f"too many headers (limit {self.limits.max_headers})")

    def _headers(self, command: str, lines: list[bytes]) -> dict[str, str]:
        headers: dict[str, str] = {}
        raw = command in ("CONNECT", "STOMP")
        for raw_line in lines:
            line = raw_line.rstrip(b"\r")
            if len(line) > self.limits.max_header_length:
                raise FrameError(f"header line longer than {self.limits.max_header_length} bytes")
            text = self._text(line)
            key, sep, value = text.partition(":")
            if not sep:
                raise FrameError(f"malformed header line (no colon): {text[:60]!r}")
            if not raw:
                key = unescape(key, self.version)
                value = unescape(value, self.version)
            headers.setdefault(key, value)
        return headers

    @staticmethod
    def _text(raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise FrameError("frame headers are not valid UTF-8") from None
