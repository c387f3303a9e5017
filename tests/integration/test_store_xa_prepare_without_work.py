"""An XA transaction with no work, prepared, must not look prepared.

Nothing of an empty transaction reaches the tables, so no commit, rollback or recovery can
find it (by another store instance, or after a restart, no more than by this one). The
prepare used to succeed all the same: the transaction manager, told it was prepared, then
had its commit refused as "no prepared XA transaction", and two prepares of the Xid both
succeeded. The prepare is refused instead, saying why and what to answer (XA_RDONLY).
"""

from __future__ import annotations

import pytest

from mqstore.errors import TransactionError
from mqstore.store import Batch, PostgresStore, Xid
from tests.integration.conftest import msg

Q = "queue://xa-nothing"
XID = Xid(0x1234, b"global-empty", b"branch-1")


def test_preparing_a_transaction_without_work_is_refused_clearly(store: PostgresStore) -> None:
    with pytest.raises(TransactionError, match=r"no work to prepare.*XA_RDONLY"):
        store.xa_prepare(XID, Batch())
    assert store.xa_recover() == []
    # The Xid is free for real work afterwards, prepared and committed as usual.
    [prepared] = store.xa_prepare(XID, Batch(adds=[msg(Q, 1)]))
    assert [p.xid for p in store.xa_recover()] == [XID]
    store.xa_commit(XID)
    assert [m.msgid_seq for m in store.page(Q, None, 10)] == [1]
    assert store.get(prepared) is None  # moved to a fresh ID at commit
