"""``mqstore serve``: the STOMP broker on the store."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from mqstore.cli.options import DataDirOpt, DsnOpt, PrefixOpt, command_settings
from mqstore.cli.output import run
from mqstore.errors import ConfigError

_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def serve(
    dsn: DsnOpt = None,
    table_prefix: PrefixOpt = None,
    data_dir: DataDirOpt = None,
    stomp: Annotated[
        str, typer.Option(help="HOST:PORT to listen on ([::1]:PORT for IPv6; port 0: any free)")
    ] = "127.0.0.1:61613",
    broker_name: Annotated[
        str | None, typer.Option(help="lock holder id [MQSTORE_BROKER_NAME]")
    ] = None,
    journal_dir: Annotated[
        Path | None,
        typer.Option(help="journal directory [MQSTORE_JOURNAL_DIR]; unset: DATA_DIR/journal"),
    ] = None,
    journal: Annotated[
        bool | None,
        typer.Option(
            "--journal/--no-journal",
            help="keep the local journal, or write to the database directly (needed for "
            "shared-database HA) [MQSTORE_JOURNAL; default: journal]",
            show_default=False,
        ),
    ] = None,
    lock: Annotated[str | None, typer.Option(help="lease | row | none [MQSTORE_LOCK]")] = None,
    prioritized_messages: Annotated[
        bool | None,
        typer.Option(
            "--prioritized-messages/--no-prioritized-messages",
            help="ActiveMQ's prioritizedMessages: store and deliver by JMS priority, ten ACKS "
            "rows per durable subscription [MQSTORE_PRIORITIZED_MESSAGES; default: off]",
            show_default=False,
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(help="serve Prometheus /metrics on this port [MQSTORE_METRICS_PORT]"),
    ] = None,
    metrics_host: Annotated[
        str | None, typer.Option(help="address /metrics listens on [MQSTORE_METRICS_HOST]")
    ] = None,
    users_file: Annotated[
        Path | None,
        typer.Option(help="STOMP logins, login=passcode lines [MQSTORE_USERS_FILE]"),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option(help="PEM certificate: STOMP over TLS only [MQSTORE_TLS_CERT]"),
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option(help="PEM key of --tls-cert [MQSTORE_TLS_KEY]")
    ] = None,
    tls_client_ca: Annotated[
        Path | None,
        typer.Option(help="PEM CAs client certificates must chain to [MQSTORE_TLS_CLIENT_CA]"),
    ] = None,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR")] = "INFO",
) -> None:
    """Run the STOMP broker on the store (embedded PostgreSQL when no DSN is given)."""

    def body() -> None:
        from mqstore.app import serve as run_serve

        if log_level.upper() not in _LOG_LEVELS:
            raise typer.BadParameter(
                f"--log-level must be one of {', '.join(_LOG_LEVELS)}, got {log_level!r}"
            )
        logging.basicConfig(
            level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        settings = command_settings(
            dsn,
            table_prefix,
            data_dir,
            broker_name=broker_name,
            journal_dir=journal_dir,
            lock=lock,
            journal=journal,
            prioritized_messages=prioritized_messages,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            users_file=users_file,
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_client_ca=tls_client_ca,
        )
        run_serve(settings, *_listen_address(stomp))

    run(body)


def _listen_address(stomp: str) -> tuple[str, int]:
    """``--stomp`` as (host, port): ``HOST:PORT``, ``[IPV6]:PORT``."""
    host, _, port = stomp.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or not port.isdigit() or int(port) > 65535 or "[" in host or "]" in host:
        raise ConfigError(
            f"--stomp must be HOST:PORT (an IPv6 address in brackets: [::1]:61613) with a "
            f"port from 0 to 65535, got {stomp!r}"
        )
    return host, int(port)
