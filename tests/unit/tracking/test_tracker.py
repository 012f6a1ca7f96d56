"""recovery.tracking.tracker on fakeredis: the last task of a component to commit folds the
ledger, so a long chain holds about one ledger entry per root in flight, not one per stage."""
from __future__ import annotations

from recovery import BasicBolt, testing
from recovery.model.workflow import ClassImpl, Component, Input, StreamDef, Workflow
from recovery.tracking import keys, ledger, tracker

STAGES = 5


class Pass(BasicBolt):
    def process(self, tup):
        self.emit([tup["word"]])


def chain() -> Workflow:
    """words -> s0 -> s1 -> ... -> s4 -> out (ListSink), two tasks per stage."""
    comps = [Component(id="words", kind="spout", parallelism=2, impl=ClassImpl(ref=testing.TESTING_SPOUT),
                       streams=(StreamDef(fields=("word",)),))]
    for i in range(STAGES):
        comps.append(Component(id=f"s{i}", kind="bolt", parallelism=2, impl=ClassImpl(ref=f"{__name__}:Pass"),
                               streams=(StreamDef(fields=("word",)),),
                               inputs=(Input(source=comps[-1].id),)))
    comps.append(Component(id="out", kind="bolt", impl=ClassImpl(ref=testing.LIST_SINK),
                           inputs=(Input(source=comps[-1].id),)))
    return Workflow(name="chain", components=tuple(comps))


def test_a_chain_holds_at_most_32_ledger_bytes_per_root_in_flight(fake_redis, monkeypatch):
    peak = [0]
    commit = tracker.TaskTracker.commit

    def measured(self, *args, **kwargs):
        ok = commit(self, *args, **kwargs)
        held = sum(len(v) for b in range(ledger.LEDGER_BUCKETS) for v in fake_redis.hvals(keys.ledger("c", b)))
        peak[0] = max(peak[0], held)
        return ok
    monkeypatch.setattr(tracker.TaskTracker, "commit", measured)
    n = 400
    run = testing.run_local(chain(), fake_redis, run_id="c", inputs={"words": [f"w{i}" for i in range(n)]})
    assert run.summary["status"] == "completed" and len(run.sinks["out"]) == n
    # 16 bytes (root, xor) for each root folded, plus the running stage's own blobs: was 16 per
    # stage that touched the root (6 x 16 = 96) until the fold at the end of the round
    assert peak[0] / n <= 32, peak[0] / n
