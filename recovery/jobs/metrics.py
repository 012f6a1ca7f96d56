"""Prometheus metrics of runs, read from Redis at scrape time (`recovery ui`'s /metrics, and
`submit --follow --metrics-port` for its own run).

A custom collector reads each run's summary as `recovery status --json` shows it
(reports.run_status) and its record's rounds when Prometheus scrapes, so the figures are the
status command's, a cleared run's series are gone at the next scrape, and nothing is kept in
the process between scrapes. Counters are cumulative counts from the record (its rounds'
counters added up), so they only go up. Labels: `run` and `workflow` on every series, plus
`component` (the workflow's components and its recovery rounds' queue sources), `state`,
`topic` and `partition`: bounded by the runs in Redis and their workflows.

Cost of a scrape: per run, what `recovery status` costs (O(failed positions)) plus one MEMORY
USAGE per key that holds the bulk of a run (its record, ledger buckets, failed positions'
queues, dead letters): the run's other keys (its keyed state, spill references, markers) are
not counted, as finding them is a SCAN of the whole keyspace. The age of the oldest pending root
is not exported: the ledger keeps roots as XORs, without times, and the failure times are in the
queued tuples, which a scrape does not read one by one; `recovery_last_recovery_timestamp_seconds`
with `recovery_queued_tuples` tells how long failed tuples have waited for a recovery round.
"""
from __future__ import annotations

import hmac
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import redis
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis import Redis

from recovery.errors import RecoveryError
from recovery.jobs import follow_events, reports, summary
from recovery.model.record import RoundRecord
from recovery.tracking import ledger, runs
from recovery.tracking import queue as failed_queue
from recovery.tracking.ledger import bucket_key

log = logging.getLogger(__name__)

RUN = ["run", "workflow"]
TUPLE_COUNTERS = ("executed", "acked", "failed", "emitted")
ROOT_STATES = ("complete", "pending", "failed", "dead", "in_flight")


class RunsCollector(Collector):
    """The runs' figures, read from Redis at each scrape. `run_ids`: which runs (default: every
    run in Redis)."""

    def __init__(self, client: Redis, run_ids: Callable[[], Iterable[str]] | None = None):
        self.client = client
        self.run_ids = run_ids

    def describe(self) -> list[Metric]:
        return []          # nothing to check at registration: the families are built per scrape

    def collect(self) -> Iterator[Metric]:
        fam = _Families()
        try:
            ids = list(self.run_ids()) if self.run_ids is not None else runs.list_ids(self.client)
            exported = 0
            for run_id in ids:
                try:
                    _collect_run(self.client, run_id, fam)
                    exported += 1
                except RecoveryError:        # cleared while scraped: its series are gone
                    continue
            fam.up.add_metric([], 1)
            fam.runs.add_metric([], exported)
        except redis.RedisError as err:
            log.warning("metrics: Redis: %s: %s", type(err).__name__, err)
            fam.up.add_metric([], 0)
        yield from fam.all()


class _Families:
    def __init__(self) -> None:
        self.up = GaugeMetricFamily("recovery_redis_up", "1 when this scrape could read Redis, else 0")
        self.runs = GaugeMetricFamily("recovery_runs", "Runs exported by this scrape")
        self.status = GaugeMetricFamily("recovery_run_status", "1 for the run's status (label status)",
                                        labels=[*RUN, "status"])
        self.round = GaugeMetricFamily("recovery_run_round", "The run's current round", labels=RUN)
        self.started = GaugeMetricFamily("recovery_run_started_timestamp_seconds", "When the run started",
                                         labels=RUN)
        self.counts_known = GaugeMetricFamily(
            "recovery_run_counts_known", "1 when the root counts are known (0 while a round is not settled: "
            "recovery_run_roots has no series then)", labels=RUN)
        self.roots_total = CounterMetricFamily("recovery_run_roots_read", "Roots read by the run's spouts",
                                               labels=RUN)
        self.roots = GaugeMetricFamily("recovery_run_roots", "Roots by state: complete, pending (queued for "
                                       "recovery or in flight), failed, dead, in_flight", labels=[*RUN, "state"])
        self.tuples = {k: CounterMetricFamily(f"recovery_tuples_{k}", f"Tuples {k} by the component, every "
                                              "round of the run", labels=[*RUN, "component"])
                       for k in TUPLE_COUNTERS}
        self.positions = GaugeMetricFamily("recovery_failed_positions", "Failed positions (component tasks) "
                                           "with tuples queued for recovery", labels=[*RUN, "component"])
        self.queued = GaugeMetricFamily("recovery_queued_tuples", "Tuples queued for recovery",
                                        labels=[*RUN, "component"])
        self.dead = GaugeMetricFamily("recovery_dead_letters", "Dead letters (tuples out of attempts)",
                                      labels=RUN)
        self.recovery_rounds = CounterMetricFamily("recovery_recovery_rounds", "Recovery rounds run",
                                                   labels=RUN)
        self.recovery_seconds = CounterMetricFamily("recovery_recovery_round_seconds",
                                                    "Time spent in recovery rounds", labels=RUN)
        self.last_recovery = GaugeMetricFamily(
            "recovery_last_recovery_timestamp_seconds",
            "When the run's last recovery round ended (its start when it has had none)", labels=RUN)
        self.lag = GaugeMetricFamily("recovery_partition_lag", "Messages of a topic partition not yet "
                                     "committed by the run's consumer", labels=[*RUN, "topic", "partition"])
        self.committed = GaugeMetricFamily("recovery_partition_committed_offset", "The consumer's committed "
                                           "offset", labels=[*RUN, "topic", "partition"])
        self.end = GaugeMetricFamily("recovery_partition_end_offset", "One past the partition's last offset",
                                     labels=[*RUN, "topic", "partition"])
        self.waiting = GaugeMetricFamily(
            "recovery_source_waiting", "1 while a follow run waits for a topic's server (a Kafka broker) that did "
            "not answer within its source's timeout (partition \"\": its metadata)",
            labels=[*RUN, "server", "topic", "partition"])
        self.stalls = CounterMetricFamily("recovery_source_stalls", "Times a follow run began to wait for a "
                                          "topic's server that did not answer within its source's timeout",
                                          labels=RUN)
        self.bytes = GaugeMetricFamily("recovery_run_redis_bytes", "Bytes of the run's record, ledger, queues and "
                                       "dead letters in Redis (MEMORY USAGE; other keys of the run not counted)",
                                       labels=RUN)

    def all(self) -> list[Metric]:
        return [self.up, self.runs, self.status, self.round, self.started, self.counts_known, self.roots_total,
                self.roots, *self.tuples.values(), self.positions, self.queued, self.dead, self.recovery_rounds,
                self.recovery_seconds, self.last_recovery, self.lag, self.committed, self.end, self.waiting,
                self.stalls, self.bytes]


def is_recovery_round(round_record: RoundRecord, original_ids: set[str]) -> bool:
    """A round that replayed queued tuples (its queue sources are not in the original workflow)
    or failed roots; round 0 and a follow run's batches read their sources."""
    comps = round_record.components
    return bool(round_record.round) and (
        any(c not in original_ids for c in comps) or any(s.replayed_roots for s in comps.values()))


def _collect_run(client: Redis, run_id: str, fam: _Families) -> None:
    rec = runs.get(client, run_id)
    status = reports.run_summary(client, run_id, rec)
    original = rec.original_workflow()
    labels = [run_id, status.workflow or original.name]
    fam.status.add_metric([*labels, status.status], 1)
    fam.round.add_metric(labels, float(status.round))
    fam.started.add_metric(labels, status.started)
    fam.counts_known.add_metric(labels, 1 if status.counts_known else 0)
    if status.counts_known:
        fam.roots_total.add_metric(labels, float(status.roots or 0))
        for state in ROOT_STATES:
            value = getattr(status, state)
            if value is not None:
                fam.roots.add_metric([*labels, state], float(value))
    totals = summary.sum_components(rec.rounds, original)
    for comp, st in totals.items():
        for k in TUPLE_COUNTERS:
            fam.tuples[k].add_metric([*labels, comp], float(getattr(st, k)))
    by_comp: dict[str, list[int]] = {}
    for p in status.failed_positions:
        n = by_comp.setdefault(p.component, [0, 0])
        n[0] += 1
        n[1] += p.count
    for comp, (positions, queued) in sorted(by_comp.items()):
        fam.positions.add_metric([*labels, comp], positions)
        fam.queued.add_metric([*labels, comp], queued)
    fam.dead.add_metric(labels, float(status.dead_tuples))
    ids = {c.id for c in original.components}
    recovery = [r for r in rec.rounds if is_recovery_round(r, ids)]
    fam.recovery_rounds.add_metric(labels, len(recovery))
    fam.recovery_seconds.add_metric(labels, sum(max(0.0, r.ended - r.started)
                                               for r in recovery if r.started and r.ended))
    last = max((r.ended or 0.0 for r in recovery), default=0.0)
    fam.last_recovery.add_metric(labels, last or float(rec.started or 0))
    for offsets in status.partitions or []:
        if offsets.missing:   # (a topic that does not exist has no partition to measure)
            continue
        part = [*labels, offsets.topic, str(offsets.partition)]
        fam.lag.add_metric(part, float(offsets.lag))
        fam.committed.add_metric(part, float(offsets.committed))
        fam.end.add_metric(part, float(offsets.end))
    if rec.follow:
        fam.stalls.add_metric(labels, float(rec.source_stalls))
        w = rec.source_waiting
        if w and not rec.follow_stopped:
            where = "" if w.get("partition") is None else str(w["partition"])
            fam.waiting.add_metric([*labels, str(w.get("server")), str(w.get("topic")), where], 1)
    used = run_bytes(client, run_id, status.failed_positions)
    if used is not None:
        fam.bytes.add_metric(labels, used)


def run_bytes(client: Redis, run_id: str, positions: list[summary.FailedPosition]) -> float | None:
    """MEMORY USAGE of the keys that hold the bulk of a run: a few commands plus one per failed
    position, never a SCAN. None where the server refuses MEMORY USAGE."""
    names = [runs.record_key(run_id), *(bucket_key(run_id, b) for b in range(ledger.LEDGER_BUCKETS)),
             *failed_queue.storage_keys(run_id, [(p.component, p.task) for p in positions])]
    total = 0
    for name in names:
        try:
            total += int(client.memory_usage(name) or 0)
        except redis.ResponseError:     # a server without MEMORY USAGE (or it is not allowed)
            return None
    return float(total)


def registry_for(client: Redis, run_ids: Callable[[], Iterable[str]] | None = None) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunsCollector(client, run_ids))
    return registry


def exposition(registry: CollectorRegistry) -> tuple[bytes, str]:
    """A scrape's body in Prometheus' text format, and its content type."""
    return generate_latest(registry), CONTENT_TYPE_LATEST


# --- the token ---------------------------------------------------------------------------------
def presented_token(authorization: str | None, header_token: str | None) -> str | None:
    """The token a scraper sent: `Authorization: Bearer TOKEN` (Prometheus' bearer token), or the
    web view's X-Recovery-Token header."""
    if header_token:
        return header_token.strip()
    scheme, _, credentials = (authorization or "").strip().partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None


def token_matches(presented: str | None, token: str) -> bool:
    return presented is not None and hmac.compare_digest(presented.encode(), token.encode())


# --- the follow run's own endpoint -------------------------------------------------------------
class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:   # noqa: A002 (the base's name)
        log.debug("metrics: " + format, *args)


class _IPv6Server(WSGIServer):
    address_family = socket.AF_INET6


class HostCheck(Protocol):
    """The Host headers a server answers to (the web view's rule, recovery/ui/access.py)."""

    def host_allowed(self, authority: str) -> bool: ...

    @property
    def allowed(self) -> list[str]: ...


class MetricsServer:
    """/metrics of a registry on host:port in a daemon thread. `hosts(port)` gives the Host
    headers it answers to once its port is bound: any other gets 421 (DNS rebinding: a hostile
    page whose name resolves to loopback would read every series otherwise). With a token, a
    request without it as a bearer token (or X-Recovery-Token) gets 401."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, token: str | None,
                 hosts: Callable[[int], HostCheck] | None = None):
        # (prometheus_client declares its WSGI app as a bare Callable: this is the WSGI shape)
        exposition: Callable[[dict[str, Any], Any], Iterable[bytes]] = make_wsgi_app(registry)
        rule: list[HostCheck] = []     # set once the port is known, before the first request is served

        def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            presented_host = environ.get("HTTP_HOST", "")
            if rule and not rule[0].host_allowed(presented_host):
                start_response("421 Misdirected Request", [("Content-Type", "text/plain; charset=utf-8")])
                return [f"host {presented_host!r} is not this endpoint's: it answers to {', '.join(rule[0].allowed)} "
                        "(other names are refused against DNS rebinding; --metrics-allow-host NAME adds one)\n"
                        .encode()]
            if token is not None and not token_matches(
                    presented_token(environ.get("HTTP_AUTHORIZATION"), environ.get("HTTP_X_RECOVERY_TOKEN")), token):
                start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                                    ("WWW-Authenticate", 'Bearer realm="recovery"')])
                return [b"this endpoint needs its token: Authorization: Bearer TOKEN\n"]
            return exposition(environ, start_response)

        try:
            server_class = _IPv6Server if ":" in host else WSGIServer
            self.server: WSGIServer = make_server(host.strip("[]"), port, app, server_class=server_class,
                                                  handler_class=_QuietHandler)
        except OSError as err:
            raise RecoveryError(f"--metrics-port: cannot listen on {host}:{port}: {err.strerror or err}") from None
        self.port = self.server.server_port
        if hosts is not None:
            rule.append(hosts(self.port))
        self.thread = threading.Thread(target=self.server.serve_forever, name="recovery-metrics", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class RunWatch:
    """The run a follow run's endpoint exports: none until the run exists (its `run` or
    `continue` event names it)."""

    def __init__(self) -> None:
        self.run_id: str | None = None

    def ids(self) -> list[str]:
        return [self.run_id] if self.run_id else []

    def on_event(self, event: follow_events.FollowEvent) -> None:
        if isinstance(event, follow_events.Started | follow_events.Continued):
            self.run_id = event.run_id
