"""recovery.api.tuples: a tuple's values by position and by field name, and the tick it can be."""
from __future__ import annotations

import pytest

from recovery.api import components
from recovery.api.tuples import SYSTEM_COMPONENT, TICK_STREAM, Tuple


def test_a_tuple_gives_its_values_by_position_and_by_field():
    tup = Tuple(1, "src", "words", 3, ("a", 2), ("word", "count"), (7,))
    assert (tup[0], tup["count"], tup.get("word"), tup.get("missing", "none")) == ("a", 2, "a", "none")
    assert tup.as_dict() == {"word": "a", "count": 2}
    assert (tup.values, tup.roots) == (["a", 2], (7,))


def test_a_missing_field_names_the_component_stream_and_the_fields_there_are():
    tup = Tuple(1, "src", "words", 3, ["a"], ("word",))
    with pytest.raises(KeyError, match=r"tuple from 'src' stream 'words' has no field 'count' \(fields: word\)"):
        tup["count"]


def test_only_the_system_components_tick_stream_is_a_tick():
    assert Tuple(0, SYSTEM_COMPONENT, TICK_STREAM, -1, [1]).is_tick
    assert not Tuple(0, "src", TICK_STREAM, -1, [1]).is_tick


def test_the_component_api_still_names_the_tuple_users_write_against():
    assert components.Tuple is Tuple and components.TICK_STREAM == TICK_STREAM
