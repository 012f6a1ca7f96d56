"""runtime.roots: a spout task's root ids and a root-replay round's selection, row by row and by
array (the batched file source's), agree."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recovery.model.run import RunSpec
from recovery.runtime.roots import SpoutRoots
from recovery.tracking import ids, keys


def _roots(spec: RunSpec, client=None) -> tuple[SpoutRoots, dict]:
    stats = {"roots": 0}
    return SpoutRoots(spec, "lines", stats, lambda: client), stats


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offsets=st.lists(st.integers(0, 2**40), min_size=1, max_size=20, unique=True),
       epoch=st.integers(0, 3), data=st.data())
def test_root_replay_selects_and_renames_the_same_roots_by_array_as_by_record(fake_redis, offsets, epoch, data):
    """The failed roots (by their ids of the filter epoch) are selected again, and get the ids
    of the root epoch, whether asked one message id at a time or by position hashes."""
    first, _ = _roots(RunSpec("r", 0, "{}", None, root_epoch=epoch))
    failed = data.draw(st.lists(st.sampled_from(offsets), unique=True))
    fake_redis.delete(keys.root_replay_set("r", 1))
    for off in failed:
        fake_redis.sadd(keys.root_replay_set("r", 1), first.root_id(("in.txt", off)))
    replay = RunSpec("r", 1, "{}", None, root_replay=True, root_epoch=epoch + 1, filter_epoch=epoch)
    roots, stats = _roots(replay, fake_redis)
    hashes = ids.position_hashes("in.txt", np.array(offsets, dtype=np.uint64))
    chosen = roots.selected_many(hashes)
    assert chosen is not None
    assert chosen.tolist() == [roots.selected(("in.txt", off)) for off in offsets] == [o in failed for o in offsets]
    assert roots.root_ids(hashes).tolist() == [roots.root_id(("in.txt", off)) for off in offsets]
    assert set(roots.root_ids(hashes).tolist()).isdisjoint(first.root_id(("in.txt", o)) for o in offsets)
    roots.count(False, 3)
    assert stats == {"roots": 0, "replayed_roots": 3}   # a root replay's roots are counted apart


def test_outside_root_replay_every_record_is_selected_and_counted_as_a_root():
    roots, stats = _roots(RunSpec("r", 0, "{}", None))
    assert roots.selected(("in.txt", 0)) and roots.selected_many(np.zeros(2, dtype=np.uint64)) is None
    roots.count(False, 2)
    roots.count(True)      # a record replayed from a queue
    assert stats == {"roots": 2, "replayed_roots": 1}


def test_a_root_replay_counts_each_re_emitted_root_one_attempt_past_the_one_it_failed_at(fake_redis):
    """The round's supersede tasks say the attempt each failed root failed at; the spout writes
    its re-emitted root's attempt (one more, under the new id), row by row and by array alike,
    before emitting it: what a task failing one of its tuples in that round counts."""
    first, _ = _roots(RunSpec("r", 0, "{}", None))
    failed = {2: 1, 5: 2, 9: 0}   # offset -> the attempt it failed at (0: a requeued dead letter)
    for off, attempt in failed.items():
        old = first.root_id(("in.txt", off))
        fake_redis.sadd(keys.root_replay_set("r", 1), old)
        fake_redis.hset(keys.root_replay_attempts("r", 1), str(old), attempt)
    spec = RunSpec("r", 1, "{}", None, root_replay=True, root_epoch=1, filter_epoch=0)
    by_row, _ = _roots(spec, fake_redis)
    assert [off for off in range(12) if by_row.selected(("in.txt", off))] == sorted(failed)
    written = {int(k): int(v) for k, v in fake_redis.hgetall(keys.root_replay_attempts("r", 1)).items()}
    assert {off: written[by_row.root_id(("in.txt", off))] for off in failed} == {2: 2, 5: 3, 9: 1}
    fake_redis.delete(keys.root_replay_attempts("r", 1))
    for off, attempt in failed.items():
        fake_redis.hset(keys.root_replay_attempts("r", 1), str(first.root_id(("in.txt", off))), attempt)
    by_array, _ = _roots(spec, fake_redis)
    by_array.selected_many(ids.position_hashes("in.txt", np.arange(12, dtype=np.uint64)))
    assert {int(k): int(v) for k, v in fake_redis.hgetall(keys.root_replay_attempts("r", 1)).items()} == written
