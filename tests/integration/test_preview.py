"""`recovery preview` end to end on a real Spark and Redis: a bolt that always fails, previewed,
recovered until dead, fixed on disk, previewed again from its dead letters, and recovered; every
preview leaves each Redis key and every sink file byte for byte as it was."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from recovery.cli import main
from recovery.jobs import dead_letters, recover
from recovery.jobs import preview as jobs_preview
from tests.integration.conftest import sink_records, submit
from tests.integration.test_sandbox import folder_bytes, redis_dump

LINES = ["alpha", "bad beta", "gamma", "bad delta", "epsilon", "bad zeta", "eta", "theta"]

XML = """<workflow xmlns="urn:recovery:workflow:1" name="shout">
  <config>
    <property name="recovery.max.attempts" value="2"/>
    <property name="recovery.retry.delay.period.ms" value="10"/>
  </config>
  <spout id="lines" parallelism="2">
    <source type="file" path="data/lines.txt" format="text"/>
    <stream fields="line"/>
  </spout>
  <bolt id="upper" parallelism="2" class="shout.bolts:Upper">
    <input from="lines" grouping="shuffle"/>
    <stream fields="line"/>
  </bolt>
  <bolt id="out" parallelism="2">
    <sink type="jsonl" path="out/shout"/>
    <input from="upper" grouping="shuffle"/>
  </bolt>
</workflow>
"""

BUGGY = '''from recovery import BasicBolt


class Upper(BasicBolt):
    def process(self, tup):
        if tup.values[0].startswith("bad"):
            raise ValueError("cannot shout " + tup.values[0])
        self.emit([tup.values[0].upper()])
'''

FIXED = '''from recovery import BasicBolt


class Upper(BasicBolt):
    def process(self, tup):   # fixed: every line shouts
        self.emit([tup.values[0].upper()])
'''


def shout_workflow(folder: Path) -> Path:
    (folder / "shout").mkdir(parents=True)
    (folder / "shout" / "__init__.py").write_text("")
    (folder / "shout" / "bolts.py").write_text(BUGGY)
    (folder / "data").mkdir()
    (folder / "data" / "lines.txt").write_text("\n".join(LINES) + "\n")
    xml = folder / "shout.xml"
    xml.write_text(XML)
    return xml


def previewed(spark, client, redis_url, run_id, folder: Path, **options) -> jobs_preview.Preview:
    """A preview, checked to leave every key and every file as they were."""
    keys_before, files_before = redis_dump(client), folder_bytes(folder)
    p = jobs_preview.preview(spark, client, redis_url, run_id, **options)
    assert redis_dump(client) == keys_before
    assert folder_bytes(folder) == files_before
    return p


def test_preview_of_a_permanent_failure_then_of_its_fix_says_what_recover_does(spark, redis_url, redis_client,
                                                                               tmp_path):
    xml = shout_workflow(tmp_path)
    s = submit(spark, redis_url, redis_client, xml)
    bad = sorted(line for line in LINES if line.startswith("bad"))
    assert sum(p.count for p in s.failed_positions) == len(bad)

    # the bolt still fails: every queued tuple fails again, with its error; the sink gets nothing
    p = previewed(spark, redis_client, redis_url, s.run_id, tmp_path)
    assert not p.code_changed and p.tuples == len(bad)
    assert sum(pos.would_fail for pos in p.positions) == len(bad)
    assert all(pos.would_succeed == 0 for pos in p.positions)
    errors = sorted(e.error for pos in p.positions for e in pos.errors)
    assert errors == sorted(f"ValueError: cannot shout {line}" for line in bad)
    assert {e.count for pos in p.positions for e in pos.errors} == {1}
    assert [(x.component, x.records) for x in p.sinks] == [("out", 0)]

    # one position's first tuple only; a component the run does not have is one line, exit 2
    positions = {(pos.component, pos.task) for pos in p.positions}
    one = previewed(spark, redis_client, redis_url, s.run_id, tmp_path, component="upper", limit=1)
    assert one.tuples == len(positions) and all(pos.tuples == 1 for pos in one.positions)
    refused = CliRunner().invoke(main, ["preview", s.run_id, "--component", "nope", "--redis", redis_url])
    assert refused.exit_code == 2 and refused.output == f"error: run {s.run_id} has no component 'nope'\n"

    r = recover.recover(spark, redis_client, redis_url, s.run_id)
    assert r.status == "dead" and r.dead_tuples == len(bad)
    written = sink_records(tmp_path / "out" / "shout")

    # nothing queued now: the command says so (exit 0), and its JSON has the keys scripts read
    nothing = previewed(spark, redis_client, redis_url, s.run_id, tmp_path)
    assert nothing.tuples == 0 and nothing.positions == [] and "nothing queued" in (nothing.message or "")
    said = CliRunner().invoke(main, ["preview", s.run_id, "--redis", redis_url])
    assert said.exit_code == 0 and said.output == f"run {s.run_id} has nothing queued: there is nothing to preview\n"
    as_json = CliRunner().invoke(main, ["preview", s.run_id, "--redis", redis_url, "--json"])
    obj = json.loads(as_json.stdout)
    assert as_json.exit_code == 0 and {"run_id", "code_changed", "positions", "sinks"} <= set(obj)
    assert obj["positions"] == [] and obj["sinks"] == [] and obj["run_id"] == s.run_id

    # fixed on disk: the dead letters, as if requeued, would now succeed, and the sink would get them
    (tmp_path / "shout" / "bolts.py").write_text(FIXED)
    fixed = previewed(spark, redis_client, redis_url, s.run_id, tmp_path, dead=True)
    assert fixed.code_changed and fixed.tuples == len(bad)
    assert [(pos.would_succeed, pos.would_fail, pos.errors) for pos in fixed.positions] == \
        [(pos.tuples, 0, []) for pos in fixed.positions]
    [sink] = fixed.sinks
    assert sink.component == "out" and sink.records == len(bad)
    assert sorted(rec["line"] for rec in sink.sample) == sorted(line.upper() for line in bad)

    # requeue and recover with the new code: the sink gets exactly those records
    assert dead_letters.requeue_dead(redis_client, s.run_id) == len(bad)
    plan = recover.prepare(redis_client, s.run_id, code_changed=True)
    done = recover.run(spark, redis_client, redis_url, plan)
    assert done.status == "completed"
    now = sink_records(tmp_path / "out" / "shout")
    added = sorted(set(now) - set(written))
    assert len(now) == len(written) + len(bad)
    assert added == sorted(json.dumps(rec, sort_keys=True) for rec in sink.sample)


def test_preview_of_a_run_this_redis_does_not_know_is_one_line_exit_2(redis_url):
    result = CliRunner().invoke(main, ["preview", "no-such-run", "--redis", redis_url])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == ["error: no run 'no-such-run' in this Redis (see `recovery runs`)"]


def test_a_preview_leaves_a_postgres_table_and_a_delta_table_as_they_were(postgres_url, redis_client, tmp_path):
    """The sinks into a user's tables are captured too: the table's rows, its commit rows and the
    Delta log stay as they were, and each sink's count is what the round would write. (In
    process, with the test kit's engine, on the real Redis and PostgreSQL.)"""
    from recovery import testing
    from recovery.jobs import sandbox
    from recovery.model.xml import parse as workflow_xml
    from recovery.runtime import task
    from tests.tables import commit_rows, delta_bolt, postgres_bolt, postgres_rows
    from tests.tables import workflow_xml as tables_xml

    xml = tables_xml(tmp_path, postgres_bolt(postgres_url) + delta_bolt(), n=60,
                     config={"recovery.inject.e.component": "enrich", "recovery.inject.e.rate": "0.1",
                             "recovery.retry.delay.period.ms": "0"})
    run = testing.run_local(workflow_xml.load(xml), redis_client, list_sinks=False)
    assert run.summary.failed > 0
    rows, commits = postgres_rows(postgres_url), commit_rows(postgres_url)
    keys_before, files_before = redis_dump(redis_client), folder_bytes(tmp_path)

    with task.injected_client(run.redis_url, redis_client):
        result = sandbox.run_sandboxed(testing.LocalSession(), redis_client, run.redis_url, run.run_id)

    assert postgres_rows(postgres_url) == rows and commit_rows(postgres_url) == commits
    assert redis_dump(redis_client) == keys_before and folder_bytes(tmp_path) == files_before
    assert result.failures == []   # a transient failure: its replay succeeds
    assert sorted((s.component, s.records) for s in result.sinks) == [("lake", len(result.replayed)),
                                                                      ("pg", len(result.replayed))]
