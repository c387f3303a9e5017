"""An embedded PostgreSQL for running without a server: the binaries come from the
``pgserver`` package, the data lives under ``<data_dir>/pg``, and the server listens on a
Unix socket only."""

from __future__ import annotations

import importlib
import logging
import warnings
from pathlib import Path
from typing import Any

from mqstore.errors import DatabaseUnavailableError

log = logging.getLogger(__name__)


class EmbeddedPostgres:
    """A local PostgreSQL server in ``data_dir``; reused if it is already running, and with
    ``stop_on_close`` stopped by the last process that used it."""

    def __init__(self, data_dir: Path, *, stop_on_close: bool = False) -> None:
        self.data_dir = data_dir.resolve() / "pg"
        self._stop_on_close = stop_on_close
        self._server: Any = None

    def start(self) -> str:
        """Start (or attach to) the server and return a ``postgresql://`` DSN."""
        # Unix socket paths are limited to about 100 bytes.
        if len(str(self.data_dir)) > 90:
            raise DatabaseUnavailableError(
                f"data directory path {self.data_dir} is too long for PostgreSQL's socket; "
                "use a shorter --data-dir (or MQSTORE_DATA_DIR)"
            )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                pgserver = importlib.import_module("pgserver")
                self.data_dir.mkdir(parents=True, exist_ok=True)
                self._server = pgserver.get_server(
                    self.data_dir, cleanup_mode="stop" if self._stop_on_close else None
                )
        except Exception as exc:
            raise DatabaseUnavailableError(
                f"could not start the embedded PostgreSQL in {self.data_dir}: {exc}; "
                "pass --dsn (or MQSTORE_DSN) to use an existing server"
            ) from None
        uri = str(self._server.get_uri())
        log.info("embedded PostgreSQL running in %s", self.data_dir)
        return uri

    def close(self) -> None:
        """Stop the server if this object owns it (``stop_on_close``)."""
        if self._server is not None and self._stop_on_close:
            self._server.cleanup()
        self._server = None
