"""Runs against a real Redis Cluster of three masters, given as ONE node's URL: the
representative recovery, crash-resume, Spark-retry and `clear` tests of the single server run
here again (the same test functions, with this module's `redis_url` and `redis_client`), plus
what only a cluster has: a run's keys spread over every master, a master killed mid-run, a
master with a replica. Every node is this project's own redis-server (tests/clusters.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from recovery.cli import main
from recovery.controlplane import connection
from recovery.jobs import dead_letters, recover
from recovery.model.run import TaskIdentity
from recovery.tracking import keys, ledger, runs
from recovery.tracking import queue as failed_queue
from recovery.tracking.ledger import bucket_key
from tests.clusters import RedisCluster
from tests.helpers import wait_for
from tests.integration import test_engine, test_recovery
from tests.integration.conftest import copy_workflow, sink_records, submit


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """Three masters with AOF (a killed master comes back with what it acknowledged)."""
    c = RedisCluster(tmp_path_factory.mktemp("cluster3"), 3, appendonly=True).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def redis_url(cluster: RedisCluster) -> str:
    """One master's URL (the client finds the others), every master flushed before the test."""
    cluster.flush()
    return cluster.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[object]:
    client = connection.connect(redis_url)
    assert connection.is_cluster(client)
    try:
        yield client
    finally:
        client.close()


# The single server's tests, against the cluster (a few representative ones: the suite's time;
# recovery's exactness is the acceptance test's, below)
test_clear_removes_every_key_of_the_run_and_nothing_else = \
    test_recovery.test_clear_removes_every_key_of_the_run_and_nothing_else
test_spark_task_retries_change_no_result_and_no_ledger = test_engine.test_spark_task_retries_change_no_result_and_no_ledger


def test_the_test_kit_runs_on_a_cluster_client(redis_client):
    """recovery.testing.run_local (in-process, no Spark) with a cluster client: a five-stage
    chain completes, every root acked, the ledger folded to nothing."""
    from recovery import testing
    from tests.unit.tracking.test_tracker import chain
    words = [f"w{i}" for i in range(300)]
    run = testing.run_local(chain(), redis_client, run_id="kit", inputs={"words": words})
    assert run.summary.status == "completed" and sorted(r[0] for r in run.sinks["out"]) == sorted(words)
    assert ledger.pending_roots(redis_client, "kit") == set()


def test_kill_9_of_the_driver_then_recover_gives_exact_output(spark, redis_url, redis_client, tmp_path):
    test_recovery.test_kill_9_of_the_driver_then_recover_gives_exact_output(
        spark, redis_url, redis_client, tmp_path)


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def test_fanout_with_failures_on_three_masters_spreads_recovers_exactly_and_clear_all_leaves_nothing(
        spark, cluster, redis_url, redis_client, tmp_path):
    """The acceptance check: the fanout workflow (numbers -> fork -> square | cube -> join: a
    diamond) with failures on both branches, submitted
    with ONE node's URL, writes its keys on every master, no master holding more than 1.5x the
    average of the ledger; `recover` is exact; `clear --all` leaves no key on any node."""
    xml = copy_workflow("fanout", tmp_path / "failing")
    s = submit(spark, redis_url, redis_client, xml, {
        "recovery.inject.sq.component": "square", "recovery.inject.sq.rate": "0.05",
        "recovery.inject.cu.component": "cube", "recovery.inject.cu.rate": "0.05",
        "recovery.retry.delay.period.ms": "10"})
    run_id = s.run_id
    assert s.status == "pending" and {p.component for p in s.failed_positions} == {"square", "cube"}
    # the run's keys, on every master: its ledger buckets and its queues are not in one slot
    per_master = [[k.decode() for k in ks] for ks in cluster.keys_per_master(keys.run_pattern(run_id))]
    assert all(per_master), per_master
    buckets = [sum(1 for k in ks for b in range(keys.LEDGER_BUCKETS) if k == bucket_key(run_id, b))
               for ks in per_master]
    assert sum(buckets) > 0 and max(buckets) <= 1.5 * sum(buckets) / len(buckets), buckets
    queues = {k for ks in per_master for k in ks if "queue:" in k and not k.endswith(":history")}
    assert queues and len({keys.hash_slot(q) for q in queues}) == len(queues)
    # the history of each failed position is in its queue's slot: it spreads as the queues do
    histories = {k for ks in per_master for k in ks if "queue:" in k and k.endswith(":history")}
    assert {keys.hash_slot(h) for h in histories} == {keys.hash_slot(q) for q in queues}

    r = recover.recover(spark, redis_client, redis_url, run_id)
    assert r.status == "completed" and r.pending == 0 and r.dead == 0
    clean = test_engine.fanout_reference(tmp_path / "failing" / "data" / "numbers.txt")
    for sink, want in zip(("archive", "joined"), clean, strict=True):
        assert sink_records(tmp_path / "failing" / "out" / "fanout" / sink) == want, sink
    assert ledger.pending_roots(redis_client, run_id) == set()

    code, out, err = cli("clear", "--all", "--redis", redis_url)
    assert code == 0, err
    assert cluster.keys_per_master() == [[], [], []]


def _spawn(args: list[str], redis_url: str) -> subprocess.Popen:
    env = dict(os.environ, RECOVERY_REDIS_URL=redis_url)
    return subprocess.Popen([sys.executable, "-m", "recovery", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_master_killed_mid_run_stops_it_in_one_line_and_recover_is_exact_once_it_is_back(
        spark, cluster, redis_url, redis_client, tmp_path):
    """kill -9 of the master holding some of the run's ledger buckets (not its record's) while
    the submit runs: the submit ends with one line, exit 2 or 1 as every Redis loss does, and
    the run stays resumable; the node comes back with its AOF, and `recover` is exact."""
    xml = copy_workflow("wordcount", tmp_path)
    run_id = "master-killed"
    home = redis_client.get_node_from_key(runs.record_key(run_id)).port
    victim = next(n for n, p in enumerate(cluster.ports[:cluster.masters]) if p != home)
    proc = _spawn(["submit", str(xml), "--run-id", run_id, "-p", "recovery.inject.z.component=count",
                   "-p", "recovery.inject.z.mode=slow", "-p", "recovery.inject.z.delay.ms=2",
                   "-p", "recovery.inject.s.component=split", "-p", "recovery.inject.s.rate=0.03"], redis_url)
    try:
        wait_for(lambda: redis_client.hlen(keys.task_done(run_id, 0)) >= 1 or proc.poll() is not None, 240,
                 "a task of the run to commit")
        assert proc.poll() is None, proc.communicate()
        cluster.kill(victim)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert proc.returncode in (1, 2) and len(lines) == 1, err
    assert "recover" in lines[0] or "Redis" in lines[0], lines
    cluster.restart(victim)
    client = connection.connect(redis_url)
    try:
        rec = runs.get(client, run_id)
        assert rec.status in (runs.ERROR, runs.RUNNING), rec.status
        r = recover.recover(spark, client, redis_url, run_id)
        assert r.status == "completed", r
        assert sink_records(tmp_path / "out" / "wordcount") == \
            test_engine.wordcount_reference(tmp_path / "data" / "sentences.txt")
    finally:
        client.close()


def test_a_cluster_with_a_replica_per_master_runs_and_clears(spark, tmp_path):
    """Three masters with a replica each: the URL of a replica works as well as a master's
    (the client finds the masters), the run recovers exactly, and `clear` leaves no key on any
    master (nor, once they caught up, on the replicas)."""
    c = RedisCluster(tmp_path / "nodes", 3, replicas=1).start()
    try:
        url = c.urls[-1]   # a replica's
        client = connection.connect(url)
        try:
            xml = copy_workflow("wordcount", tmp_path / "wc")
            s = submit(spark, url, client, xml, {**test_recovery.TRANSIENT_SPLIT, **test_recovery.FAST_RETRY})
            r = recover.recover(spark, client, url, s.run_id)
            assert r.status == "completed"
            assert sink_records(tmp_path / "wc" / "out" / "wordcount") == \
                test_engine.wordcount_reference(tmp_path / "wc" / "data" / "sentences.txt")
            code, _, err = cli("clear", "--all", "--redis", url)
            assert code == 0, err
            assert c.keys_per_master() == [[], [], []]
        finally:
            client.close()
    finally:
        c.stop()


def test_root_replay_selection_and_dead_requeue_split_by_slot_on_a_cluster(redis_client):
    """The steps that were one transaction over several slots, on the cluster, without Spark:
    root replay's selection per bucket (replay set, then the bucket's superseded blob, once),
    and `dead --requeue` (the queue, then the dead letters)."""
    from recovery.model.failed import FailedTuple
    from recovery.tracking.tracker import TaskTracker
    lease = runs.create(redis_client, "split-steps", "<workflow/>", "{}", None, "local", True)
    roots = list(range(1, 41))
    task = TaskTracker(redis_client, TaskIdentity("split-steps", 0, "count", 0, 7), {"recovery.max.attempts": "2"},
                       generation=lease.generation)
    for r in roots:   # each root's tuple fails at count task 7; the last ten are out of attempts
        task.failure(FailedTuple(values=[r], id=1000 + r, roots=[r], stream="default", error="x",
                                 attempt=2 if r > 30 else 1))
    assert task.commit({r: r * 7 + 3 for r in roots}, {"executed": len(roots)})
    assert redis_client.hlen(failed_queue.queue_key("split-steps", "count", 7)) == 30
    assert redis_client.hlen(failed_queue.dead_letters_key("split-steps")) == 10
    runs.update(redis_client, "split-steps", lease.generation, status=runs.DEAD)   # its driver ended
    lease.release()

    assert dead_letters.requeue_dead(redis_client, "split-steps") == 10
    assert redis_client.hlen(failed_queue.queue_key("split-steps", "count", 7)) == 40
    assert redis_client.hlen(failed_queue.dead_letters_key("split-steps")) == 0 and redis_client.scard(failed_queue.dead_roots_key("split-steps")) == 0
    # the history of the position, in its queue's slot: each failure, and each requeue once
    from recovery.tracking.queue import history
    events = history.read(redis_client, "split-steps", "count", 7).events
    assert sorted(e.kind for e in events) == ["failed"] * 40 + ["requeued"] * 10
    assert dead_letters.requeue_dead(redis_client, "split-steps") == 0
    assert len(history.read(redis_client, "split-steps", "count", 7).events) == 50

    added = [ledger.supersede_bucket(redis_client, "split-steps", b, 1, lease.generation)
             for b in range(ledger.LEDGER_BUCKETS)]
    assert sum(added) == len(roots)
    again = [ledger.supersede_bucket(redis_client, "split-steps", b, 1, lease.generation)
             for b in range(ledger.LEDGER_BUCKETS)]
    assert again == [0] * ledger.LEDGER_BUCKETS     # once per bucket and round
    replay = {int(r) for r in redis_client.smembers(keys.root_replay_set("split-steps", 1))}
    assert replay == set(roots)
    for b in range(ledger.LEDGER_BUCKETS):          # the superseded blobs cancel every pending XOR
        assert ledger.resolve_bucket(redis_client, "split-steps", b, lease.generation) == 0
