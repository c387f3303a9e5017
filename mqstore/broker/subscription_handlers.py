"""STOMP SUBSCRIBE, UNSUBSCRIBE, ACK and NACK: the command handlers mixed into
:class:`~mqstore.broker.protocol.Connection` for consumers."""

from __future__ import annotations

import asyncio

from mqstore.broker.durable import selector_way_out
from mqstore.broker.frames import Frame
from mqstore.broker.handler_state import HandlerState, protocol_error
from mqstore.broker.messages import (
    TRANSFORMATIONS,
    container_of,
    destination_options,
    stomp_name,
    unsupported_transformation,
)
from mqstore.broker.subscriptions import ACK_MODES, Consumer, Delivery
from mqstore.store.model import Outcome, SubscriptionKey


class SubscriptionHandlers(HandlerState):
    """SUBSCRIBE, UNSUBSCRIBE, ACK and NACK."""

    # -- SUBSCRIBE / UNSUBSCRIBE -------------------------------------------------------------
    async def on_subscribe(self, frame: Frame) -> None:
        cfg = self.broker.config
        dest = frame.get("destination")
        if not dest:
            raise protocol_error("SUBSCRIBE needs a destination header")
        container = container_of(dest)
        sub_id = frame.get("id") or (dest if self.version == "1.0" else None)
        if sub_id is None:
            raise protocol_error("SUBSCRIBE needs an id header")
        if sub_id in self.consumers:
            raise protocol_error(f"subscription id {sub_id!r} is already in use on this connection")
        ack = frame.get("ack", "auto")
        if ack not in ACK_MODES:
            raise protocol_error(f"unknown ack mode {ack!r}; use auto, client or client-individual")
        name = frame.get("activemq.subscriptionName") or frame.get("durable-subscription-name")
        is_topic = container.startswith("topic://")
        if frame.get("selector"):
            raise protocol_error(_no_selectors(stomp_name(container), name if is_topic else None))
        if name and not is_topic:
            raise protocol_error(
                f"cannot durably subscribe to a queue ({dest}): a durable subscription "
                "(activemq.subscriptionName) is for a /topic/; leave the header out to "
                "consume the queue"
            )
        durable = bool(name)
        if durable and not self.client_id:
            raise protocol_error("a durable subscription needs a client-id header on CONNECT")
        transformation = frame.get("transformation")
        if transformation is not None and transformation not in TRANSFORMATIONS:
            raise protocol_error(unsupported_transformation(transformation, "SUBSCRIBE"))
        no_local = (frame.get("activemq.noLocal") or "").lower() == "true"
        if no_local and (durable or not is_topic):
            where = "a durable subscription" if durable else "a queue"
            raise protocol_error(
                f"activemq.noLocal is not supported on {where} by this broker (ActiveMQ "
                "evaluates it as a selector, and selectors are not supported): it is served "
                "for non-durable /topic/ subscriptions only"
            )
        browser = frame.get("browser") == "true"
        if browser and is_topic:
            raise protocol_error("browsing is only possible on queues")
        default = (
            cfg.queue_prefetch if not is_topic
            else cfg.durable_topic_prefetch if durable else cfg.topic_prefetch
        )  # fmt: skip
        # Consumer settings: a header, else the destination's option (``?consumer.x=...``).
        options = destination_options(dest)
        prefetch_size = frame.get("activemq.prefetchSize") or options.get("consumer.prefetchSize")
        try:
            prefetch = int(prefetch_size or default)
        except ValueError:
            raise protocol_error("activemq.prefetchSize must be an integer") from None
        # A larger prefetch is lowered to the most a consumer may have unacknowledged (as
        # ActiveMQ's client lowers it to its MAX_PREFETCH_SIZE).
        prefetch = min(max(prefetch, 1), cfg.max_prefetch)
        exclusive = frame.get("activemq.exclusive") or options.get("consumer.exclusive")
        consumer = Consumer(
            self,  # type: ignore[arg-type]
            sub_id, container, "auto" if browser else ack, prefetch,
            exclusive=exclusive == "true", browser=browser,
            no_local=self.producer if no_local else None,
        )  # fmt: skip
        self.consumers[sub_id] = consumer
        try:
            await self.broker.subscribe(consumer, name if durable else None, self.client_id)
        except Exception:
            del self.consumers[sub_id]
            raise
        self.receipt(frame)

    async def on_unsubscribe(self, frame: Frame) -> None:
        sub_id = frame.get("id") or frame.get("destination")
        if not sub_id:
            raise protocol_error(
                "UNSUBSCRIBE needs an id header (the id its SUBSCRIBE gave) or a destination "
                "header (with activemq.subscriptionName: the topic of the durable subscription "
                "to delete)"
            )
        found = self._subscription_named(frame, sub_id)
        consumer = self.consumers.get(found) if found is not None else None
        name = frame.get("activemq.subscriptionName") or frame.get("durable-subscription-name")
        if consumer is None and not name:
            named = f"id {sub_id!r}" if frame.get("id") else f"destination {sub_id!r}"
            raise protocol_error(f"no subscription with {named} on this connection")
        container = ""
        if name:
            container = self._durable_topic(frame, name, consumer)
            await self._refuse_durable_in_use(container, name, consumer)
        if found is not None and consumer is not None:
            del self.consumers[found]
            held = list(consumer.in_flight.values())
            self.broker.unsubscribe(consumer)
            # A queue keeps the deliveries settled in a transaction for its COMMIT or ABORT;
            # the others left with the consumer (a durable subscriber reads them again).
            kept = {id(d) for d in consumer.in_flight.values()}
            for tx in self.txs.values():
                tx.forget([d for d in held if id(d) not in kept])
        if name and self.client_id and container:
            await self.broker.delete_durable(container, self.client_id, name)
        self.receipt(frame)

    def _durable_topic(self, frame: Frame, name: str, consumer: Consumer | None) -> str:
        """The topic of the durable subscription ``name`` an UNSUBSCRIBE deletes: its
        ``destination``, else the subscription's it ends, else the one topic where this
        client has a subscription of that name (as ActiveMQ, which needs only client-id and
        name); "" when it has none."""
        if not self.client_id:
            raise protocol_error(
                f"UNSUBSCRIBE with activemq.subscriptionName {name!r} deletes a durable "
                "subscription, which needs the client-id header on CONNECT that created it"
            )
        dest = frame.get("destination")
        if dest:
            container = container_of(dest)
        elif consumer is not None:
            container = consumer.container
        else:
            topics = self.broker.durable_topics(self.client_id, name)
            if len(topics) > 1:
                raise protocol_error(
                    f"client {self.client_id!r} has a durable subscription {name!r} on "
                    f"{len(topics)} topics ({', '.join(stomp_name(t) for t in topics)}): name "
                    "the one to delete in a destination header"
                )
            return topics[0] if topics else ""
        if not container.startswith("topic://"):
            raise protocol_error(
                f"UNSUBSCRIBE with activemq.subscriptionName {name!r} deletes a durable "
                f"subscription of a topic, but names {stomp_name(container)}: give the "
                "topic's /topic/ destination, or leave the destination header out"
            )
        return container

    def _subscription_named(self, frame: Frame, sub_id: str | None) -> str | None:
        """The id of the subscription an UNSUBSCRIBE names. STOMP 1.0 may name the
        destination of a subscription made with an id (the first such one, as in ActiveMQ)."""
        if sub_id in self.consumers:
            return sub_id
        if self.version == "1.0" and not frame.get("id") and sub_id:
            container = container_of(sub_id)
            return next((k for k, c in self.consumers.items() if c.container == container), None)
        return None

    async def _refuse_durable_in_use(
        self, container: str, name: str, leaving: Consumer | None
    ) -> None:
        """A durable subscription is deleted only once its subscriber is gone (as ActiveMQ:
        "durable consumer is in use"), or goes in the same UNSUBSCRIBE; a subscriber of the
        client's previous connection, still closing, is waited for (as a SUBSCRIBE does)."""
        topic = self.broker.topics.get(container)
        key = SubscriptionKey(container, self.client_id or "", name)
        sub = topic.durables.get(key) if topic is not None else None
        if sub is None or sub.consumer is None or sub.consumer is leaving:
            return
        if not await self.broker.wait_detached(sub):
            user = sub.consumer.sub_id if sub.consumer is not None else None
            raise protocol_error(
                f"durable subscription {name!r} is in use by subscription id {user!r}: "
                "UNSUBSCRIBE that id first (or name it in the same frame), then delete the "
                "durable subscription"
            )

    # -- ACK / NACK ---------------------------------------------------------------------------
    def _find(self, frame: Frame) -> Delivery:
        if self.version == "1.2":
            token = frame.get("id")
            if not token:
                raise protocol_error(
                    f"{frame.command} needs an id header (STOMP 1.2): the value of the ack "
                    "header of the MESSAGE it settles"
                )
            delivery = self.tokens.get(token)
            if delivery is None:
                raise protocol_error(
                    f"{frame.command} for unknown or already settled ack id {token!r}"
                )
            return delivery
        mid = frame.get("message-id")
        if not mid:
            raise protocol_error(f"{frame.command} needs a message-id header")
        sub = frame.get("subscription")
        consumers = [self.consumers[sub]] if sub in self.consumers else self.consumers.values()
        for c in consumers:
            found = c.in_flight.get(mid)
            if found is not None:
                return found
        raise protocol_error(f"{frame.command} for unknown or already settled message {mid!r}")

    def _targets(self, delivery: Delivery) -> list[Delivery]:
        if delivery.consumer.ack_mode == "client":
            return delivery.consumer.up_to(delivery)
        return [delivery]

    async def on_ack(self, frame: Frame) -> None:
        await self._settle(frame, nack=False)

    async def on_nack(self, frame: Frame) -> None:
        if self.version == "1.0":
            raise protocol_error("NACK is not part of STOMP 1.0")
        await self._settle(frame, nack=True)

    async def _settle(self, frame: Frame, *, nack: bool) -> None:
        delivery = self._find(frame)
        if delivery.tx is not None and delivery.tx == frame.get("transaction"):
            self.receipt(frame)  # a repeated ACK in the same transaction changes nothing
            return
        if delivery.tx is not None:
            raise protocol_error(
                f"{frame.command} for a message already settled in transaction "
                f"{delivery.tx!r} (commit or abort it first)"
            )
        # A NACK poisons only the message it names, in every ack mode (ActiveMQ's
        # StompSubscription.onStompMessageNack); only an ACK is cumulative in client mode.
        targets = [delivery] if nack else self._targets(delivery)
        tx_id = frame.get("transaction")
        if tx_id is not None:
            tx = self._tx(tx_id)
            for d in targets:
                d.consumer.mark_tx(d, tx_id)
            (tx.nacks if nack else tx.acks).extend(targets)
            if delivery.consumer.dest is not None:
                delivery.consumer.dest.kick()  # the freed prefetch credit takes a message
            self.receipt(frame)
            return
        for d in targets:
            d.consumer.settle(d)
        dest = delivery.consumer.dest
        assert dest is not None
        msgs = [d.msg for d in targets]
        if nack:
            fut = self.broker.dead_letter(dest, msgs, Outcome.DEAD_LETTERED, delivered=True)
        else:
            op, finish = dest.settle_work(msgs)
            op.lazy = frame.get("receipt") is None
            fut = self.broker.submit(
                op, finish, failed=lambda: dest.unsettled(msgs, delivered=True)
            )
        if frame.get("receipt") is not None:
            await asyncio.shield(fut)
        else:
            self.settling.add(fut)
            fut.add_done_callback(self.settling.discard)
        self.receipt(frame)


def _no_selectors(destination: str, durable: str | None) -> str:
    """The refusal of a SUBSCRIBE with a selector to ``destination`` (its STOMP name), of
    durable subscription ``durable`` of that topic."""
    if not durable:
        return "message selectors are not supported by this broker"
    return (
        "message selectors are not supported by this broker, so durable subscription "
        f"{durable!r} cannot be resumed with one: if ActiveMQ stored it with this selector, "
        + selector_way_out(destination, durable)
    )
