"""A Redis Cluster given as one node's URL, and Redis errors nothing expected, through
the CLI: one line and exit 2, never a traceback. Real servers from the installed redis-server: a
cluster (tests/clusters.py, the `redis_cluster` fixture) and the session's single server."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from recovery.cli import main
from recovery.controlplane import connection
from recovery.tracking import keys
from recovery.tracking.ledger import bucket_key

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"


def cli(*args: str):
    # catch_exceptions=False: a traceback (the ClusterCrossSlotError of the trial) fails the test
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize("redis_cluster", [1, 3], indirect=True, ids=["1-master", "3-masters"])
def test_any_node_s_url_gives_a_cluster_client_that_reaches_every_master(redis_cluster):
    """`INFO cluster` tells a cluster node: its URL, any of them, gives a RedisCluster, and the
    keys a run writes land on the masters that own their slots."""
    for url in redis_cluster.urls:
        client = connection.connect(url)
        try:
            assert connection.is_cluster(client)
            assert len(client.get_primaries()) == redis_cluster.masters
            for b in range(keys.LEDGER_BUCKETS):
                client.hset(bucket_key("r-1", b), "compacted", b"x")
            found = sorted(k.decode() for k in connection.scan_keys(client, keys.run_pattern("r-1")))
            assert found == sorted(bucket_key("r-1", b) for b in range(keys.LEDGER_BUCKETS))
            client.delete(*found)
        finally:
            client.close()
    assert sum(map(len, redis_cluster.keys_per_master())) == 0


def test_a_single_server_stays_a_plain_client(redis_url):
    client = connection.connect(redis_url)
    try:
        assert not connection.is_cluster(client)
    finally:
        client.close()


def test_every_command_against_a_cluster_answers(redis_cluster, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("a\nb\n")
    url = redis_cluster.url
    for args in (["runs"], ["dead", "some-run"], ["status", "some-run"], ["recover", "some-run"],
                 ["clear", "--all"], ["produce", "events", str(lines), "--partitions", "2"]):
        code, out, err = cli(*args, "--redis", url)
        if args[0] in ("runs", "clear", "produce"):
            assert code == 0, (args, err)
        else:   # no such run: the usual one line
            assert (code, err.count("\n"), "some-run" in err) == (2, 1, True), (args, err)


def test_a_redis_error_nothing_expected_is_one_line_and_exit_2(redis_url, redis_client):
    """A server that refuses a command (here an ACL user without ZRANGE): the CLI says so in one
    line, naming the error, instead of a traceback."""
    redis_client.execute_command("ACL", "SETUSER", "limited", "on", ">pw", "~*", "+ping", "+info", "+client")
    try:
        url = redis_url.replace("unix://", "unix://limited:pw@", 1)
        code, out, err = cli("runs", "--redis", url)
        assert code == 2 and out == "", err
        assert err.startswith("error: Redis: NoPermissionError: ") and "zrange" in err.lower(), err
        assert err.count("\n") == 1 and "pw" not in err
    finally:
        redis_client.execute_command("ACL", "DELUSER", "limited")
