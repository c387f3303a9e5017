"""``python -m spark_etl export|audit ...``."""

from __future__ import annotations

from spark_etl.cli import main

if __name__ == "__main__":
    main()
