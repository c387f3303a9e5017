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
    with pytest.raises(FrameError, match="frame too large"):
        _parse(data)


@pytest.mark.parametrize("value, body", [(b"0" * 4999 + b"3", b"abc"), (b"0", b""), (b"00", b"")])
def test_a_content_length_with_leading_zeros_is_its_value(value: bytes, body: bytes) -> None:
    data = b"SEND\ndestination:/q\ncontent-length:" + value + b"\n\n" + body + b"\x00"
    [(_, _, got)] = _parse(data)
    assert got == body


@pytest.mark.parametrize("value", [" 5", "5 ", "  5  ", "\t5", " 05 "])
def test_a_content_length_with_spaces_around_the_digits_is_its_value(value: str) -> None:
    data = f"SEND\ndestination:/q\ncontent-length:{value}\n\nhe\x00lo\x00".encode()
    [(_, _, got)] = _parse(data)
    assert got == b"he\x00lo"


@pytest.mark.parametrize("value", [" -5", " 5x ", "5 5", " ", ""])
def test_a_content_length_with_spaces_must_still_be_a_number(value: str) -> None:
    data = f"SEND\ndestination:/q\ncontent-length:{value}\n\nhe\x00lo\x00".encode()
    with pytest.raises(FrameError, match="content-length must be a number of octets"):
        _parse(data)


_STREAM = (
    b"\n\r\n"  # heart-beats
    + b"SEND\r\ndestination:/queue/a\r\nk\\cey:v\\nal\r\n\r\nhello\x00\n"
    + b"SEND\ndestination:/queue/b\ncontent-length: 9 \n\nwi\x00th\nnul\x00"
    + b"\r\n\r\nACK\nid:1\n\r\n\x00"
    + b"SEND\ndestination:/queue/c\n"
    + b"".join(f"h{i}:{'v' * 40}\n".encode() for i in range(20))
    + b"\n"
    + b"b" * 300
    + b"\x00"
    + b"SEND\ndestination:/queue/d\ncontent-length:0\n\n\x00"
)


def _pieces(
    chunks: list[bytes], limits: Limits | None = None
) -> list[tuple[str, dict[str, str], bytes]]:
    parser = FrameParser(limits or Limits())
    parser.version = "1.2"
    out = []
    for chunk in chunks:
        out += [(f.command, dict(f.headers), f.body) for f in parser.feed(chunk)]
    return out


def test_frames_split_at_every_boundary_parse_as_in_one_piece() -> None:
    whole = _parse(_STREAM)
    assert [f[0] for f in whole] == ["SEND", "SEND", "ACK", "SEND", "SEND"]
    assert whole[0][1] == {"destination": "/queue/a", "k:ey": "v\nal"}
    assert whole[1][2] == b"wi\x00th\nnul"
    for i in range(len(_STREAM) + 1):
        assert _pieces([_STREAM[:i], _STREAM[i:]]) == whole, i


@pytest.mark.parametrize("size", [1, 2, 3, 5, 64])
def test_frames_fed_in_small_pieces_parse_as_in_one_piece(size: int) -> None:
    chunks = [_STREAM[i : i + size] for i in range(0, len(_STREAM), size)]
    assert _pieces(chunks) == _parse(_STREAM)


@pytest.mark.parametrize(
    "data, message",
    [
        (b"SEND\ndestination:/q\n" + b"x" * 600, "header line longer than 512 bytes"),
        (b"SEND\n" + b"h:v\n" * 30, "too many headers"),
        (b"SEND\ndestination:/q\nbad\x00", "NUL before the end of the headers"),
        (b"SEND\ndestination:/q\n\n" + b"y" * 5000, "frame too large"),
    ],
)
def test_limits_hold_for_frames_fed_a_byte_at_a_time(data: bytes, message: str) -> None:
    limits = Limits(max_frame_size=4096, max_headers=20, max_header_length=512)
    with pytest.raises(FrameError, match=message):
        _pieces([data[i : i + 1] for i in range(len(data))], limits)
