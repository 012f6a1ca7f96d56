"""recovery.environment: the RECOVERY_* variables, read when asked (never at import), a bad value
one line naming the variable; what reads them sees a change made after import."""
from __future__ import annotations

import pytest

from recovery.environment import Environment, environment, variables
from recovery.errors import RecoveryError
from recovery.home import state_home
from recovery.tracking import runs


def test_unset_or_empty_variables_take_their_defaults():
    assert environment({}) == Environment()
    assert environment({"RECOVERY_HOME": "", "RECOVERY_KEY_PREFIX": ""}) == Environment()
    assert Environment() == Environment(home=".recovery", redis_url=None, key_prefix="recovery:",
                                        lease_seconds=30.0, spark_master="local[*]", ui_token=None)


def test_each_variable_sets_its_field():
    env = environment({"RECOVERY_HOME": "/h", "RECOVERY_REDIS_URL": "redis://x:1", "RECOVERY_KEY_PREFIX": "t:",
                       "RECOVERY_LEASE_SECONDS": "2.5", "RECOVERY_SPARK_MASTER": "local[2]",
                       "RECOVERY_UI_TOKEN": "tok", "RECOVERY_REDIS_PASSWORD_FILE": "/p"})
    assert env == Environment("/h", "redis://x:1", "t:", 2.5, "local[2]", "tok", "/p")


@pytest.mark.parametrize("value", ["soon", "0", "-1"])
def test_a_lease_that_is_not_a_positive_number_is_named(value):
    with pytest.raises(RecoveryError, match=f"RECOVERY_LEASE_SECONDS='{value}': expected a number of seconds"):
        environment({"RECOVERY_LEASE_SECONDS": value})


def test_every_field_is_a_documented_variable():
    names = [name for name, _, meaning in variables() if meaning]
    assert names == ["RECOVERY_HOME", "RECOVERY_REDIS_URL", "RECOVERY_KEY_PREFIX", "RECOVERY_LEASE_SECONDS",
                     "RECOVERY_SPARK_MASTER", "RECOVERY_UI_TOKEN", "RECOVERY_REDIS_PASSWORD_FILE"]


def test_readers_see_a_value_set_after_import(monkeypatch, tmp_path):
    monkeypatch.setenv("RECOVERY_KEY_PREFIX", "other:")
    monkeypatch.setenv("RECOVERY_HOME", str(tmp_path))
    monkeypatch.setenv("RECOVERY_LEASE_SECONDS", "4")
    assert runs.index_key() == "other:runs" and runs.record_key("r").startswith("other:run:{r}")
    assert state_home() == tmp_path
    assert runs.Lease(None, "r", None).ttl_ms == 4000   # type: ignore[arg-type]
