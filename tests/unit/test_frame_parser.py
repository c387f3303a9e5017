"""STOMP frame parsing: every line ending the 1.2 grammar allows, and exact content-length."""

from __future__ import annotations

import pytest

from mqstore.broker import Limits
from mqstore.broker.frames import FrameError, FrameParser


def _parse(data: bytes) -> list[tuple[str, dict[str, str], bytes]]:
    parser = FrameParser(Limits())
    parser.version = "1.2"
    return [(f.command, dict(f.headers), f.body) for f in parser.feed(data)]


@pytest.mark.parametrize(
    "eol_then_blank",
    [b"\n\n", b"\r\n\r\n", b"\n\r\n", b"\r\n\n"],
    ids=["lf", "crlf", "lf+crlf", "crlf+lf"],
)
def test_headers_end_at_any_eol_then_an_empty_line(eol_then_blank: bytes) -> None:
    data = (
        b"SEND\ndestination:/queue/a"
        + eol_then_blank
        + b"hello\x00SEND\ndestination:/queue/b\n\nx\x00"
    )
    assert _parse(data) == [
        ("SEND", {"destination": "/queue/a"}, b"hello"),
        ("SEND", {"destination": "/queue/b"}, b"x"),
    ]


@pytest.mark.parametrize("value", ["1_0", " +3", "-1", "0x5", "五"])
def test_content_length_must_be_plain_digits(value: str) -> None:
    data = f"SEND\ndestination:/q\ncontent-length:{value}\n\nhelloworld\x00".encode()
    with pytest.raises(FrameError, match="content-length must be a number of octets"):
        _parse(data)


def test_content_length_keeps_nuls_in_the_body() -> None:
    data = b"SEND\ndestination:/q\ncontent-length:3\n\na\x00b\x00"
    assert _parse(data) == [("SEND", {"destination": "/q", "content-length": "3"}, b"a\x00b")]


def test_a_content_length_of_thousands_of_digits_is_a_frame_error() -> None:
    data = b"SEND\ndestination:/q\ncontent-length:" + b"9" * 5000 + b"\n\nabc\x00"
    with pytest.raises(FrameError, match="larger than the limit"):
        _parse(data)


@pytest.mark.parametrize("value, body", [(b"0" * 4999 + b"3", b"abc"), (b"0", b""), (b"00", b"")])
def test_a_content_length_with_leading_zeros_is_its_value(value: bytes, body: bytes) -> None:
    data = b"SEND\ndestination:/q\ncontent-length:" + value + b"\n\n" + body + b"\x00"
    [(_, _, got)] = _parse(data)
    assert got == body
