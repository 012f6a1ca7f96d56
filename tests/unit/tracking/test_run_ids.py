"""recovery.tracking.keys: what a run id may be. A run id names a run's Redis keys,
its spill folder and its sinks' part files, so it must be one safe path and key segment."""
from __future__ import annotations

import pytest

from recovery.errors import RecoveryError, RunError
from recovery.tracking.keys import RUN_ID_MAX, RunIdError, check_run_id, is_run_id

GOOD = ["a", "A", "0", "run-1", "cdn_logs-20261122-101833-e043", "a.b", "a..b", "-x", "_x", "x" * RUN_ID_MAX]
BAD = [
    "a/../../b",        # the trial's: writes two folders above the sink
    "../x", "..", ".", ".hidden", "a/b", "a\\b",
    "a:b",              # splits keys
    "a{b}",             # a Redis Cluster hash tag
    "*", "a?", "[ab]",  # SCAN glob characters
    "a b", "a\nb", "a\x00", "é", "x" * (RUN_ID_MAX + 1),
]


@pytest.mark.parametrize("run_id", GOOD)
def test_safe_run_ids_are_accepted(run_id):
    assert check_run_id(run_id) == run_id and is_run_id(run_id)


@pytest.mark.parametrize("run_id", BAD)
def test_other_run_ids_are_refused_in_one_line_with_exit_2(run_id):
    assert not is_run_id(run_id)
    with pytest.raises(RunIdError) as err:
        check_run_id(run_id)
    msg = str(err.value)
    assert isinstance(err.value, RunError) and isinstance(err.value, RecoveryError) and err.value.exit_code == 2
    assert "\n" not in msg and msg.startswith("invalid run id ")
    assert "letters, digits, '.', '_' or '-', not starting with '.'" in msg


def test_an_empty_run_id_is_refused():
    with pytest.raises(RunIdError, match="^a run id cannot be empty$"):
        check_run_id("")
