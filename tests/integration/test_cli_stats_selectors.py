"""``mqstore stats`` shows each durable subscription's selector (ACTIVEMQ_ACKS.SELECTOR)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from sqlalchemy.engine import Engine

from mqstore.store import PostgresStore, SubscriptionKey
from tests.integration.test_cli import mqstore

T = "topic://prices"
PICKY = SubscriptionKey(T, "client-1", "eu")
ALL = SubscriptionKey(T, "client-2", "all")
SELECTOR = "region = '[b]eu' AND price > 10"


def _subscribed(engine: Engine) -> None:
    store = PostgresStore(engine, cleanup_interval_s=0)
    store.start()
    try:
        store.add_subscription(PICKY, selector=SELECTOR)
        store.add_subscription(ALL)
        assert store.stats().selectors == {PICKY: SELECTOR, ALL: None}
    finally:
        store.stop()


def test_stats_json_gives_each_subscriptions_selector(
    engine: Engine, dsn: str, tmp_path: Path
) -> None:
    _subscribed(engine)
    shown = mqstore("stats", "--json", "--dsn", dsn, "--data-dir", str(tmp_path / "none"))
    assert shown.returncode == 0, shown.stderr
    subs = {s["name"]: s["selector"] for s in json.loads(shown.stdout)["subscriptions"]}
    assert subs == {"eu": SELECTOR, "all": None}


def test_stats_table_shows_a_selector_as_written(engine: Engine, dsn: str, tmp_path: Path) -> None:
    _subscribed(engine)
    shown = mqstore(
        "stats",
        "--dsn",
        dsn,
        "--data-dir",
        str(tmp_path / "none"),
        env={**os.environ, "COLUMNS": "200"},
    )
    assert shown.returncode == 0, shown.stderr
    assert SELECTOR in shown.stdout  # brackets are not taken for markup
    assert "(all messages)" in shown.stdout
