"""Master election on ACTIVEMQ_LOCK, interoperable with ActiveMQ's lockers on the same row.

* :class:`LeaseLocker` is ActiveMQ's ``LeaseDatabaseLocker``: the same conditional UPDATEs and
  stored values (TIME = lease expiry in epoch ms, BROKER_NAME = holder; release to (NULL, 0)).
* :class:`ExclusiveLease` is the lease of a broker with a local journal: it never waits as a
  standby, and writes lease ends no standby sees run out (:mod:`mqstore.lease_time`).
* :class:`RowLocker` is ActiveMQ's ``DefaultDatabaseLocker``: the row locked in an open
  transaction for the master's whole life (``FOR NO KEY UPDATE``, which excludes ActiveMQ's
  ``FOR UPDATE``). It keeps a transaction open, which stops VACUUM from removing dead rows in
  every table; prefer the lease where you can.

All brokers sharing the tables must use the same kind of locker: a lease holder takes no row
lock, so a row locker would get the row at once (and a row holder blocks lease UPDATEs).
"""

from __future__ import annotations

from mqstore.lock.exclusive import ExclusiveLease
from mqstore.lock.lease import LeaseLocker
from mqstore.lock.locker import Locker, NoLocker, Renewal
from mqstore.lock.row import RowLocker
from mqstore.lock.standby import GUARD_GRACE_MS
from mqstore.lock.status import LockStatus, describe_lock, journal_kept_advice, read_lock

__all__ = [
    "GUARD_GRACE_MS",
    "ExclusiveLease",
    "LeaseLocker",
    "LockStatus",
    "Locker",
    "NoLocker",
    "Renewal",
    "RowLocker",
    "describe_lock",
    "journal_kept_advice",
    "read_lock",
]
