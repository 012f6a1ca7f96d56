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


def _committed(client, state):
    pipe = client.pipeline()
    state.write_to(pipe)
    pipe.execute()


def test_restore_forgets_what_was_written_after_the_snapshot_and_commits_what_was_before(fake_redis):
    stored = KeyedState(fake_redis, "st")
    stored.put("old", 0)
    _committed(fake_redis, stored)
    state = KeyedState(fake_redis, "st")
    state.put("a", 1)
    saved = state.snapshot()
    state.put("a", 2)
    state.put("b", 3)
    state.delete("old")
    assert dict(state.items()) == {"a": 2, "b": 3}
    state.restore(saved)
    assert dict(state.items()) == {"old": 0, "a": 1} and state.get("b") is None
    state.put("c", 4)          # a write after the restore...
    state.restore(saved)       # ...is forgotten too: a snapshot restores as often as asked
    assert state.get("c") is None
    _committed(fake_redis, state)
    assert dict(KeyedState(fake_redis, "st").items()) == {"old": 0, "a": 1}


def test_local_state_restores_its_snapshot_too():
    state = LocalState()
    state.put("a", 1)
    saved = state.snapshot()
    state.put("a", 2)
    state.delete("a")
    state.put("b", 3)
    state.restore(saved)
    assert dict(state.items()) == {"a": 1}
    state.put("b", 3)
    state.restore(saved)
    assert dict(state.items()) == {"a": 1}
