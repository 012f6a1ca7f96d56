"""The run record: what a Redis hash holds about one run (tracking.runs reads and writes it).

Every value in the hash is a string: numbers as their text, flags as "1"/"0", the per-round
counters and summaries as JSON, and "" for "not set" (what a writer's None becomes). This
module decodes a hash into a typed `RunRecord` (`from_hash`) and encodes values for it
(`encode`, `to_hash`), so that no caller parses a field again.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from recovery.errors import RunError
from recovery.model.workflow import Workflow

# Fields stored as JSON text (a dict or list in the model).
JSON_FIELDS = ("stats", "rounds", "summary", "root_epochs", "source_waiting")
# Read with the record, not stored in its hash: the driver's lease as read at the same moment.
LEASE_FIELDS = ("lease_holder", "lease_ms")


class ComponentStats(BaseModel):
    """One component's counters, added up over its tasks (and, in `recover`'s summary, over
    its rounds). A task reports the first six; the others when they apply: `seconds` its time
    (the slowest task's), `spill_bytes` what it wrote to the spill store, `replayed_roots` the
    roots a root replay re-emitted, `trimmed` and `idle_tasks` a log source's messages gone
    before they were read and its tasks with nothing to read, `gone` the roots whose message
    was gone at replay, `bisect_*` a batch bolt's bisection, `per_tuple_rows` the rows a bolt
    in the chunk mode ran one at a time (a small chunk; a Bolt that kept a tuple past its
    process(): runtime.chunks). Counters a newer task reports are
    kept as they are. Its JSON holds the counters reported, in the order reported."""

    model_config = ConfigDict(extra="allow")

    executed: int = 0
    acked: int = 0
    failed: int = 0
    emitted: int = 0
    roots: int = 0
    dead: int = 0
    seconds: float = 0.0
    spill_bytes: int = 0
    replayed_roots: int = 0
    trimmed: int = 0
    idle_tasks: int = 0
    gone: int = 0
    bisect_runs: int = 0
    bisect_rows: int = 0
    bisect_isolated: int = 0
    per_tuple_rows: int = 0
    _reported: tuple[str, ...] = PrivateAttr(default=())   # the counters given, in their order

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> ComponentStats:
        out = handler(data)
        assert isinstance(out, ComponentStats)
        if isinstance(data, dict):
            out._reported = tuple(data)
        return out

    @model_serializer(mode="wrap")
    def _as_reported(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        names = [*self._reported, *sorted(self.model_fields_set - set(self._reported))]
        return {k: data[k] for k in names if k in data}

    def to_json(self) -> dict[str, Any]:
        return self.model_dump()

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ComponentStats:
        return cls.model_validate(obj)


class RoundRecord(BaseModel):
    """One round as the run record keeps it: its number (0: the submit, or a follow run's
    first batch), its components' counters, when it started and ended (epoch seconds; a
    record of an older version may lack its start)."""

    model_config = ConfigDict(extra="allow")

    round: int = 0
    components: dict[str, ComponentStats] = {}
    started: float | None = None
    ended: float | None = None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump()

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> RoundRecord:
        return cls.model_validate(obj)


class RunRecord(BaseModel):
    """One run's record. Fields a record lacks take their defaults, which mean "not yet": a
    run not settled, not ended, without a lease."""

    # extra="allow": a record written by another version keeps the fields this one does not know
    model_config = ConfigDict(extra="allow")

    run_id: str
    status: str                          # runs.RUNNING, COMPLETED, ... (as stored; see runs.status_of)
    workflow_json: str                   # the submitted workflow (every round's task numbering)
    # a token chosen at creation that every writer checks; None: a record from before leases
    generation: str | None = None
    # the generations of the drivers this run was taken from, space-separated (tracking.runs)
    retired_generations: str = ""
    xml: str = ""                        # the submitted XML, as read
    file: str | None = None              # the XML's file; None when it came from elsewhere
    master: str = ""                     # the Spark master it was submitted to
    tracking: bool = False               # False: run with --no-tracking (nothing to recover)
    started: float | None = None         # epoch seconds
    ended: float | None = None           # of the last round that ended
    error: str | None = None             # why the last round failed (status `error`)
    # while a round on a cluster has no executor: the line saying so (engine/executor_watch.py)
    executors_waiting: str | None = None
    driver_pid: int | None = None        # the last driver, for people (its lease decides liveness)
    driver_host: str = ""
    # rounds: 0 is the submit (or a follow run's first batch), later ones recovery or batches
    round: int = 0                       # the current (or last) round
    settled_round: int | None = None     # the last round whose acker verdict was taken
    root_epoch: int = 0                  # root replay: the round whose root ids are current
    # every root epoch before it (0 included, once a root replay ran): a requeued dead letter's
    # root may carry the ids of any of them
    root_epochs: list[int] = []
    current_workflow: str | None = None  # the current round's workflow (JSON)
    current_spec: str | None = None      # the current round's RunSpec extras (RunSpec.round_json)
    stats: dict[str, ComponentStats] = {}  # round 0's counters per component
    rounds: list[RoundRecord] = []       # per round: round, components, started, ended
    summary: dict[str, Any] | None = None  # the last summary (jobs.summary.summarize)
    # a follow run (`submit --follow`): batches and messages read so far, when it stopped
    follow: bool = False
    follow_batches: int = 0
    follow_messages: int = 0
    follow_stopped: float | None = None
    # a follow run whose log server does not answer now: {"server", "topic", "partition" (None:
    # its metadata), "place" (both, as lines say it), "timeout", "since", "error"}; and how many
    # times that began, so far
    source_waiting: dict[str, Any] | None = None
    source_stalls: int = 0
    # where its tasks spill their outputs (tracking.spill.location); None: a record from before
    spill_dir: str | None = None
    # sha256 of the workflow's code shipped with its tasks (model.code): recover ships the same
    code_digest: str | None = None
    # the acker's counts, stored when a round settles (tracking.ledger.RootCounts; the
    # ledger reads and writes these fields itself, in its transactions) and the root-replay
    # round whose roots were selected (engine.rounds.prepare_root_replay)
    roots_counted_round: int | None = None
    roots_pending: int | None = None
    roots_failed: int | None = None
    roots_dead: int | None = None
    root_replay_prepared: int | None = None
    # dead letters written to the dead-letter sink, and dropped by the retention cap, so far
    # (tracking.queue counts them in its transactions)
    dead_written: int = 0
    dead_dropped: int = 0
    # the lease, read with the record: "host:pid:token", and ms left (-2: no lease)
    lease_holder: str | None = None
    lease_ms: int = -2

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any], where: str = "run record", *,
                  lease_holder: str | None = None, lease_ms: int = -2) -> RunRecord:
        """The record of a Redis hash (HGETALL's bytes, or str). A field stored as "" is unset
        (its default). Raises RunError naming `where` (the hash's key) and the field that does
        not parse, in one line."""
        fields: dict[str, Any] = {}
        for k, v in raw.items():
            name = k.decode() if isinstance(k, bytes) else str(k)
            value = v.decode() if isinstance(v, bytes) else v
            if value == "" and name in cls.model_fields:
                continue
            if name in JSON_FIELDS:
                try:
                    value = json.loads(value)
                except ValueError as err:
                    raise RunError(f"{where}: field {name!r} is not JSON ({err}): {_short(value)}") from None
            fields[name] = value
        fields.update(lease_holder=lease_holder, lease_ms=lease_ms)
        try:
            return cls.model_validate(fields)
        except ValidationError as err:
            first = err.errors()[0]
            name = ".".join(str(p) for p in first["loc"])
            if first["type"] == "missing":
                raise RunError(f"{where}: field {name!r} is missing (not a run record written by "
                               "`recovery submit`?)") from None
            raise RunError(f"{where}: field {name!r}: {first['msg']}: "
                           f"{_short(fields.get(str(first['loc'][0])))}") from None

    def original_workflow(self) -> Workflow:
        """The workflow as submitted (every round's task numbering; what `recover -p` sets)."""
        return Workflow.from_task_json(self.workflow_json)

    def to_hash(self) -> dict[str, str | int | float]:
        """The fields as stored (the lease is not: it has its own key)."""
        return {k: encode(v) for k, v in self.model_dump(exclude=set(LEASE_FIELDS)).items()}


def encode(value: Any) -> str | int | float:
    """A field's value as the hash stores it (redis-py writes numbers as their text)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (dict, list, BaseModel)):
        return json.dumps(value, default=_model_json)
    return "" if value is None else value


def _model_json(value: Any) -> Any:
    """A model inside a field's value as its JSON (a round's record, its counters)."""
    if isinstance(value, BaseModel):
        return value.model_dump()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
