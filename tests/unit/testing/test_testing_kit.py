"""recovery.testing, the public test kit: its sentinels, ListSink across rounds and runs,
crash resume through the kit, output comparison, and the README's example."""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from recovery import BasicBolt, testing
from recovery.model.workflow import ClassImpl, Component, Input, StreamDef, Workflow
from recovery.runtime import task
from recovery.testing import ABORT, CRASH, EOF
from recovery.tracking import keys, runs

ROOT = Path(__file__).resolve().parents[3]
NO_BACKOFF = {"recovery.retry.delay.period.ms": "0"}


class Upper(BasicBolt):
    def process(self, tup):
        self.emit([tup["word"].upper()])


class Numbered(BasicBolt):
    """Emits each word with how many tuples its task saw before it."""

    def prepare(self, conf, context):
        self.seen = 0

    def process(self, tup):
        self.emit([tup["word"], self.seen])
        self.seen += 1


def pipeline(spout_parallelism: int = 1) -> Workflow:
    """words (TestingSpout) -> upper -> out (ListSink)."""
    return Workflow(name="kit", components=(
        Component(id="words", kind="spout", parallelism=spout_parallelism,
                  impl=ClassImpl(ref=testing.TESTING_SPOUT), streams=(StreamDef(fields=("word",)),)),
        Component(id="upper", kind="bolt", parallelism=2, impl=ClassImpl(ref=f"{__name__}:Upper"),
                  streams=(StreamDef(fields=("word",)),), inputs=(Input(source="words"),)),
        Component(id="out", kind="bolt", impl=ClassImpl(ref=testing.LIST_SINK),
                  inputs=(Input(source="upper"),))))


def words(run: testing.LocalRun) -> list[str]:
    return sorted(v[0] for v in run.sinks["out"])


def test_a_failure_free_run_completes_with_the_engines_summary(fake_redis):
    run = testing.run_local(pipeline(2), fake_redis, inputs={"words": ["a", "b", "c"]})
    assert run.interrupted is None and run.status == runs.COMPLETED
    assert words(run) == ["A", "B", "C"]
    s = run.summary
    assert (s.status, s.roots, s.complete, s.pending, s.failed_positions) == \
        ("completed", 3, 3, 0, [])
    assert s.components["upper"].acked == 3 and s.components["words"].roots == 3
    # the injected client is the run's only while it runs: nothing leaks into later tests
    assert run.redis_url not in task._clients


def test_abort_fails_the_spout_task_and_the_run_resumes_past_it(fake_redis):
    items = ["a", "b", ABORT, "c"]
    run = testing.run_local(pipeline(), fake_redis, inputs={"words": items})
    assert run.interrupted == "error" and run.status == runs.ERROR
    assert "TaskAborted: ABORT: TestingSpout 'words' reached its item 2" in run.error
    assert run.summary.counts_known is False and run.sinks["out"] == []   # nothing committed
    testing.recover_local(run)
    assert run.interrupted is None and run.summary.resumed is True
    assert run.status == runs.COMPLETED and words(run) == ["A", "B", "C"]
    testing.assert_same_output(run, testing.failure_free_output(pipeline(), inputs={"words": items}))


def test_abort_fires_once_per_run_and_again_in_another_run(fake_redis):
    wf = testing.feed(pipeline(), "words", ["a", ABORT])
    first = testing.run_local(wf, fake_redis, recover=True)
    assert first.status == runs.COMPLETED and words(first) == ["A"]
    second = testing.run_local(wf, fake_redis)
    assert second.interrupted == "error"
    assert fake_redis.smembers(testing.fired_key(second.run_id)) == {b"words:1"}


def test_crash_stops_the_driver_mid_round_and_recover_resumes_it_exactly(fake_redis):
    # two spout tasks: task 0 (items 0, 2) commits, task 1 (items 1, 3) dies at CRASH
    items = ["a", CRASH, "b", "c"]
    run = testing.run_local(pipeline(2), fake_redis, inputs={"words": items})
    assert run.interrupted == "crash" and "CRASH: TestingSpout" in run.error and "reached its item 1" in run.error
    assert run.status == runs.CRASHED
    done = fake_redis.hkeys(keys.task_done(run.run_id, 0))
    assert done == [b"words:0"]                      # what committed before the crash stays
    assert run.summary.counts_known is False and run.summary.unsettled_round == 0
    testing.recover_local(run)
    assert run.summary.resumed is True and run.status == runs.COMPLETED
    assert run.summary.roots == 3 and run.summary.complete == 3
    assert words(run) == ["A", "B", "C"]
    testing.assert_same_output(run, testing.failure_free_output(pipeline(2), inputs={"words": items}))


def test_run_local_with_recover_resumes_a_crash_by_itself(fake_redis):
    run = testing.run_local(pipeline(), fake_redis, inputs={"words": ["a", CRASH, "b"]}, recover=True)
    assert run.interrupted is None and run.status == runs.COMPLETED and words(run) == ["A", "B"]


def test_eof_ends_the_spout_even_with_items_after_it(fake_redis):
    run = testing.run_local(pipeline(2), fake_redis, inputs={"words": ["a", "b", EOF, "c", "d"]})
    assert run.status == runs.COMPLETED and run.summary.roots == 2
    assert words(run) == ["A", "B"]
    # in every round: a recovery round never reads past it either
    assert testing.failure_free_output(pipeline(2), inputs={"words": ["a", "b", EOF, "c"]}) == \
        testing.sink_multisets(run)


def test_list_sink_keeps_each_record_once_across_recovery_rounds(fake_redis):
    # the sink itself fails its first attempt at "b": the record arrives in round 1, once
    faults = {"recovery.inject.s.component": "out", "recovery.inject.s.match": "B", **NO_BACKOFF}
    run = testing.run_local(pipeline(), fake_redis, inputs={"words": ["a", "b", "c"]}, config=faults)
    assert run.summary.status == "pending" and words(run) == ["A", "C"]
    assert [(p.component, p.count) for p in run.failed_positions] == [("out", 1)]
    assert run.failed_tuples()[0].values == ["B"]
    testing.recover_local(run)
    assert run.summary.rounds == 1 and run.summary.recovered == 1
    assert run.status == runs.COMPLETED and words(run) == ["A", "B", "C"]


def test_list_sinks_of_two_runs_are_apart(fake_redis):
    one = testing.run_local(pipeline(), fake_redis, inputs={"words": ["a"]})
    two = testing.run_local(pipeline(), fake_redis, inputs={"words": ["b", "c"]})
    assert words(one) == ["A"] and words(two) == ["B", "C"]


def test_a_failure_upstream_is_recovered_exactly(fake_redis):
    faults = {"recovery.inject.u.component": "upper", "recovery.inject.u.rate": "0.5", **NO_BACKOFF}
    items = [f"w{i}" for i in range(40)]
    run = testing.run_local(pipeline(2), fake_redis, inputs={"words": items}, config=faults, recover=True)
    assert run.summary.recovered > 0 and run.status == runs.COMPLETED
    testing.assert_same_output(run, testing.failure_free_output(pipeline(2), inputs={"words": items}))


def test_assert_same_output_names_the_sink_and_the_records_that_differ(fake_redis):
    run = testing.run_local(pipeline(), fake_redis, inputs={"words": ["a", "b"]})
    other = testing.run_local(pipeline(), fake_redis, inputs={"words": ["a", "a"]})
    expected = """sink 'out': 1 missing ['["A"]'], 1 extra ['["B"]']"""
    with pytest.raises(AssertionError, match=re.escape(expected)):
        testing.assert_same_output(run, other)


def test_feed_refuses_a_bolt():
    with pytest.raises(ValueError, match="'upper' is a bolt"):
        testing.feed(pipeline(), "upper", ["a"])


def test_list_sinks_refuse_a_run_without_tracking(fake_redis):
    with pytest.raises(ValueError, match="ListSinks need tracking on"):
        testing.run_local(pipeline(), fake_redis, inputs={"words": ["a"]}, tracking=False)


def test_arrival_permutes_each_bolt_tasks_input_tuple_by_tuple(fake_redis):
    # Numbered's records depend on arrival order; the words it saw do not
    numbered = pipeline().component("upper").model_copy(
        update={"impl": ClassImpl(ref=f"{__name__}:Numbered"), "parallelism": 1,
                "streams": (StreamDef(fields=("word", "n")),)})
    wf = Workflow(name="kit", components=tuple(numbered if c.id == "upper" else c for c in pipeline().components))
    items = [f"w{i:02}" for i in range(30)]
    in_order = testing.run_local(wf, fake_redis, inputs={"words": items})
    shuffled = testing.run_local(wf, fake_redis, inputs={"words": items}, arrival=random.Random(1))
    assert sorted(in_order.sinks["out"]) == [[w, i] for i, w in enumerate(items)]
    assert sorted(shuffled.sinks["out"]) != sorted(in_order.sinks["out"])
    assert sorted(w for w, _ in shuffled.sinks["out"]) == items
    assert shuffled.summary.components["upper"].acked == 30


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Testing your components"):]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL)[1]


def test_the_readme_example_runs_as_written(monkeypatch):
    """The README's "Testing your components" example, exactly: from workflows/, its tests pass."""
    monkeypatch.chdir(ROOT / "workflows")
    monkeypatch.syspath_prepend(str(ROOT / "workflows"))
    namespace: dict = {}
    exec(compile(readme_example(), "README.md", "exec"), namespace)   # noqa: S102 (our README)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) >= 2
    for test in tests:
        test()


def test_the_kit_checks_its_config_as_submit_does_and_stores_nothing(fake_redis):
    """`config=` is `submit -p`: an injection at a component the workflow lacks would inject
    nothing, silently; a bad mode would run as transient."""
    from recovery.model.config import PropertyError
    for config, message in (({"recovery.inject.f.component": "nosuch"},
                             r"no component 'nosuch' in this workflow \(its components: words, upper, out\)"),
                            ({"recovery.inject.f.component": "upper", "recovery.inject.f.mode": "flaky"},
                             "recovery.inject.f.mode must be one of")):
        with pytest.raises(PropertyError, match=message):
            testing.run_local(pipeline(), fake_redis, inputs={"words": ["a"]}, config=config)
    assert fake_redis.keys("*") == []
