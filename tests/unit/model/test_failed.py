"""The failed-tuple record: the model writes the bytes the plain dicts wrote, and reads them."""
import msgpack

from recovery.model.failed import FailedTuple

BOLT_FAILURE = {"id": 0x1234, "roots": [7, 9], "src_component": "words", "src_task": 2, "stream": "default",
                "values": ["a", 1], "attempt": 1, "error": "ValueError: x", "traceback": "tb"}
STORED_BY_TASK = {"component": "count", "task": 4, "round": 0, "time": 12.5, "not_before": 13.0}


def _as_stored(rec: FailedTuple) -> FailedTuple:
    rec.component, rec.task, rec.round, rec.time, rec.not_before = "count", 4, 0, 12.5, 13.0
    return rec


def test_a_queued_failure_packs_to_the_bytes_the_dict_made():
    rec = _as_stored(FailedTuple(**BOLT_FAILURE))
    assert rec.pack() == msgpack.packb({**BOLT_FAILURE, **STORED_BY_TASK}, default=repr)


def test_a_spout_record_keeps_its_raw_bytes_and_a_dead_one_its_mark():
    fields = {**BOLT_FAILURE, "values": None, "raw": b"\xff not json", "message_id": ["p", 3],
              "format": "json"}
    rec = FailedTuple(**fields)
    rec.component, rec.task, rec.round, rec.time = "count", 4, 0, 12.5
    rec.dead = True   # out of attempts: no backoff time
    expected = {**fields, "component": "count", "task": 4, "round": 0, "time": 12.5, "dead": True}
    assert rec.pack() == msgpack.packb(expected, default=repr)
    back = FailedTuple.unpack(rec.pack())
    assert back.raw == b"\xff not json" and back.dead and back.message_id == ["p", 3]
    assert back.model_dump(exclude_unset=True) == expected


def test_values_that_msgpack_cannot_store_are_stored_as_their_repr():
    class Point:
        def __repr__(self) -> str:
            return "Point(1, 2)"

    rec = FailedTuple(**{**BOLT_FAILURE, "values": [Point()]})
    assert FailedTuple.unpack(rec.pack()).values == ["Point(1, 2)"]


def test_a_record_with_fields_this_version_does_not_know_keeps_them():
    raw = msgpack.packb({**BOLT_FAILURE, **STORED_BY_TASK, "added_later": 1})
    rec = FailedTuple.unpack(raw)
    assert rec.model_dump(exclude_unset=True)["added_later"] == 1
    assert rec.pack() == raw


def test_a_requeued_dead_letter_is_not_dead_has_a_fresh_allowance_and_keeps_the_rest():
    dead = FailedTuple.unpack(msgpack.packb({**BOLT_FAILURE, "component": "count", "task": 4, "round": 2,
                                             "time": 12.5, "attempt": 3, "dead": True, "added_later": 1}))
    back = dead.requeued()
    assert back.model_dump(exclude_unset=True) == {**BOLT_FAILURE, "component": "count", "task": 4, "round": 2,
                                                   "time": 12.5, "attempt": 0, "not_before": 0.0,
                                                   "added_later": 1}
    assert dead.dead and dead.attempt == 3      # the dead letter itself is unchanged
