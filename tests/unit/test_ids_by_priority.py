"""IdsByPriority: the lowest id of each priority, as the durable subscription's acks need."""

from __future__ import annotations

import random

from mqstore.broker.by_priority import IdsByPriority


def test_lowest_follows_adds_discards_and_priority_changes() -> None:
    ids = IdsByPriority()
    for ident, prio in [(5, 4), (3, 4), (9, 0), (1, 9)]:
        ids.add(ident, prio)
    assert (ids.lowest(4), ids.lowest(0), ids.lowest(9), ids.lowest(7)) == (3, 9, 1, None)
    ids.discard(3)
    assert ids.lowest(4) == 5
    ids.add(5, 0)  # the same id under another priority leaves the old one
    assert (ids.lowest(4), ids.lowest(0)) == (None, 5)
    assert ids.priorities() == [0, 9] and sorted(ids) == [1, 5, 9] and 5 in ids
    ids.clear()
    assert len(ids) == 0 and ids.priorities() == [] and ids.lowest(0) is None


def test_matches_a_plain_dict_under_random_use() -> None:
    rnd = random.Random(7)
    ids, model = IdsByPriority(), dict[int, int]()
    for _ in range(20_000):
        ident, prio = rnd.randrange(300), rnd.choice([0, 4, 9])
        if rnd.random() < 0.55:
            ids.add(ident, prio)
            model[ident] = prio
        else:
            ids.discard(ident)
            model.pop(ident, None)
        for p in (0, 4, 9):
            assert ids.lowest(p) == min((i for i, q in model.items() if q == p), default=None)
        assert ids.priorities() == sorted(set(model.values())) and len(ids) == len(model)
