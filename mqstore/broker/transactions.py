"""STOMP transactions: sends held back and acks pending until COMMIT, undone by ABORT."""

from __future__ import annotations

from dataclasses import dataclass, field

from mqstore.broker.messages import BrokerMessage
from mqstore.broker.subscriptions import Delivery


@dataclass(slots=True)
class Transaction:
    """Work of one transaction id of one connection."""

    tx_id: str
    sends: list[BrokerMessage] = field(default_factory=list)
    size: int = 0  # bytes of ``sends`` (body + MESSAGE_OVERHEAD each): only memory holds them
    acks: list[Delivery] = field(default_factory=list)
    nacks: list[Delivery] = field(default_factory=list)

    def forget(self, deliveries: list[Delivery]) -> None:
        """Deliveries settled outside the transaction (e.g. consumer closed)."""
        gone = {id(d) for d in deliveries}
        self.acks = [d for d in self.acks if id(d) not in gone]
        self.nacks = [d for d in self.nacks if id(d) not in gone]
