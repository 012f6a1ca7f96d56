"""`recovery trace` on a real Redis and Spark: a bolt that fails every poison line makes their
roots dead after three attempts; the bolt is fixed on disk, `dead --requeue` and
`recover --code-changed` complete them; the trace of one of those roots, by its id and by its
message id, shows its three failures, the rounds that replayed it, the requeue and its
completion. Bad input is one line, exit 2; `clear` leaves nothing of the run."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

import recovery
from recovery.cli import main
from recovery.tracking import keys
from recovery.tracking import queue as failed_queue
from tests.integration.conftest import sink_records

WORKFLOW = """<workflow xmlns="urn:recovery:workflow:1" name="traced">
  <config>
    <property name="recovery.max.attempts" value="3"/>
    <property name="recovery.retry.delay.period.ms" value="0"/>
  </config>
  <spout id="lines" parallelism="1">
    <source type="file" path="lines.txt" format="text"/>
    <stream fields="line"/>
  </spout>
  <bolt id="check" parallelism="2" class="traced_components:Check">
    <input from="lines" grouping="shuffle"/>
    <stream fields="line"/>
  </bolt>
  <bolt id="out" parallelism="1">
    <sink type="jsonl" path="out/lines"/>
    <input from="check" grouping="global"/>
  </bolt>
</workflow>
"""
BOLT = '''from recovery import BasicBolt

FIXED = {fixed}


class Check(BasicBolt):
    def process(self, tup):
        if not FIXED and tup.values[0].startswith("poison"):
            raise ValueError("poison line: " + tup.values[0])
        self.emit([tup.values[0]])
'''
LINES = [f"line {i}" for i in range(20)] + ["poison <b>one</b>", "poison two"]
TRACE_KEYS = {"run_id", "root", "message_id", "state", "reason", "failures", "replays", "requeued", "dead_letter"}


def workflow(tmp_path: Path) -> Path:
    (tmp_path / "traced_components.py").write_text(BOLT.format(fixed=False))
    (tmp_path / "lines.txt").write_text("".join(line + "\n" for line in LINES))
    xml = tmp_path / "traced.xml"
    xml.write_text(WORKFLOW)
    return xml


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_trace_of_a_root_that_died_was_requeued_with_fixed_code_and_completed(spark, redis_url, redis_client, tmp_path):
    xml = workflow(tmp_path)
    run = recovery.submit(str(xml), spark=spark, redis=redis_url, run_id="traced-1")
    assert run.summary is not None and run.summary.status == "pending"
    run = recovery.Run.get(run.id, redis=redis_url, spark=spark)
    assert run.recover().status == "dead"
    dead = run.dead_letters()
    assert sorted(d.values[0] for d in dead) == ["poison <b>one</b>", "poison two"]
    letter = next(d for d in dead if d.values[0] == "poison two")
    root = letter.roots[0]

    died = run.trace(root)
    assert (died.state, died.reason) == ("dead", "retries exhausted")
    assert [(f.component, f.round, f.attempt) for f in died.failures] == [("check", 0, 1), ("check", 1, 2), ("check", 2, 3)]
    assert all(f.error == "ValueError: poison line: poison two" for f in died.failures), died.failures
    assert [r.round for r in died.replays] == [1, 2] and died.requeued == []
    assert died.dead_letter is not None and died.dead_letter["key"] == f"check:{letter.task}:{letter.id}"
    offset = (tmp_path / "lines.txt").read_bytes().index(b"poison two")
    assert died.message_id == f"lines.txt:{offset}"

    # the cause fixed on disk, the dead letters requeued and recovered with the new code
    (tmp_path / "traced_components.py").write_text(BOLT.format(fixed=True))
    code, out, err = cli("dead", run.id, "--requeue", "--json", "--redis", redis_url)
    assert code == 0 and json.loads(out)["requeued"] == 2, err
    assert run.recover(code_changed=True).status == "completed"
    assert sorted(sink_records(tmp_path / "out" / "lines")) == sorted(json.dumps({"line": v}) for v in LINES)

    code, out, err = cli("trace", run.id, str(root), "--json", "--redis", redis_url)
    assert code == 0, err
    shown = json.loads(out)
    assert set(shown) >= TRACE_KEYS
    assert (shown["run_id"], shown["root"], shown["state"], shown["reason"]) == (run.id, root, "complete", None)
    assert [(f["component"], f["task"], f["round"], f["attempt"]) for f in shown["failures"]] == \
        [("check", letter.task, 0, 1), ("check", letter.task, 1, 2), ("check", letter.task, 2, 3)]
    assert set(shown["failures"][0]) == {"component", "task", "round", "attempt", "error"}
    assert [r["round"] for r in shown["replays"]] == [1, 2, 3]
    assert set(shown["replays"][0]) == {"round", "component", "task"}
    assert len(shown["requeued"]) == 1 and shown["dead_letter"] is None
    assert shown["message_id"] == f"lines.txt:{offset}"
    # the same root by its message id, and the text form
    code, by_message, err = cli("trace", run.id, "--message", f"lines.txt:{offset}", "--json", "--redis", redis_url)
    assert code == 0 and json.loads(by_message) == shown, err
    code, text, err = cli("trace", run.id, str(root), "--redis", redis_url)
    assert code == 0 and "state: complete" in text and "failures (3):" in text and "requeued: " in text, err
    # a notebook's view is escaped
    other = next(d for d in dead if d.values[0] != "poison two")
    page = run.trace(other.roots[0])._repr_html_()
    assert "poison &lt;b&gt;one&lt;/b&gt;" in page and "<b>one" not in page

    run.clear()
    assert not list(redis_client.scan_iter(match=keys.run_pattern(run.id)))


def test_trace_refuses_bad_input_in_one_line(spark, redis_url, redis_client, tmp_path):
    xml = workflow(tmp_path)
    run = recovery.submit(str(xml), spark=spark, redis=redis_url, run_id="traced-2")
    before = {k: redis_client.dump(k) for k in redis_client.scan_iter()}
    for args, says in [
            (["trace", "no-such-run", "12"], "no run 'no-such-run'"),
            (["trace", run.id, "abc"], "invalid root 'abc'"),
            (["trace", run.id, "0"], "invalid root '0'"),
            (["trace", run.id, "12345"], f"run {run.id} holds nothing of root 12345"),
            (["trace", run.id, "--message", "lines.txt"], "invalid message id 'lines.txt'"),
            (["trace", run.id, "--message", "lines.txt:0"], f"run {run.id} holds nothing of message 'lines.txt:0'"),
            (["trace", run.id], "give ROOT or --message VALUE"),
            (["trace", run.id, "12", "--message", "lines.txt:0"], "give ROOT or --message VALUE")]:
        code, out, err = cli(*args, "--redis", redis_url)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and says in err, (args, err)
    assert {k: redis_client.dump(k) for k in redis_client.scan_iter()} == before
    run.clear()


def test_trace_tree_re_derives_the_roots_tuples_in_a_sandbox_and_checks_them_against_the_run(
        spark, redis_url, redis_client, tmp_path):
    xml = workflow(tmp_path)
    run = recovery.submit(str(xml), spark=spark, redis=redis_url, run_id="traced-3")
    run = recovery.Run.get(run.id, redis=redis_url, spark=spark)
    queued = [t for comp, task in failed_queue.positions(redis_client, run.id)
              for t in failed_queue.read(redis_client, run.id, comp, task) if t.values == ["poison two"]]
    assert len(queued) == 1
    failed = queued[0]
    root = failed.roots[0]
    before = {k: redis_client.dump(k) for k in redis_client.scan_iter()}
    out_before = sorted(sink_records(tmp_path / "out" / "lines"))

    shown = run.trace(root, tree=True).to_json()
    nodes = {(n["component"], n["id"]): n for n in shown["tree"]}
    assert set(n["component"] for n in shown["tree"]) == {"lines", "check"}   # the bolt fails it still
    spout = nodes[("lines", root)]
    assert spout["parent"] is None
    at_check = nodes[("check", failed.id)]
    assert (at_check["task"], at_check["stream"], at_check["parent"], at_check["recorded"]) == \
        (failed.task, "default", root, True)
    assert shown["nondeterministic"] == []
    # nothing of the run was written: its keys and its sink as they were
    assert {k: redis_client.dump(k) for k in redis_client.scan_iter()} == before
    assert sorted(sink_records(tmp_path / "out" / "lines")) == out_before

    # fixed, the tree reaches the sink with the record it would write
    (tmp_path / "traced_components.py").write_text(BOLT.format(fixed=True))
    code, out, err = cli("trace", run.id, str(root), "--tree", "--json", "--redis", redis_url)
    assert code == 0, err
    tree = json.loads(out)["tree"]
    sink = [n for n in tree if n["component"] == "out"]
    assert len(sink) == 1 and sink[0]["records"] == [["poison two"]] and sink[0]["recorded"] is None
    assert {n["id"]: n["parent"] for n in tree}[sink[0]["parent"]] == root
    assert {k: redis_client.dump(k) for k in redis_client.scan_iter()} == before
    run.clear()


PICKING = """<workflow xmlns="urn:recovery:workflow:1" name="picking">
  <spout id="lines" parallelism="1">
    <source type="file" path="lines.txt" format="text"/>
    <stream fields="line"/>
  </spout>
  <bolt id="pick" parallelism="1" class="picking_components:Pick">
    <input from="lines" grouping="shuffle"/>
    <stream fields="word"/>
  </bolt>
  <bolt id="down" parallelism="3" class="picking_components:Down">
    <input from="pick" grouping="fields" fields="word"/>
  </bolt>
</workflow>
"""
PICK = '''import os

from recovery import BasicBolt

MARK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "picked-again")


class Pick(BasicBolt):
    """Not deterministic: what it emits depends on a file beside it, not only on its input."""
    def process(self, tup):
        self.emit([{second!r} if os.path.exists(MARK) else {first!r}])


class Down(BasicBolt):
    def process(self, tup):
        raise ValueError("down")
'''


def test_trace_tree_names_a_component_that_made_other_tuples_from_the_same_input(spark, redis_url, redis_client,
                                                                                 tmp_path):
    from recovery.tracking import ids
    words = [f"w{i}" for i in range(20)]
    first = words[0]
    second = next(w for w in words if ids.fields_hash([w]) % 3 != ids.fields_hash([first]) % 3)
    (tmp_path / "picking_components.py").write_text(PICK.format(first=first, second=second))
    (tmp_path / "lines.txt").write_text("only line\n")
    (tmp_path / "picking.xml").write_text(PICKING)
    run = recovery.submit(str(tmp_path / "picking.xml"), spark=spark, redis=redis_url, run_id="picking-1")
    [(component, _, n)] = failed_queue.counts(redis_client, run.id)
    assert (component, n) == ("down", 1)
    [queued] = failed_queue.read(redis_client, run.id, "down", failed_queue.positions(redis_client, run.id)[0][1])
    root_id = queued.roots[0]
    run = recovery.Run.get(run.id, redis=redis_url, spark=spark)
    assert run.trace(root_id, tree=True).nondeterministic == []   # as it was: the tree agrees
    (tmp_path / "picked-again").write_text("")
    again = run.trace(root_id, tree=True)
    assert again.nondeterministic == ["pick"]
    at_down = [n for n in again.tree or [] if n["component"] == "down"]
    assert len(at_down) == 1 and at_down[0]["recorded"] is None and at_down[0]["task"] != queued.task
    run.clear()
