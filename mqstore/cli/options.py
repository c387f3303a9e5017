"""Options most commands share, and the settings a command's options make (a flag given
wins over its ``MQSTORE_<NAME>`` variable)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mqstore.errors import ConfigError
from mqstore.settings import Settings, load_settings

#: The largest count an option may give a SQL LIMIT (PostgreSQL's BIGINT).
BIGINT_MAX = 2**63 - 1

DsnOpt = Annotated[
    str | None,
    typer.Option(
        "--dsn", help="PostgreSQL DSN [MQSTORE_DSN]; unset: embedded PostgreSQL in --data-dir"
    ),
]
PrefixOpt = Annotated[
    str | None, typer.Option("--table-prefix", help="ActiveMQ tablePrefix [MQSTORE_TABLE_PREFIX]")
]
DataDirOpt = Annotated[
    Path | None,
    typer.Option("--data-dir", help="embedded PostgreSQL and journal [MQSTORE_DATA_DIR]"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]


def command_settings(
    dsn: str | None, prefix: str | None, data_dir: Path | None, **more: Any
) -> Settings:
    """The settings of a command given these options (None: not given)."""
    return load_settings(dsn=dsn, table_prefix=prefix, data_dir=data_dir, **more)


def settings_to_read(
    dsn: str | None, prefix: str | None, data_dir: Path | None, **more: Any
) -> Settings:
    """Settings for a command on an existing store (every one but ``serve`` and ``db
    upgrade``): with no DSN, the embedded store must exist already (it never creates one)."""
    settings = command_settings(dsn, prefix, data_dir, **more)
    if settings.dsn is None:
        from mqstore.embedded import store_exists

        if not store_exists(settings.data_dir):
            where = settings.data_dir
            shown = str(where) if where.is_absolute() else f"./{where}"
            raise ConfigError(
                f"no MQSTORE_DSN is set and there is no embedded store in {shown}: pass --dsn "
                "(or set MQSTORE_DSN), or run where the store is (or give its --data-dir); "
                "`mqstore serve` creates one"
            )
    return settings
