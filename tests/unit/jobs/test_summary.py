"""recovery.jobs.summary on fakeredis: counts of an unsettled round, one status for `runs` and
`status`, component tables in topological order and labelled by their rounds."""
from __future__ import annotations

import json

from click.testing import CliRunner

from recovery.cli import main
from recovery.jobs import summary
from recovery.model.record import RoundRecord
from recovery.tracking import runs
from tests.unit.run_records import WF
from tests.unit.run_records import create_run as _create
from tests.unit.run_records import ledger_pending as _ledger_pending


def test_a_crashed_unsettled_round_has_unknown_counts_never_negative(fake_redis):
    _create(fake_redis)
    fake_redis.delete(runs.lease_key("r1"))             # the driver died in round 0
    _ledger_pending(fake_redis, "r1", range(1, 5001))
    s = summary.summarize(fake_redis, runs.get(fake_redis, "r1"))
    assert s.status == runs.CRASHED
    assert s.counts_known is False and s.unsettled_round == 0
    assert all(getattr(s, k) is None for k in ("roots", "complete", "pending", "failed", "in_flight", "dead"))
    from recovery.cli.common import counts_line
    assert counts_line(s) == "roots: unknown (round 0 not settled; run `recovery recover r1`)"
    monkey_client = (fake_redis, "redis://fake")
    import recovery.run as cli_run
    orig = cli_run.client_for
    cli_run.client_for = lambda url: monkey_client
    try:
        out = CliRunner().invoke(main, ["status", "r1"]).stdout
        listed = CliRunner().invoke(main, ["runs", "--json"]).stdout
        text = CliRunner().invoke(main, ["runs"]).stdout
    finally:
        cli_run.client_for = orig
    assert "-5000" not in out and "roots: unknown (round 0 not settled" in out
    row = json.loads(listed)["runs"][0]
    assert row["status"] == "crashed" and row["counts_known"] is False and row["roots"] is None
    assert "None" not in text and "roots unknown (round 0 not settled)" in text


def test_status_and_runs_agree_on_a_run_that_failed_in_spark(fake_redis):
    _create(fake_redis)
    runs.update(fake_redis, "r1", status=runs.ERROR, error="RuntimeError: open failed")
    s = summary.summarize(fake_redis, runs.get(fake_redis, "r1"))
    assert s.status == runs.status_of(runs.get(fake_redis, "r1")) == runs.ERROR


def test_component_tables_are_in_topological_order(fake_redis):
    lease = _create(fake_redis)
    stats = {"out": {"executed": 1}, "mid": {"executed": 1}, "src": {"roots": 1}}
    runs.update(fake_redis, "r1", lease.generation, stats=stats, settled_round=0, status=runs.COMPLETED,
                rounds=[{"round": 0, "components": stats}])
    assert list(summary.summarize(fake_redis, runs.get(fake_redis, "r1")).components) == ["src", "out", "mid"]
    rounds = [{"round": 1, "components": {"mid": {"executed": 2, "seconds": 0.5}, "q": {"emitted": 2}}},
              {"round": 2, "components": {"mid": {"executed": 1, "seconds": 0.25}}}]
    total = summary.sum_components([RoundRecord.from_json(r) for r in rounds], WF)
    assert list(total) == ["q", "mid"] and total["mid"].to_json() == {"executed": 3, "seconds": 0.75}


def test_recover_summary_table_is_labelled_by_its_rounds():
    from recovery.cli.common import components_title
    assert components_title([0]) == "components (round 0)"
    assert components_title([1, 2]) == "components (rounds 1-2, added up)"


def test_component_stats_and_failed_positions_are_typed_and_keep_their_json_as_reported():
    # counters as a task reports them: the first six, then those that applied, in that order,
    # and one this version does not know (kept as it is)
    reported = {"executed": 3, "acked": 2, "failed": 1, "emitted": 4, "roots": 3, "dead": 0,
                "bisect_runs": 2, "seconds": 0.25, "newer_counter": 7, "spill_bytes": 512}
    position = {"component": "split", "task": 2, "count": 5, "sample_error": None}
    s = summary.RunSummary(run_id="r", workflow="w", status="pending", round=1,
                           components={"split": reported, "other": {"seconds": 1.5, "executed": 2}},
                           failed_positions=[position])
    stats, pos = s.components["split"], s.failed_positions[0]
    assert isinstance(stats, summary.ComponentStats) and isinstance(pos, summary.FailedPosition)
    assert (stats.executed, stats.bisect_runs, stats.seconds, stats.spill_bytes, stats.trimmed) == (3, 2, 0.25, 512, 0)
    assert (pos.component, pos.task, pos.count, pos.sample_error) == ("split", 2, 5, None)
    out = json.dumps(s.to_json())
    assert json.dumps(s.to_json()["components"]) == json.dumps({"split": reported,
                                                              "other": {"seconds": 1.5, "executed": 2}})
    assert s.to_json()["failed_positions"] == [position]
    assert json.dumps(summary.RunSummary.from_json(json.loads(out)).to_json()) == out


def test_summed_counters_are_typed_and_spill_bytes_adds_them_up():
    wf = WF
    rounds = [{"round": 1, "components": {c.id: {"executed": 2, "seconds": 0.5, "spill_bytes": 10}
                                          for c in wf.components}},
              {"round": 2, "components": {wf.components[0].id: {"executed": 1, "seconds": 0.25}}}]
    total = summary.sum_components([RoundRecord.from_json(r) for r in rounds], wf)
    first = total[wf.components[0].id]
    assert (first.executed, first.seconds, first.spill_bytes) == (3, 0.75, 10)
    assert summary.spill_bytes(total) == 10 * len(wf.components)
