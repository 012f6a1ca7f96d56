"""A Redis Cluster, and Redis errors nothing expected, through the CLI (issue 17, section 3):
one line and exit 2, never a traceback. Real servers from the installed redis-server: a
cluster (tests/clusters.py, the `redis_cluster` fixture) and the session's single server."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from recovery.cli import main
from recovery.redis import connection

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"


def cli(*args: str):
    # catch_exceptions=False: a traceback (the ClusterCrossSlotError of the trial) fails the test
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def refusal(url: str) -> str:
    return (f"error: Redis at {url} is a Redis Cluster node; Redis Cluster is not supported yet "
            "(use a single server)")


@pytest.mark.parametrize("redis_cluster", [1, 3], indirect=True, ids=["1-master", "3-masters"])
def test_connecting_to_a_cluster_node_is_refused_in_one_line(redis_cluster):
    for url in redis_cluster.urls:
        with pytest.raises(connection.RedisUnsupported) as err:
            connection.connect(url)
        assert f"error: {err.value}" == refusal(url) and err.value.exit_code == 2


def test_every_command_against_a_cluster_is_one_line_and_exit_2(redis_cluster, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("a\nb\n")
    url = redis_cluster.url
    for args in (["submit", str(WORKFLOWS / "wordcount.xml")], ["runs"], ["status", "some-run"],
                 ["recover", "some-run"], ["dead", "some-run"], ["clear", "--all"],
                 ["produce", "events", str(lines), "--partitions", "2"]):
        code, out, err = cli(*args, "--redis", url)
        assert (code, out, err.splitlines()) == (2, "", [refusal(url)]), args


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
