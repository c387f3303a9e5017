"""TLS for the STOMP listener (ActiveMQ's ``stomp+ssl`` transport): the server's certificate
and key from PEM files, and, optionally, the CAs whose client certificates it requires
(ActiveMQ's ``needClientAuth``)."""

from __future__ import annotations

import ssl
from pathlib import Path

from mqstore.errors import ConfigError


def server_context(
    cert: Path, key: Path | None = None, client_ca: Path | None = None
) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2 or later); :class:`ConfigError` naming the file
    and what to do when a file is missing, unreadable, not PEM, or the key is not the
    certificate's."""
    for what, path in (("certificate", cert), ("key", key), ("client CA", client_ca)):
        if path is not None and not path.is_file():
            raise ConfigError(
                f"the STOMP TLS {what} file {path} does not exist or is not a file: give a "
                "readable PEM file"
            )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except PermissionError as exc:
        raise ConfigError(f"cannot read {exc.filename}: {exc.strerror}; make it readable") from None
    except ssl.SSLError as exc:
        raise ConfigError(_describe(exc, cert, key)) from None
    if client_ca is not None:
        try:
            context.load_verify_locations(cafile=client_ca)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"the STOMP TLS client CA file {client_ca} holds no usable PEM certificate "
                f"({getattr(exc, 'reason', None) or exc}): give the CAs that sign client "
                "certificates"
            ) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _describe(exc: ssl.SSLError, cert: Path, key: Path | None) -> str:
    reason = getattr(exc, "reason", None) or str(exc)
    if reason == "KEY_VALUES_MISMATCH":
        return f"the STOMP TLS key {key or cert} is not the key of the certificate {cert}"
    files = f"{cert}" + (f" and {key}" if key is not None else "")
    return (
        f"cannot load the STOMP TLS certificate and key from {files} ({reason}): give a PEM "
        "certificate (chain) and its unencrypted PEM private key (--tls-key, or in the "
        "certificate file)"
    )
