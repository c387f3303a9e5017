"""Entry point for ``spark-submit``; also builds the ``--py-files`` archive.

On a cluster::

    python -m spark_etl.submit --build-pyfiles dist/mqstore-pyfiles.zip
    spark-submit --master spark://HOST:7077 --jars /usr/share/java/postgresql.jar \\
      --py-files dist/mqstore-pyfiles.zip spark_etl/submit.py export \\
      --dsn postgresql://mqstore_ro@db:5432/broker --out /shared/mqstore-archive

Under spark-submit the session takes master, jars and resources from spark-submit.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

_PACKAGES = ("mqstore", "spark_etl")


def build_pyfiles(dest: str | Path) -> Path:
    """Zip the ``mqstore`` and ``spark_etl`` packages (Python sources only) for --py-files."""
    root = Path(__file__).resolve().parent.parent
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in _PACKAGES:
            for path in sorted((root / package).rglob("*.py")):
                zf.write(path, path.relative_to(root).as_posix())
    return dest


def run(argv: list[str]) -> None:
    """Build the archive (``--build-pyfiles PATH``) or run a command of :mod:`spark_etl.cli`."""
    if argv[:1] == ["--build-pyfiles"] and len(argv) == 2:
        print(build_pyfiles(argv[1]))
        return
    from spark_etl.cli import main

    sys.argv = [sys.argv[0], *argv]
    main()


if __name__ == "__main__":
    if __package__ in (None, ""):
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    run(sys.argv[1:])
