"""The postgres sink against a real PostgreSQL (the postgres_url fixture: a fresh database per
test). Runs go through recovery.testing with the real sink on the real Redis (the engine's own
task runner, no Spark: tests/integration/test_table_sinks.py runs the sink on Spark): the
columns a missing table gets, row and batch inputs, a schema-qualified table and a run column,
two attempts of one part at once, the database going away mid-run, the driver's checks, and
`clear`."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from recovery import testing
from recovery.api.components import Tuple
from recovery.cli import main
from recovery.connectors.postgres import PostgresSink
from recovery.connectors.sink_base import SinkTableError
from recovery.connectors.sinks import check_folders
from recovery.model.graph import ComponentContext, TaskMap
from recovery.model.workflow import SinkImpl, Workflow
from recovery.model.xml import parse as workflow_xml
from recovery.runtime import batch as batch_runtime
from recovery.tracking import runs
from tests.helpers import wait_for
from tests.tables import FIELDS, commit_rows, delta_bolt, expected, postgres_bolt, postgres_rows
from tests.tables import workflow_xml as write_xml

N = 120
FAST = {"recovery.retry.delay.period.ms": "0"}


def load(xml: Path):
    return workflow_xml.load(xml)


def run(wf, client, **kw) -> testing.LocalRun:
    return testing.run_local(wf, client, list_sinks=False, config=FAST, **kw)


def cli(redis_url: str, *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), env={"RECOVERY_REDIS_URL": redis_url}, catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def columns(url: str, table: str, schema: str = "public") -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s "
                            "AND table_name = %s ORDER BY ordinal_position", [schema, table]).fetchall()


def test_a_run_creates_the_table_from_the_values_and_writes_each_row_once(postgres_url, redis_client, tmp_path):
    wf = load(write_xml(tmp_path, postgres_bolt(postgres_url), n=N))
    r = run(wf, redis_client, run_id="p1")
    assert r.summary.status == "completed"
    assert columns(postgres_url, "events") == [("n", "bigint"), ("word", "text"), ("score", "double precision"),
                                               ("even", "boolean"), ("tags", "jsonb"), ("info", "jsonb")]
    assert postgres_rows(postgres_url) == expected(N)
    tasks = TaskMap.of(wf).task_ids("pg")
    commits = commit_rows(postgres_url)
    assert [(run_id, sink, task, rnd) for run_id, sink, task, rnd, _ in commits] == [("p1", "pg", t, 0) for t in tasks]
    assert sum(c[4] for c in commits) == N   # each part's row count


def test_batch_inputs_write_the_rows_row_inputs_write(postgres_url, redis_client, tmp_path):
    wf = load(write_xml(tmp_path, postgres_bolt(postgres_url), n=N, enrich="EnrichBatch"))
    assert batch_runtime.is_batch_sink(wf.component("pg"), wf)
    assert run(wf, redis_client).summary.status == "completed"
    assert postgres_rows(postgres_url) == expected(N)


def test_a_schema_qualified_existing_table_with_a_run_column_gets_the_rows_and_the_run_id(postgres_url, redis_client,
                                                                                         tmp_path):
    with psycopg.connect(postgres_url) as conn:
        conn.execute('CREATE SCHEMA "Audit"')
        conn.execute('CREATE TABLE "Audit"."Events" (id serial PRIMARY KEY, n numeric, word varchar(20), score real, '
                     'even boolean, tags text, info json, run text, written timestamptz DEFAULT now())')
    wf = load(write_xml(tmp_path, postgres_bolt(postgres_url, "Audit.Events", extra=' run-column="run"'), n=N))
    assert run(wf, redis_client, run_id="q1").summary.status == "completed"
    got = postgres_rows(postgres_url, "Audit.Events", drop=("id", "run", "written"))
    # the table's own types: numeric, varchar, real, text holding the list as JSON, json
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute('SELECT count(*), count(DISTINCT id), min(run), max(run) FROM "Audit"."Events"').fetchone() == \
            (N, N, "q1", "q1")
        assert conn.execute('SELECT tags, info FROM "Audit"."Events" WHERE n = 3').fetchone() == \
            ('["delta", "3"]', {"len": 3})
    assert sum(got.values()) == N
    assert commit_rows(postgres_url, "Audit") and not commit_rows_exist(postgres_url, "public")


def commit_rows_exist(url: str, schema: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT to_regclass(%s)", [f"{schema}.recovery_commits"]).fetchone() != (None,)


def a_part(url: str, n: int) -> PostgresSink:
    sink = PostgresSink(SinkImpl(type="postgres", params=(("url", url), ("table", "events"))), ".")
    sink.context = ComponentContext(Workflow(name="pg"), "pg", 7, TaskMap({"pg": 7}, {"pg": 1}), run_id="c1", round=0)
    sink.encoded = [sink.encode(Tuple(i, "enrich", "default", 1, [i, "w"], ("n", "word"), ())) for i in range(n)]
    return sink


def test_two_attempts_of_one_part_at_once_write_it_once(postgres_url):
    a_part(postgres_url, 1).write([{"n": -1, "word": "x"}])   # the tables exist (part c1/7/0 is this one)
    with psycopg.connect(postgres_url) as conn:
        conn.execute("DELETE FROM events")
        conn.execute("DELETE FROM recovery_commits")
    first, second = a_part(postgres_url, 50), a_part(postgres_url, 50)
    # the first attempt is inside its transaction, its commit row inserted, not committed yet
    with psycopg.connect(postgres_url) as holder:
        holder.execute("INSERT INTO recovery_commits (run_id, sink, task, round, target, rows) "
                       "VALUES ('c1', 'pg', 7, 0, 'public.events', 50)")
        errors: list[BaseException] = []

        def attempt() -> None:
            try:
                second.write(second.encoded)
            except BaseException as err:   # broad-except: the test thread hands it to the test
                errors.append(err)
        t = threading.Thread(target=attempt)
        t.start()

        def second_waits_on_the_key() -> bool:
            with psycopg.connect(postgres_url) as conn:
                return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND "
                                    "query LIKE 'INSERT INTO%%recovery_commits%%'").fetchone() == (1,)
        wait_for(second_waits_on_the_key, 60, "the second attempt to wait on the part's commit row")
        with holder.cursor() as cur, cur.copy("COPY events (n, word) FROM STDIN") as copy:
            for row in first.encoded:
                copy.write_row([row["n"], row["word"]])
        holder.commit()
        t.join()
    assert not errors
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT n) FROM events").fetchone() == (50, 50)
    assert [c[:4] for c in commit_rows(postgres_url)] == [("c1", "pg", 7, 0)]


def set_connections(server_url: str, database: str, allowed: bool) -> None:
    """Let clients connect to `database`, or not (and end its sessions): the database gone, for its clients."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS {str(allowed).lower()}')
        if not allowed:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [database])


GONE = '''
import psycopg
from tablecomps import Enrich


class EnrichThenStopTheDatabase(Enrich):
    """Enrich, whose task 0 first makes the sink's database refuse connections (test.server, test.database)."""

    def prepare(self, conf, context):
        if context.task_id == int(conf["test.task"]):
            with psycopg.connect(conf["test.server"], autocommit=True) as conn:
                conn.execute('ALTER DATABASE "%s" ALLOW_CONNECTIONS false' % conf["test.database"])
'''


def test_the_database_going_away_mid_run_fails_the_sinks_tuples_and_recover_writes_them_once_it_is_back(
        postgres_server, postgres_url, redis_client, tmp_path):
    database = postgres_url.rsplit("/", 1)[1]
    xml = write_xml(tmp_path, postgres_bolt(postgres_url), n=N, enrich="EnrichThenStopTheDatabase")
    xml.write_text(xml.read_text().replace("tablecomps:EnrichThenStopTheDatabase", "gonecomps:EnrichThenStopTheDatabase"))
    (tmp_path / "gonecomps.py").write_text(GONE)
    wf = load(xml)
    enrich = wf.component("enrich")
    wf = wf.model_copy(update={"components": tuple(c if c.id != "enrich" else enrich.model_copy(update={"config": (
        ("test.server", postgres_server), ("test.database", database),
        ("test.task", str(TaskMap.of(wf).task_ids("enrich")[0])))}) for c in wf.components)})
    try:
        r = run(wf, redis_client, run_id="gone")
        # the run went on; the sink's tuples failed at the sink, queued for recovery
        assert r.summary.status == "pending"
        failed = r.failed_tuples()
        assert {t.component for t in failed} == {"pg"} and len(failed) == N
        assert all("sink 'pg' (postgres): cannot connect to" in t.error and "not currently accepting connections"
                   in t.error for t in failed)
        set_connections(postgres_server, database, True)
        testing.recover_local(r)
    finally:
        set_connections(postgres_server, database, True)
    assert r.summary.status == "completed"
    assert postgres_rows(postgres_url) == expected(N)
    assert {c[3] for c in commit_rows(postgres_url)} == {1}   # written by the recovery round


# --- the driver's checks and clear -----------------------------------------------------------------
def test_a_table_whose_columns_do_not_match_the_fields_is_refused_naming_table_and_columns(postgres_url, tmp_path):
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE events (n bigint, other text, tags jsonb)")
    wf = load(write_xml(tmp_path, postgres_bolt(postgres_url), n=N))
    with pytest.raises(SinkTableError) as info:
        check_folders(wf, "r")
    assert str(info.value).startswith("sink 'pg' (postgres): table public.events has no columns word, score, even, "
                                      "info for the input's fields (its columns: n, other, tags)")
    run_col = load(write_xml(tmp_path, postgres_bolt(postgres_url, extra=' run-column="run"'), n=N))
    with psycopg.connect(postgres_url) as conn:
        conn.execute("ALTER TABLE events ADD word text, ADD score float8, ADD even boolean, ADD info jsonb")
    check_folders(wf, "r")
    with pytest.raises(SinkTableError, match=r"has no column run for the input's fields"):
        check_folders(run_col, "r")


def test_a_missing_schema_is_refused_before_the_run(postgres_url, tmp_path):
    with pytest.raises(SinkTableError, match=r"^sink 'pg' \(postgres\): schema 'nowhere' of table nowhere.events "
                                             r"does not exist in postgresql://"):
        check_folders(load(write_xml(tmp_path, postgres_bolt(postgres_url, "nowhere.events"), n=N)), "r")


def test_clear_keeps_the_rows_drops_the_runs_commit_rows_and_a_rerun_of_the_id_writes_again(
        postgres_url, redis_url, redis_client, tmp_path):
    wf = load(write_xml(tmp_path, postgres_bolt(postgres_url) + delta_bolt(), n=N))
    other = run(wf, redis_client, run_id="other")
    assert run(wf, redis_client, run_id="again").summary.status == other.summary.status == "completed"
    assert sum(postgres_rows(postgres_url).values()) == 2 * N
    code, out, err = cli(redis_url, "clear", "again", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert runs.record_key("again") in result["removed"]["again"]
    tables = {t["sink"]: t for t in result["tables"]["again"]}
    assert tables["pg"]["rows_kept"] and tables["pg"]["commit_rows_removed"] == 2
    assert tables["pg"]["commit_table"] == "public.recovery_commits"
    assert "rows in table events kept" in tables["pg"]["note"]
    assert tables["lake"]["rows_kept"] and "submitting again under run id again is refused" in tables["lake"]["note"]
    # user rows stay; only this run's commit rows went
    assert sum(postgres_rows(postgres_url).values()) == 2 * N
    assert {c[0] for c in commit_rows(postgres_url)} == {"other"}
    # a rerun of the id writes again (here without the Delta sink, which refuses the id)
    pg_only = load(write_xml(tmp_path / "pg", postgres_bolt(postgres_url), n=N))
    assert run(pg_only, redis_client, run_id="again").summary.status == "completed"
    assert sum(postgres_rows(postgres_url).values()) == 3 * N
    code, out, err = cli(redis_url, "clear", "again")
    assert code == 0 and out.startswith("cleared again: ") and "rows in table events kept" in out, (out, err)
    assert "commit rows of the run removed from public.recovery_commits" in out


def test_clear_refuses_while_the_database_cannot_be_reached_and_force_clears_the_keys_only(
        postgres_server, postgres_url, redis_url, redis_client, tmp_path):
    wf = load(write_xml(tmp_path, postgres_bolt(postgres_url), n=N))
    assert run(wf, redis_client, run_id="far").summary.status == "completed"
    database = postgres_url.rsplit("/", 1)[1]
    before = {k: redis_client.dump(k) for k in redis_client.keys("*")}
    set_connections(postgres_server, database, False)
    try:
        code, out, err = cli(redis_url, "clear", "far")
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith("error: sink 'pg' (postgres): cannot connect to postgresql://") and \
            "nothing was cleared" in err and "--force" in err
        assert {k: redis_client.dump(k) for k in redis_client.keys("*")} == before   # nothing removed
        code, out, err = cli(redis_url, "clear", "--all")
        assert code == 2 and "nothing was cleared" in err, (out, err)
        assert {k: redis_client.dump(k) for k in redis_client.keys("*")} == before
        code, out, err = cli(redis_url, "clear", "far", "--force")
        assert code == 0 and "commit rows stayed" in out, (out, err)
        assert not redis_client.exists(runs.record_key("far"))
    finally:
        set_connections(postgres_server, database, True)
    assert [c[0] for c in commit_rows(postgres_url)] == ["far", "far"]   # as the output said
    assert sum(postgres_rows(postgres_url).values()) == N


def test_the_fields_are_the_columns_written(postgres_url, redis_client, tmp_path):
    """The columns a run writes are the input's fields (FIELDS), in that order, no more."""
    wf = load(write_xml(tmp_path, postgres_bolt(postgres_url), n=5))
    assert run(wf, redis_client).summary.status == "completed"
    assert [c for c, _ in columns(postgres_url, "events")] == list(FIELDS)


def test_a_part_of_many_chunks_is_copied_in_its_one_transaction_and_counted_once(postgres_url, redis_client,
                                                                                 tmp_path, monkeypatch):
    """Chunks stream into the part's transaction as they come: the rows and the part's commit
    row, with the part's whole row count, are committed together."""
    from recovery.connectors.sink_base import StreamingSink
    monkeypatch.setattr(StreamingSink, "chunk_records", 7)
    wf = load(write_xml(tmp_path, postgres_bolt(postgres_url), n=N))
    r = run(wf, redis_client, run_id="p7")
    assert r.summary.status == "completed"
    assert postgres_rows(postgres_url) == expected(N)
    commits = commit_rows(postgres_url)
    assert len(commits) == len(TaskMap.of(wf).task_ids("pg")) and sum(c[4] for c in commits) == N
