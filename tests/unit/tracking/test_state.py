"""recovery.tracking.state on fakeredis: reads cached, writes held until the commit's pipeline."""
from __future__ import annotations

from recovery.tracking.state import KeyedState, LocalState


def test_writes_stay_in_the_task_until_written_to_the_commit(fake_redis):
    state = KeyedState(fake_redis, "st")
    state.put("a", 1)
    state.put(("k", 2), [1, 2])
    assert state.get("a") == 1 and fake_redis.hlen("st") == 0     # nothing stored before the commit
    pipe = fake_redis.pipeline()
    state.write_to(pipe)
    pipe.execute()
    again = KeyedState(fake_redis, "st")
    assert again.get("a") == 1 and again.get(("k", 2)) == [1, 2] and again.get("missing", 0) == 0


def test_items_merge_stored_values_with_uncommitted_writes_and_deletes(fake_redis):
    first = KeyedState(fake_redis, "st")
    first.put("kept", 1)
    first.put("gone", 2)
    pipe = fake_redis.pipeline()
    first.write_to(pipe)
    pipe.execute()
    state = KeyedState(fake_redis, "st")
    state.delete("gone")
    state.put("new", 3)
    assert dict(state.items()) == {"kept": 1, "new": 3}


def test_a_value_that_cannot_be_stored_fails_at_the_put(fake_redis):
    state = KeyedState(fake_redis, "st")
    try:
        state.put("k", object())
    except TypeError:
        pass
    else:
        raise AssertionError("an unstorable value was accepted")
    assert state.get("k") is None


def test_local_state_has_the_same_api_in_memory():
    state = LocalState()
    state.put("a", 1)
    state.delete("b")
    assert state.get("a") == 1 and dict(state.items()) == {"a": 1}
    state.write_to(None)   # nothing to commit
