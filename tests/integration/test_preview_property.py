"""Preview against recover, as a property: on random failure patterns (which bolts fail, how
often, for how many attempts, with how many attempts allowed), the sandboxed round says what
the next `recover` round then does: the same tuples fail again (same position, id, error, dead
or queued), the others succeed, and each sink gets as many records as the preview counted,
its sample among them."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from recovery.jobs import recover, sandbox
from recovery.model.failed import FailedTuple
from recovery.tracking import queue as failed_queue
from tests.integration.conftest import submit

XML = """<workflow xmlns="urn:recovery:workflow:1" name="fork">
  <spout id="lines" parallelism="2">
    <source type="file" path="data/lines.txt" format="text"/>
    <stream fields="line"/>
  </spout>
  <bolt id="upper" parallelism="2" class="fork.bolts:Upper">
    <input from="lines" grouping="shuffle"/>
    <stream fields="line"/>
  </bolt>
  <bolt id="measure" parallelism="2" class="fork.bolts:Measure">
    <input from="upper" grouping="fields" fields="line"/>
    <stream fields="line size"/>
  </bolt>
  <bolt id="archive" parallelism="1">
    <sink type="jsonl" path="out/archive"/>
    <input from="upper" grouping="shuffle"/>
  </bolt>
  <bolt id="sizes" parallelism="2">
    <sink type="jsonl" path="out/sizes"/>
    <input from="measure" grouping="shuffle"/>
  </bolt>
</workflow>
"""

BOLTS = '''from recovery import BasicBolt


class Upper(BasicBolt):
    def process(self, tup):
        self.emit([tup.values[0].upper()])


class Measure(BasicBolt):
    def process(self, tup):
        self.emit([tup.values[0], len(tup.values[0])])
'''

WORDS = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen", "ibis", "jay", "kiwi", "lynx"]
_examples = itertools.count()

failure = st.one_of(
    st.none(),
    st.tuples(st.just("transient"), st.sampled_from(["0.2", "0.5"]), st.integers(1, 2)),
    st.tuples(st.just("permanent"), st.sampled_from(["0.2", "0.5"]), st.just(1)),
)


def fork_workflow(folder: Path, lines: list[str]) -> Path:
    (folder / "fork").mkdir(parents=True)
    (folder / "fork" / "__init__.py").write_text("")
    (folder / "fork" / "bolts.py").write_text(BOLTS)
    (folder / "data").mkdir()
    (folder / "data" / "lines.txt").write_text("\n".join(lines) + "\n")
    (folder / "fork.xml").write_text(XML)
    return folder / "fork.xml"


def outcome(tup: FailedTuple) -> tuple:
    return tup.component, tup.task, tup.id, tup.dead, tup.error


def round_records(folder: Path, run_id: str, round_no: int, sink: str) -> list[dict]:
    return [json.loads(line) for part in sorted(folder.glob(f"part-{run_id}-r{round_no:04d}-{sink}-t*.jsonl"))
            for line in part.read_text().splitlines() if line]


@settings(max_examples=5, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@example(upper=("transient", "0.5", 1), measure=("permanent", "0.2", 1), attempts=2, n=24)
@example(upper=("permanent", "0.2", 1), measure=("transient", "0.5", 2), attempts=3, n=24)
@given(upper=failure, measure=failure, attempts=st.integers(2, 3), n=st.integers(6, 24))
def test_a_preview_says_what_the_next_recover_round_does(spark, redis_url, redis_client, tmp_path,
                                                         upper, measure, attempts, n):
    folder = tmp_path / f"example-{next(_examples)}"
    lines = [f"{WORDS[i % len(WORDS)]} {i}" for i in range(n)]
    config = {"recovery.max.attempts": str(attempts), "recovery.retry.delay.period.ms": "10"}
    for comp, fail in (("upper", upper), ("measure", measure)):
        if fail is not None:
            mode, rate, times = fail
            config.update({f"recovery.inject.{comp}.component": comp, f"recovery.inject.{comp}.mode": mode,
                           f"recovery.inject.{comp}.rate": rate, f"recovery.inject.{comp}.attempts": str(times)})
    s = submit(spark, redis_url, redis_client, fork_workflow(folder, lines), config)
    dead_before = {outcome(t) for t in failed_queue.dead_letters(redis_client, s.run_id)}

    previewed = sandbox.run_sandboxed(spark, redis_client, redis_url, s.run_id)
    r = recover.recover(spark, redis_client, redis_url, s.run_id, max_rounds=1)

    queued = sum(p.count for p in s.failed_positions)
    assert len(previewed.replayed) == queued and r.rounds == (1 if queued else 0)
    after = [t for c, task in failed_queue.positions(redis_client, s.run_id)
             for t in failed_queue.read(redis_client, s.run_id, c, task)]
    after_dead = {outcome(t) for t in failed_queue.dead_letters(redis_client, s.run_id)} - dead_before
    assert sorted({outcome(t) for t in previewed.failures}) == sorted({outcome(t) for t in after} | after_dead)
    for sink in previewed.sinks:
        written = round_records(folder / "out" / sink.component, s.run_id, previewed.round, sink.component)
        assert sink.records == len(written), sink.component
        assert all(rec in written for rec in sink.sample)
    if not queued:
        assert previewed.sinks == [] and previewed.failures == []
