"""What a Spark export directory (``mqstore export --out DIR``) says it has archived.

``mqstore history trim --exported DIR`` deletes only history rows that export has already
written to Parquet. The export records, in ``DIR/_watermarks.json`` (written last, atomically),
the highest ``hist_id`` it read and when it ran. A history row at or below that id was in
the export's snapshot unless its transaction committed after the export read the table; a
row stamped well before the export started cannot have been that late, so the bound also
requires ``removed_at`` to be :data:`LATE_COMMIT_GRACE_MS` before the export's start.
"""

from __future__ import annotations

import json
from pathlib import Path

from mqstore.errors import ConfigError
from mqstore.store.history import TrimBound

#: The export's commit file (``spark_etl.export.WATERMARKS``).
WATERMARKS = "_watermarks.json"
#: A removal whose transaction was still open this long after it was stamped is not
#: counted as exported (removals commit within milliseconds; this is a wide margin).
LATE_COMMIT_GRACE_MS = 3_600_000


def exported_history_bound(export_dir: Path, prefix: str) -> TrimBound:
    """The history rows the export in ``export_dir`` has archived, as a trim bound.

    An export that read no history (empty table, or a database without ``MQSTORE_HISTORY``)
    gives a bound that allows nothing. Raises :class:`ConfigError` when ``export_dir`` holds
    no export, or an export of another table prefix.
    """
    path = export_dir / WATERMARKS
    try:
        marks = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"{export_dir} holds no finished export ({WATERMARKS} is missing): give the "
            "directory passed to `mqstore export --out`, after at least one export has run"
        ) from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if not isinstance(marks, dict):
        raise ConfigError(f"{path} is not an export's watermark file")
    exported_prefix = marks.get("prefix", "")
    if exported_prefix != prefix:
        raise ConfigError(
            f"{export_dir} is an export of table prefix {exported_prefix!r}, not {prefix!r}: "
            "give --table-prefix of that export, or its own export directory"
        )
    upto, started = marks.get("hist_max_id"), marks.get("exported_at")
    if marks.get("history_source") != "mqstore_history" or upto is None:
        return TrimBound(before_ms=0, upto_hist_id=0)
    if not isinstance(upto, int) or not isinstance(started, int):
        raise ConfigError(f"{path} holds no valid hist_max_id/exported_at")
    return TrimBound(before_ms=started - LATE_COMMIT_GRACE_MS, upto_hist_id=upto)


__all__ = ["LATE_COMMIT_GRACE_MS", "WATERMARKS", "exported_history_bound"]
