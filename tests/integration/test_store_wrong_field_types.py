"""A new message's priority or expiration of the wrong type.

``check_messages`` compared them with numbers before checking their type, so ``None`` (an
absent STOMP ``expires`` passed through, say) or a string priority escaped as a bare
TypeError ("'<' not supported between instances of 'NoneType' and 'int'"), not the
InvalidMessageError the port promises, which names the field.
"""

from __future__ import annotations

import dataclasses

import pytest

from mqstore.errors import InvalidMessageError
from mqstore.store import PostgresStore
from tests.integration.conftest import msg

Q = "queue://wrong-types"


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("priority", None, "priority None"),
        ("priority", "4", "priority '4'"),
        ("priority", 4.0, "priority 4.0"),
        ("expiration", None, "expiration None"),
        ("expiration", "0", "expiration '0'"),
        ("expiration", 1.5, "expiration 1.5"),
    ],
)
def test_a_priority_or_expiration_of_the_wrong_type_is_refused_by_name(
    store: PostgresStore, field: str, value: object, match: str
) -> None:
    bad = dataclasses.replace(msg(Q, 2), **{field: value})
    with pytest.raises(InvalidMessageError, match=match):
        store.add([msg(Q, 1), bad])
    assert store.count(Q) == 0
