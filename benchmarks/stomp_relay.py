"""The least a STOMP broker can do: the ceiling the benchmark clients leave to any broker.

A relay that answers every frame's receipt, hands each SEND to a subscriber of its
destination (the one that has had the fewest; held until one subscribes; unacknowledged
ones go to another subscriber when their consumer disconnects) and stores nothing -- or,
with ``--fsync``, first appends the body to a file and ``fdatasync`` s it, the least a
broker that is durable per message must do (no group commit). No selectors, no
transactions (transacted sends are passed on at once), no headers kept: whatever a real
broker does per message comes on top, so on one machine no broker driven by the same
clients goes faster than this relay.
``benchmarks/activemq/compare.py`` runs it as the targets ``relay`` and ``relay-fsync``.

    python benchmarks/stomp_relay.py --port-file PATH [--fsync FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(eq=False)
class Subscription:
    writer: asyncio.StreamWriter
    sub_id: bytes
    destination: bytes
    unacked: dict[bytes, bytes] = field(default_factory=dict)  # ack id -> body
    delivered: int = 0


@dataclass
class Destination:
    subscriptions: list[Subscription] = field(default_factory=list)
    held: deque[bytes] = field(default_factory=deque)


class Relay:
    """One relay; :meth:`serve` handles a connection."""

    def __init__(self, fsync_path: str | None) -> None:
        self.destinations: dict[bytes, Destination] = {}
        self.acks: dict[bytes, Subscription] = {}
        self.ids = itertools.count(1)
        self.fd = os.open(fsync_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND) if fsync_path else -1

    def destination(self, name: bytes) -> Destination:
        dest = self.destinations.get(name)
        if dest is None:
            dest = self.destinations[name] = Destination()
        return dest

    def dispatch(self, name: bytes, body: bytes) -> None:
        dest = self.destination(name)
        if not dest.subscriptions:
            dest.held.append(body)
            return
        # to the consumer that has had the fewest, so late subscribers catch up and consumers
        # that each wait for the same count all get it
        sub = min(dest.subscriptions, key=lambda s: s.delivered)
        sub.delivered += 1
        ack = b"%d" % next(self.ids)
        sub.unacked[ack] = body
        self.acks[ack] = sub
        sub.writer.write(
            b"MESSAGE\nsubscription:%s\nmessage-id:%s\nack:%s\ndestination:%s\n"
            b"content-length:%d\n\n%s\x00" % (sub.sub_id, ack, ack, name, len(body), body)
        )

    def subscribe(self, sub: Subscription) -> None:
        dest = self.destination(sub.destination)
        dest.subscriptions.append(sub)
        while dest.held:
            self.dispatch(sub.destination, dest.held.popleft())

    def drop(self, sub: Subscription) -> None:
        self.destination(sub.destination).subscriptions.remove(sub)
        for ack, body in sub.unacked.items():
            del self.acks[ack]
            self.dispatch(sub.destination, body)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        subs: list[Subscription] = []
        try:
            while True:
                raw = await reader.readuntil(b"\x00")  # the benchmark bodies hold no NUL
                head, _, body = raw[:-1].lstrip(b"\r\n").partition(b"\n\n")
                command, *lines = head.split(b"\n")
                headers = dict(line.split(b":", 1) for line in lines if b":" in line)
                if command in (b"CONNECT", b"STOMP"):
                    writer.write(b"CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00")
                elif command == b"SEND":
                    if self.fd >= 0:
                        os.write(self.fd, body)
                        os.fdatasync(self.fd)
                    self.dispatch(headers[b"destination"], body)
                elif command == b"SUBSCRIBE":
                    subs.append(Subscription(writer, headers[b"id"], headers[b"destination"]))
                    self.subscribe(subs[-1])
                elif command == b"ACK":
                    acked = self.acks.pop(headers[b"id"], None)
                    if acked is not None:
                        del acked.unacked[headers[b"id"]]
                if b"receipt" in headers:
                    writer.write(b"RECEIPT\nreceipt-id:%s\n\n\x00" % headers[b"receipt"])
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for sub in subs:
                self.drop(sub)
            writer.close()


async def main(port_file: str, fsync_path: str | None) -> None:
    relay = Relay(fsync_path)
    server = await asyncio.start_server(relay.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    tmp = port_file + ".tmp"
    Path(tmp).write_text(str(port))
    os.replace(tmp, port_file)
    await server.serve_forever()


def spawn(tmp: Path, fsync: bool) -> tuple[int, Callable[[], None]]:
    """This relay in a child process (files in ``tmp``); its port and how to stop it."""
    port_file = tmp / "relay.port"
    cmd = [sys.executable, __file__, "--port-file", str(port_file)]
    cmd += ["--fsync", str(tmp / "relay.log")] if fsync else []
    proc = subprocess.Popen(cmd)

    def stop() -> None:
        proc.kill()
        proc.wait()

    deadline = time.monotonic() + 30
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop()
            raise RuntimeError("benchmarks/stomp_relay.py did not start")
        time.sleep(0.05)
    return int(port_file.read_text()), stop


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-file", required=True, help="where to write the port")
    parser.add_argument("--fsync", metavar="FILE", help="fdatasync each SEND's body to FILE")
    args = parser.parse_args()
    try:  # the loop `mqstore serve` uses
        import uvloop
    except ImportError:
        asyncio.run(main(args.port_file, args.fsync))
    else:
        uvloop.run(main(args.port_file, args.fsync))
