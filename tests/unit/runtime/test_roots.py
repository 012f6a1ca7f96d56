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
