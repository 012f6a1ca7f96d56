"""Every configuration property the project reads, declared once: type, default, range, help.

Properties come from ``<config><property name value/>`` in the XML (workflow-level, then a
component's own, which override it) and from ``-p KEY=VALUE`` on the command line. Their
values are text there; this module checks them and turns them into typed values.

- Storm's names where Storm has the setting (``topology.*``), ours under ``recovery.*``.
- A declared property with a bad value is an error naming the property (the caller adds
  the place: file and line, or ``-p``).
- An unknown ``recovery.*`` name is an error with a did-you-mean: a typo would otherwise be
  ignored without a word.
- Any other name (Storm's other ``topology.*`` settings, a component's own properties)
  passes through to the components as text.
- ``recovery.inject.<name>.<attribute>`` is the fault-injection family (recovery/faults.py),
  declared by InjectionSettings; an injection's ``.component`` must name a component of the
  workflow (check_injection_components: a typo would otherwise inject nothing, silently).
"""
from __future__ import annotations

import difflib
import functools
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.fields import FieldInfo

from recovery.errors import RecoveryError

RECOVERY_PREFIX = "recovery."
INJECT_PREFIX = "recovery.inject."


class PropertyError(RecoveryError):
    """A property name or value is wrong. `property` names it; the message says what is wrong
    but not where: callers that know the place (file and line, -p) put it in front."""

    def __init__(self, message: str, property: str):
        self.property = property
        super().__init__(message)


def _strip_text(value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value


class Settings(BaseModel):
    """The declared properties, typed. Field aliases are the property names."""
    model_config = ConfigDict(frozen=True, extra="ignore", validate_default=True)

    message_timeout_secs: float = Field(
        30, alias="topology.message.timeout.secs", gt=0, allow_inf_nan=False,
        description="A tuple not acked within this many seconds fails at its task (a BatchBolt's "
                    "process_batch call, and a batch sink's write up to its publish point, fail "
                    "their batch's rows).")
    max_spout_pending: int = Field(
        1000, alias="topology.max.spout.pending", ge=1,
        description="A redis-stream spout task reads at most this many messages per batch.")
    tick_tuple_freq_secs: float = Field(
        0, alias="topology.tick.tuple.freq.secs", ge=0, allow_inf_nan=False,
        description="Send bolts a tick tuple every this many seconds; 0: no ticks.")
    subprocess_timeout_secs: float = Field(
        30, alias="topology.subprocess.timeout.secs", gt=0, allow_inf_nan=False,
        description="A shell program silent for this long (no heartbeat answer) is dead.")
    multilang_heartbeat_interval_secs: float = Field(
        1, alias="topology.multilang.heartbeat.interval.secs", gt=0, allow_inf_nan=False,
        description="How often shell bolts are sent a heartbeat.")
    topology_name: str | None = Field(
        None, alias="topology.name",
        description="The name shell programs see in their handshake (default: the workflow's).")
    max_attempts: int = Field(
        3, alias="recovery.max.attempts", ge=1,
        description="Attempts per tuple (the first run counts) before it goes to the "
                    "dead-letter queue.")
    retry_initial_delay_ms: float = Field(
        0, alias="recovery.retry.initial.delay.ms", ge=0, allow_inf_nan=False,
        description="Backoff before a retry: initial + period * 2^(attempt-1), capped.")
    retry_delay_period_ms: float = Field(
        200, alias="recovery.retry.delay.period.ms", ge=0, allow_inf_nan=False,
        description="Backoff period (see recovery.retry.initial.delay.ms).")
    retry_max_delay_ms: float = Field(
        10000, alias="recovery.retry.max.delay.ms", ge=0, allow_inf_nan=False,
        description="Backoff cap.")
    batch_size: int = Field(
        1024, alias="recovery.batch.size", ge=1,
        description="Rows per pyarrow.RecordBatch a BatchBolt's process_batch receives at most.")
    tracking: bool = Field(
        True, alias="recovery.tracking",
        description="Shown to components; whether a run is tracked is `submit --no-tracking`.")
    auto: bool = Field(
        False, alias="recovery.auto",
        description="submit --follow: recover each batch's failures before the next batch.")
    chain: bool = Field(
        True, alias="recovery.chain",
        description="Chain components as Flink does: a bolt whose one input is local_or_shuffle "
                    "or none from a component of equal parallelism runs in its upstream's "
                    "Spark stage and Python worker, with no shuffle between them. false: one "
                    "stage per component.")
    chain_shuffle: bool = Field(
        False, alias="recovery.chain.shuffle",
        description="Chain across shuffle edges too (same conditions as local_or_shuffle); a "
                    "chained edge sends task i's tuples to task i of the next component.")
    spill_dir: str | None = Field(
        None, alias="recovery.spill.dir",
        description="Where tasks spill their in-flight outputs: a folder the driver and every "
                    "executor reach, or a filesystem URI pyarrow.fs opens (file://, hdfs://, "
                    "s3://). Default RECOVERY_HOME/spill; --spill-dir wins.")
    ship_max_bytes: int = Field(
        256 * 1024 * 1024, alias="recovery.ship.max.bytes", ge=0,
        description="The most the workflow's code (what ships with the job: its modules, scripts and "
                    "<resources>) may add up to, in bytes; more is refused at validate and submit, "
                    "naming the largest files (leave data out with <exclude pattern>).")
    dead_retention: str | None = Field(
        None, alias="recovery.dead.retention",
        json_schema_extra={"expected": "a count (1000) or an age (90s, 30m, 12h, 7d)"},
        description="A follow run keeps at most this many dead letters in Redis, or those that "
                    "died within this age (30s, 15m, 12h, 7d); it drops the rest, oldest first, "
                    "and `status` counts them. With a dead-letter sink, only what the sink could "
                    "not take yet is in Redis to drop. Default: all are kept.")
    history_max_events: int = Field(
        10000, alias="recovery.history.max.events", ge=0,
        description="What `recovery trace` reads: per failed task, at most this many of its "
                    "tuples' failures and replays are kept after they leave its queue (the rest "
                    "are counted as dropped); 0 keeps none. Written only when tuples fail.")
    executors_wait_secs: float = Field(
        120, alias="recovery.executors.wait.secs", gt=0, allow_inf_nan=False,
        description="On a cluster (any master but local), a round left without a single executor "
                    "(its workers lost) is said so on stderr and in `status` within seconds, and "
                    "fails after this many seconds without one; `recover` resumes it once a "
                    "worker is back.")

    @field_validator("*", mode="before")
    @classmethod
    def _strip(cls, value: Any) -> Any:
        return _strip_text(value)

    @field_validator("dead_retention")
    @classmethod
    def _retention(cls, value: str | None) -> str | None:
        if value is not None:
            retention_limit(value)
        return value

    def dead_retention_limit(self) -> tuple[int | None, float | None]:
        """recovery.dead.retention as (dead letters kept, or None; their age in seconds, or None)."""
        return retention_limit(self.dead_retention) if self.dead_retention is not None else (None, None)


class InjectionSettings(BaseModel):
    """One fault injection, ``recovery.inject.<name>.<attribute>`` (recovery/faults.py)."""
    model_config = ConfigDict(frozen=True, extra="ignore", validate_default=True)

    component: str | None = Field(None, description="The component it acts at (required).")
    mode: Literal["transient", "permanent", "crash", "slow", "hold"] = Field(
        "transient", description="What happens to a chosen tuple.")
    rate: float = Field(0.01, ge=0, le=1, allow_inf_nan=False,
                        description="Fraction of tuples chosen, by tuple id.")
    match: str | None = Field(None, description="Or: choose tuples whose values contain this.")
    attempts: int = Field(1, ge=0, description="transient: fail the first N attempts.")
    task: int | None = Field(None, ge=1, description="crash: the global task id that dies...")
    after: int = Field(0, ge=0, description="...after this many tuples.")
    marker: str | None = Field(None, description="crash: a file created just before dying; "
                                                "hold: the file whose creation lets the tuples go.")
    delay_ms: float = Field(0, alias="delay.ms", ge=0, allow_inf_nan=False,
                            description="slow: sleep this long per chosen tuple.")

    @field_validator("*", mode="before")
    @classmethod
    def _strip(cls, value: Any) -> Any:
        return _strip_text(value)


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def retention_limit(text: str) -> tuple[int | None, float | None]:
    """A retention as (a count, None) for "1000", or (None, seconds) for an age: "90s", "30m",
    "12h", "7d". ValueError otherwise."""
    text = text.strip()
    if text.isdigit():
        return int(text), None
    number, unit = text[:-1], text[-1:]
    try:
        age = float(number) * _AGE_UNITS[unit]
    except (KeyError, ValueError):
        raise ValueError(f"not a count or an age: {text!r}") from None
    if not age > 0 or age == float("inf"):
        raise ValueError(f"not a positive age: {text!r}")
    return None, age


def _alias(name: str, info: FieldInfo) -> str:
    return info.alias or name


PROPERTIES: dict[str, FieldInfo] = {_alias(n, f): f for n, f in Settings.model_fields.items()}
INJECTION_ATTRIBUTES: dict[str, FieldInfo] = {
    _alias(n, f): f for n, f in InjectionSettings.model_fields.items()}


def _text(value: Any) -> str:
    """A default as the XML would write it: 30 not 30.0, true not True."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


_DEFAULT_SETTINGS = Settings()          # the defaults, typed (30.0, not 30)

# The defaults as text, merged under a workflow's properties (Workflow.conf).
DEFAULTS: dict[str, str] = {name: _text(f.default) for name, f in PROPERTIES.items()
                            if f.default is not None}


def _expected(info: FieldInfo) -> str:
    """What a field accepts, in words: "an integer >= 1", "one of transient, permanent"."""
    extra = info.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("expected"), str):
        return str(extra["expected"])
    ann = info.annotation
    args = getattr(ann, "__args__", ())
    if getattr(ann, "__origin__", None) is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    base = next((a for a in (int, float, bool, str) if ann is a or a in args), str)
    words = {int: "an integer", float: "a finite number", bool: "true or false", str: "text"}[base]
    for m in info.metadata:
        for cls, attr, op in ((annotated_types.Ge, "ge", ">="), (annotated_types.Gt, "gt", ">"),
                              (annotated_types.Le, "le", "<="), (annotated_types.Lt, "lt", "<")):
            if isinstance(m, cls):
                words += (" and " if words.endswith(tuple("0123456789")) else " ") \
                    + f"{op} {_text(getattr(m, attr))}"
    return words


def _suggestion(name: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _validate(model: type[BaseModel], name: str, field_name: str, info: FieldInfo,
              value: Any) -> Any:
    try:
        parsed = model.model_validate({field_name: value})
    except ValidationError:
        raise PropertyError(f"{name} must be {_expected(info)}, got {value!r}", name) from None
    attr = next(n for n, f in model.model_fields.items() if f is info)
    return getattr(parsed, attr)


def check_property(name: str, value: Any) -> Any:
    """The typed value of property `name`, or PropertyError. Names not under recovery.* and
    not declared pass through unchanged (their value is the component's business)."""
    if not name:
        raise PropertyError("a property name is empty", name)
    if name.startswith(INJECT_PREFIX):
        inj, _, attr = name[len(INJECT_PREFIX):].partition(".")
        if not inj or attr not in INJECTION_ATTRIBUTES:
            options = [f"{INJECT_PREFIX}{inj or 'NAME'}.{a}" for a in INJECTION_ATTRIBUTES]
            hint = (_suggestion(name, options) if attr else "") or (
                f" (expected {INJECT_PREFIX}NAME.ATTRIBUTE, ATTRIBUTE one of "
                + ", ".join(INJECTION_ATTRIBUTES) + ")")
            raise PropertyError(f"unknown property {name}{hint}", name)
        return _validate(InjectionSettings, name, attr, INJECTION_ATTRIBUTES[attr], value)
    info = PROPERTIES.get(name)
    if info is None:
        if name.startswith(RECOVERY_PREFIX):
            raise PropertyError(f"unknown property {name}" + _suggestion(name, PROPERTIES), name)
        return value
    return _validate(Settings, name, name, info, value)


def check_injections(names: Iterable[str]) -> None:
    """Every injection named among `names` sets its .component (else it never acts)."""
    by_injection: dict[str, list[str]] = {}
    for name in names:
        if name.startswith(INJECT_PREFIX):
            inj, _, attr = name[len(INJECT_PREFIX):].partition(".")
            by_injection.setdefault(inj, []).append(attr)
    for inj, attrs in by_injection.items():
        if "component" not in attrs:
            first = f"{INJECT_PREFIX}{inj}.{attrs[0]}"
            raise PropertyError(f"injection {inj!r} names no component: set "
                                f"{INJECT_PREFIX}{inj}.component", first)


def injection_attribute(name: str) -> str | None:
    """"component" for recovery.inject.f.component: the attribute an injection property sets
    (None for any other property)."""
    if not name.startswith(INJECT_PREFIX):
        return None
    return name[len(INJECT_PREFIX):].partition(".")[2]


def check_injection_components(conf: Mapping[str, Any], components: Collection[str]) -> None:
    """Every ``recovery.inject.NAME.component`` in `conf` names one of `components` (the
    workflow's component ids): PropertyError naming the property and the components there are."""
    for name, raw in conf.items():
        if injection_attribute(name) != "component":
            continue
        target = _strip_text(raw)
        if target not in components:
            listed = ", ".join(components) or "none"
            close = difflib.get_close_matches(str(target), list(components), n=1, cutoff=0.6)
            raise PropertyError(f"{name}: no component {target!r} in this workflow (its components: "
                                f"{listed})" + (f" (did you mean {close[0]!r}?)" if close else ""), name)


def check_conf(conf: Mapping[str, Any], components: Collection[str], existing: Iterable[str] = ()) -> None:
    """A whole set of properties, as validate checks a <config>: each name and value, each
    injection's .component set (here or among `existing`) and naming one of `components`."""
    for name, raw in conf.items():
        check_property(name, raw)
    check_injections([*existing, *conf])
    check_injection_components(conf, components)


def parse_assignments(pairs: Iterable[str], option: str = "-p",
                      existing: Iterable[str] = (), components: Collection[str] | None = None) -> dict[str, str]:
    """`KEY=VALUE` strings from the command line, each checked: RecoveryError naming the
    option and the assignment at the first bad one. `existing`: the names the workflow sets
    already (an injection may get its .component there); `components`: the workflow's
    component ids, which an injection's .component must name (None: not checked here)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise RecoveryError(f"{option} {pair!r}: expected KEY=VALUE with a non-empty KEY")
        try:
            check_property(key, value)
            if components is not None:
                check_injection_components({key: value}, components)
        except PropertyError as err:
            raise RecoveryError(f"{option} {pair}: {err}") from None
        out[key] = value
    try:
        check_injections([*existing, *out])
    except PropertyError as err:
        raise RecoveryError(f"{option} {err.property}: {err}") from None
    return out


def settings(conf: Mapping[str, Any] | None) -> Settings:
    """The typed settings of `conf` (a component's configuration: text, as Workflow.conf gives
    it; a declared property absent or None takes its default). The one way the project reads
    its properties; PropertyError names the first bad one. Components still get `conf` itself."""
    declared = tuple((name, conf[name]) for name in PROPERTIES if conf and conf.get(name) is not None)
    try:
        hash(declared)
    except TypeError:   # a value that cannot be a cache key (a conf built in code): not cached
        return _typed(declared)
    return _cached(declared)


def _typed(declared: tuple[tuple[str, Any], ...]) -> Settings:
    if not declared:
        return _DEFAULT_SETTINGS
    return Settings.model_validate({name: check_property(name, raw) for name, raw in declared})


_cached = functools.lru_cache(maxsize=256)(_typed)   # tasks and tuples read the same few confs


def injections(conf: Mapping[str, Any] | None) -> dict[str, InjectionSettings]:
    """Every injection ``recovery.inject.NAME.*`` set in `conf`, typed, by NAME (sorted); an
    attribute not set takes its default. PropertyError names the first bad property."""
    by_name: dict[str, dict[str, Any]] = {}
    for name, raw in (conf or {}).items():
        attr = injection_attribute(name)
        if attr:
            inj = name[len(INJECT_PREFIX):].partition(".")[0]
            check_property(name, raw)
            by_name.setdefault(inj, {})[attr] = raw
    typed = {inj: InjectionSettings.model_validate(attrs) for inj, attrs in sorted(by_name.items())}
    for inj, settings in typed.items():
        if settings.mode == "hold" and not settings.marker:
            name = f"{INJECT_PREFIX}{inj}.marker"
            raise PropertyError(f"{name} must be set: a hold lets its tuples go once that file exists", name)
    return typed


def describe() -> list[tuple[str, str, str, str]]:
    """(name, accepts, default, help) for every declared property, for documentation."""
    rows = [(n, _expected(f), DEFAULTS.get(n, ""), f.description or "")
            for n, f in PROPERTIES.items()]
    rows += [(f"{INJECT_PREFIX}NAME.{n}", _expected(f),
              "" if f.default is None else _text(f.default), f.description or "")
             for n, f in INJECTION_ATTRIBUTES.items()]
    return rows

