"""Readable views of stored messages for ``mqstore browse`` (decoded with the OpenWire codec)."""

from __future__ import annotations

from typing import Any

from mqstore.openwire import DecodeError, decode, replace_lone_surrogates
from mqstore.store.model import StoredMessage


def _preview(value: Any, width: int = 60) -> str:
    if value is None:
        return ""
    if isinstance(value, dict) and set(value) == {"hex"}:  # a bytes body, as JSON shows it
        value = bytes.fromhex(value["hex"])
    if isinstance(value, bytes):
        try:
            shown = repr(value.decode("utf-8"))
        except UnicodeDecodeError:
            shown = value[: width // 2].hex() + ("…" if len(value) > width // 2 else "")
        return _preview(f"bytes[{len(value)}] {shown}", width)
    text = str(value).replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


def describe(row: StoredMessage) -> dict[str, Any]:
    """One stored row as a JSON-friendly dict of its decoded headers, properties and body."""
    out: dict[str, Any] = {
        "id": row.id,
        "container": row.container,
        "priority_column": row.priority,
        "expiration": row.expiration,
        "xid": row.xid,
        "size": len(row.msg),
    }
    try:
        message = decode(row.msg)
    except DecodeError as exc:
        out["decode_error"] = str(exc)
        return out
    body = message.body
    out.update(
        kind=message.kind.name.lower(),
        jms_message_id=_jsonable(message.jms_message_id),
        priority=message.priority,
        persistent=message.persistent,
        timestamp=message.timestamp,
        correlation_id=_jsonable(message.correlation_id),
        type=_jsonable(message.type),
        redelivery_counter=message.redelivery_counter,
        original_destination=(
            _jsonable(message.original_destination.qualified_name)
            if message.original_destination
            else None
        ),
        properties=_jsonable(message.plain_properties()),
        body=_jsonable(body),
    )
    return out


def _jsonable(value: Any) -> Any:
    """``value`` for JSON and the terminal: bytes as hex, strings with a UTF-8 form (a lone
    surrogate, legal in a Java String, shows as ``?`` as Java's UTF-8 encoder writes it)."""
    if isinstance(value, str):
        return replace_lone_surrogates(value)
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, dict):
        return {_jsonable(str(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return replace_lone_surrogates(str(value))


def table_row(view: dict[str, Any]) -> list[str]:
    """The columns ``mqstore browse`` prints for one message."""
    if "decode_error" in view:
        return [str(view["id"]), "?", "", "", "", f"undecodable: {view['decode_error']}"]
    props = ", ".join(f"{k}={_preview(v, 20)}" for k, v in view["properties"].items())
    return [
        str(view["id"]),
        str(view["jms_message_id"]),
        str(view["priority"]),
        str(view["timestamp"]),
        _preview(props, 40),
        _preview(view["body"]),
    ]
