"""PySpark jobs over an ActiveMQ/mqstore database: Parquet export and audit reports.

Reads ActiveMQ's tables over JDBC (partitioned on ``ID``), decodes ``MSG`` with
:mod:`mqstore.openwire` and never touches the store runtime. Importing this package does
not import PySpark; :mod:`spark_etl.cli` imports it only when a command runs.
"""

from __future__ import annotations
