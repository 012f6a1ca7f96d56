"""recovery.model.config: every property declared once, values checked, readers typed."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from recovery.errors import RecoveryError
from recovery.faults import Injection
from recovery.model import config
from recovery.model.config import PropertyError
from recovery.model.workflow import Workflow
from recovery.tracking.tracker import backoff_ms

PACKAGE = Path(__file__).resolve().parents[3] / "recovery"
MODULES = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
           for p in PACKAGE.rglob("*.py")}


def test_every_property_the_code_names_is_declared():
    """A property name spelled anywhere in the package is one config.py declares (or an
    injection attribute), so no reader has a default of its own that the checks miss."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        names |= set(re.findall(r"""["']((?:recovery|topology)\.[a-z][a-z0-9_.]*[a-z0-9])["']""",
                                path.read_text()))
    names -= MODULES
    names = {n for n in names if not n.startswith(config.INJECT_PREFIX)}
    assert names, "the scan found nothing: its pattern is wrong"
    assert names <= set(config.PROPERTIES), names - set(config.PROPERTIES)


def test_defaults_are_text_as_the_xml_writes_them():
    assert config.DEFAULTS["topology.message.timeout.secs"] == "30"
    assert config.DEFAULTS["recovery.max.attempts"] == "3"
    assert config.DEFAULTS["recovery.tracking"] == "true"
    assert "topology.name" not in config.DEFAULTS          # no default: the workflow's name
    assert Workflow(name="w").conf() == config.DEFAULTS


def test_injection_defaults_match_the_injector():
    """recovery/faults.py applies these defaults; the declarations document the same ones."""
    fields = Injection.__dataclass_fields__
    for attr, info in config.INJECTION_ATTRIBUTES.items():
        name = attr.replace(".", "_")
        if name in fields and info.default is not None:
            assert fields[name].default == info.default, attr


@pytest.mark.parametrize("name,value,expected", [
    ("recovery.max.attempts", "5", 5),
    ("recovery.max.attempts", " 5 ", 5),
    ("topology.message.timeout.secs", "2.5", 2.5),
    ("recovery.auto", "yes", True),
    ("recovery.auto", "False", False),
    ("recovery.inject.x.mode", "slow", "slow"),
    ("recovery.inject.x.delay.ms", "20", 20.0),
    ("topology.workers", "any text", "any text"),      # Storm's others pass through
    ("my.component.setting", "x", "x"),
])
def test_good_values_are_typed(name, value, expected):
    assert config.check_property(name, value) == expected


@pytest.mark.parametrize("name,value,message", [
    ("recovery.max.attempts", "abc", "recovery.max.attempts must be an integer >= 1, got 'abc'"),
    ("recovery.max.attempts", "0", "recovery.max.attempts must be an integer >= 1, got '0'"),
    ("recovery.max.attempts", "2.5", "recovery.max.attempts must be an integer >= 1"),
    ("topology.max.spout.pending", "-3", "must be an integer >= 1"),
    ("topology.subprocess.timeout.secs", "0", "must be a finite number > 0"),
    ("recovery.retry.delay.period.ms", "inf", "must be a finite number >= 0"),
    ("recovery.tracking", "maybe", "recovery.tracking must be true or false, got 'maybe'"),
    ("recovery.retry.max.delay", "5", "unknown property recovery.retry.max.delay (did you mean "
                                      "recovery.retry.max.delay.ms?)"),
    ("recovery.whatever", "5", "unknown property recovery.whatever"),
    ("recovery.inject.x.mode", "boom", "must be one of transient, permanent, crash, slow"),
    ("recovery.inject.x.attempt", "2", "did you mean recovery.inject.x.attempts?"),
    ("recovery.inject.x", "2", "expected recovery.inject.NAME.ATTRIBUTE"),
])
def test_bad_values_and_unknown_recovery_names_are_errors(name, value, message):
    with pytest.raises(PropertyError) as info:
        config.check_property(name, value)
    assert message in str(info.value)
    assert info.value.property == name
    assert isinstance(info.value, RecoveryError) and info.value.exit_code == 2


@pytest.mark.parametrize("pairs,message", [
    (["=x"], "-p '=x': expected KEY=VALUE with a non-empty KEY"),
    (["  =x"], "expected KEY=VALUE with a non-empty KEY"),
    (["recovery.max.attempts"], "expected KEY=VALUE"),
    (["recovery.max.attempts=abc"], "-p recovery.max.attempts=abc: recovery.max.attempts must "
                                    "be an integer >= 1, got 'abc'"),
    (["recovery.max.attempts=0"], "-p recovery.max.attempts=0: "),
    (["recovery.inject.f.rate=0.5"], "-p recovery.inject.f.rate: injection 'f' names no "
                                     "component"),
])
def test_command_line_assignments_are_checked(pairs, message):
    with pytest.raises(RecoveryError) as info:
        config.parse_assignments(pairs, "-p")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_command_line_assignments():
    assert config.parse_assignments(["recovery.max.attempts=4", "my.key= a=b "]) == {
        "recovery.max.attempts": "4", "my.key": " a=b "}
    # an injection's component may come from the workflow
    assert config.parse_assignments(["recovery.inject.f.rate=0.5"],
                                    existing=["recovery.inject.f.component"]) == {
        "recovery.inject.f.rate": "0.5"}


def test_workflow_readers_go_through_the_declarations():
    wf = Workflow(name="w", config=(("recovery.max.attempts", "7"),
                                    ("recovery.retry.delay.period.ms", "10")))
    assert wf.settings().max_attempts == 7
    assert wf.settings().auto is False
    assert wf.settings().message_timeout_secs == 30.0
    assert wf.with_config({"recovery.max.attempts": "2"}).settings().max_attempts == 2
    # a bad value stored before values were checked is an error naming it, not a silent default
    bad = Workflow(name="w", config=(("recovery.auto", "perhaps"),))
    with pytest.raises(PropertyError, match="recovery.auto must be true or false"):
        bad.settings()


def test_backoff_and_multilang_read_the_declared_defaults():
    assert backoff_ms(1, {}) == 200.0                     # initial 0 + period 200
    assert backoff_ms(10, {}) == 10000.0                  # capped
    assert backoff_ms(2, {"recovery.retry.delay.period.ms": "10"}) == 20.0
    assert config.settings({}).subprocess_timeout_secs == 30.0
    assert type(config.settings({}).retry_max_delay_ms) is float   # typed defaults
    assert config.settings({"topology.tick.tuple.freq.secs": "2"}).tick_tuple_freq_secs == 2.0
    assert config.settings(None) == config.settings({}) == config.Settings()


def test_settings_read_a_component_s_conf_typed_and_name_a_bad_value():
    conf = {"topology.max.spout.pending": " 7 ", "recovery.tracking": "false", "my.own": "x",
            "recovery.spill.dir": "s3://b/p"}
    s = config.settings(conf)
    assert (s.max_spout_pending, s.tracking, s.spill_dir) == (7, False, "s3://b/p")
    assert config.settings(conf) is s                       # the same conf: read once
    with pytest.raises(PropertyError, match="topology.max.spout.pending must be an integer >= 1, got '0'"):
        config.settings({"topology.max.spout.pending": "0"})


def test_injections_are_typed_with_their_defaults():
    found = config.injections({"recovery.inject.b.component": "x", "recovery.inject.a.component": "y",
                               "recovery.inject.a.delay.ms": "5", "other": "1"})
    assert list(found) == ["a", "b"]
    assert (found["a"].component, found["a"].delay_ms, found["a"].rate, found["a"].mode) == ("y", 5.0, 0.01, "transient")
    with pytest.raises(PropertyError, match="recovery.inject.a.rate"):
        config.injections({"recovery.inject.a.component": "y", "recovery.inject.a.rate": "2"})


def test_describe_lists_every_declaration_with_help():
    rows = config.describe()
    names = [r[0] for r in rows]
    assert set(config.PROPERTIES) <= set(names)
    assert "recovery.inject.NAME.rate" in names
    assert all(help_text for _, _, _, help_text in rows)
    assert rows[names.index(
        "recovery.max.attempts")][:3] == ("recovery.max.attempts", "an integer >= 1", "3")


# --- fault injection names the workflow's components -----------------------------
COMPONENTS = ["logs", "split", "aggregate"]


@pytest.mark.parametrize("pairs,message", [
    # an unknown component used to run with no injection and no warning
    (["recovery.inject.f.component=nosuch"],
     "-p recovery.inject.f.component=nosuch: recovery.inject.f.component: no component 'nosuch' in this "
     "workflow (its components: logs, split, aggregate)"),
    (["recovery.inject.f.component=aggregat"], "(did you mean 'aggregate'?)"),
    (["recovery.inject.f.component=split", "recovery.inject.f.mode=flaky"],
     "-p recovery.inject.f.mode=flaky: recovery.inject.f.mode must be one of transient, permanent, crash, slow"),
    (["recovery.inject.f.component=split", "recovery.inject.f.rate=1.5"],
     "-p recovery.inject.f.rate=1.5: recovery.inject.f.rate must be a finite number >= 0 and <= 1"),
    (["recovery.inject.f.component=split", "recovery.inject.f.rate=-0.1"], "must be a finite number >= 0"),
    (["recovery.inject.f.componnt=split"], "did you mean recovery.inject.f.component?"),
    (["recovery.inject.f.speed=3"], "unknown property recovery.inject.f.speed"),
])
def test_injections_are_checked_against_the_workflow_s_components(pairs, message):
    with pytest.raises(RecoveryError) as info:
        config.parse_assignments(pairs, "-p", components=COMPONENTS)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert info.value.exit_code == 2


def test_an_injection_at_a_known_component_passes_and_strips_as_the_injector_does():
    assert config.parse_assignments(["recovery.inject.f.component= split "], components=COMPONENTS) == {
        "recovery.inject.f.component": " split "}
    from recovery.faults import injections
    found = injections({"recovery.inject.f.component": " split ", "recovery.inject.f.mode": "permanent "}, "split")
    assert [(i.component, i.mode) for i in found] == [("split", "permanent")]


def test_a_workflow_s_whole_configuration_is_checked_as_validate_does():
    from recovery.model.workflow import ClassImpl, Component, Input
    comps = (Component(id="src", kind="spout", impl=ClassImpl(ref="m:S")),
             Component(id="bolt", kind="bolt", impl=ClassImpl(ref="m:B"), inputs=(Input(source="src"),)))
    wf = Workflow(name="w", components=comps)
    wf.with_config({"recovery.inject.f.component": "bolt", "recovery.inject.f.rate": "0.5"}).check_config()
    with pytest.raises(PropertyError, match=r"no component 'nosuch' in this workflow \(its components: src, bolt\)"):
        wf.with_config({"recovery.inject.f.component": "nosuch"}).check_config()
    with pytest.raises(PropertyError, match="recovery.inject.f.mode must be one of"):
        wf.with_config({"recovery.inject.f.component": "bolt", "recovery.inject.f.mode": "x"}).check_config()
    at_bolt = wf.model_copy(update={"components": (comps[0], comps[1].model_copy(
        update={"config": (("recovery.inject.g.component", "nope"),)}))})
    with pytest.raises(PropertyError, match="^bolt 'bolt': recovery.inject.g.component: no component 'nope'"):
        at_bolt.check_config()
