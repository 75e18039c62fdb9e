"""A private three-node Redis Cluster on loopback, for the cluster tests.

Three ``redis-server --cluster-enabled yes`` processes (tests/support/servers.py's
RedisServer, nothing on disk), joined by ``redis-cli --cluster create``
with no replicas; ready when every node reports ``cluster_state:ok``.
"""

from __future__ import annotations

import shutil
import subprocess

import redis

from .servers import RedisServer, free_port, wait_until

REDIS_CLI = shutil.which("redis-cli")


class RedisCluster:
    """Three primaries that share the 16384 hash slots."""

    def __init__(self, size: int = 3) -> None:
        if REDIS_CLI is None:
            raise RuntimeError("redis-cli is not installed (apt-get install redis-tools)")
        # the bus port defaults to port + 10000, out of range for high ephemeral ports
        self.nodes = [
            RedisServer(None, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                        "--cluster-node-timeout", "5000", "--cluster-port", str(free_port()))
            for _ in range(size)
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
            assert REDIS_CLI is not None
            subprocess.run(
                [REDIS_CLI, "--cluster", "create", *(f"127.0.0.1:{port}" for port in self.ports),
                 "--cluster-replicas", "0", "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            wait_until(self.ready, 30, interval=0.1, what="cluster_state:ok on every node")
        except BaseException:
            self.cleanup()
            raise
        return self

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
