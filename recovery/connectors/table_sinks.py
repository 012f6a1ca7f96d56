"""The table sinks on the driver's side: `postgres` (recovery/connectors/postgres.py) and
`delta` (recovery/connectors/delta.py) append to a user's table, each part one database
transaction or Delta commit that records (run, sink, task, round), so a replayed part writes
nothing. Before a run, `check_tables` checks on the driver that each table can take the run's
rows; `clear_tables` is what `recovery clear` does to them (never a user's row)."""
from __future__ import annotations

import logging
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from recovery.connectors import delta, postgres
from recovery.connectors.sink_base import SinkTableError
from recovery.model.workflow import TABLE_SINK_TYPES, SinkImpl, Workflow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableSink:
    component: str
    type: str
    impl: SinkImpl
    fields: tuple[str, ...]   # the input streams' fields, in order (no repeats)

    @property
    def where(self) -> str:
        """The table as the XML names it."""
        return self.impl.param("table" if self.type == "postgres" else "path") or ""


def table_sinks(wf: Workflow) -> list[TableSink]:
    """The workflow's postgres and delta sinks, with the fields their inputs carry."""
    out = []
    for c in wf.components:
        impl = c.impl
        if isinstance(impl, SinkImpl) and impl.type in TABLE_SINK_TYPES:
            fields: list[str] = []
            for inp in c.inputs:
                try:
                    stream = wf.component(inp.source).stream(inp.stream)
                except KeyError:   # an input from outside this workflow (a recovery round's)
                    stream = None
                fields += stream.fields if stream else ()
            out.append(TableSink(c.id, impl.type, impl, tuple(dict.fromkeys(fields))))
    return out


def check_tables(wf: Workflow, run_id: str | None) -> None:
    """At submit, on the driver, before anything is stored: each table sink's database answers
    and its table (when it exists) has a column for every field; a Delta table's place can be
    written and holds no commit of `run_id` (None: a new id, which none can hold)."""
    for s in table_sinks(wf):
        log.debug("checking sink %r (%s): %s", s.component, s.type, s.where)
        if s.type == "postgres":
            postgres.check(s.component, s.impl, s.fields)
        else:
            delta.check(wf, s.component, s.impl, s.fields, run_id)


@dataclass
class TableClear:
    """What `recovery clear` did at a table sink (its user rows are never removed)."""
    component: str
    type: str
    table: str
    commit_table: str | None = None   # postgres: where the run's commit rows were
    commit_rows_removed: int | None = None
    note: str = ""
    error: str | None = None          # postgres: why the commit rows stayed (--force)

    def as_dict(self) -> dict[str, Any]:
        return {"sink": self.component, "type": self.type, "table": self.table, "rows_kept": True,
                "commit_table": self.commit_table, "commit_rows_removed": self.commit_rows_removed,
                "note": self.note, "error": self.error}


def clear_tables(wf: Workflow, run_id: str, force: bool = False, reach_only: bool = False) -> list[TableClear]:
    """`recovery clear RUN` at the run's table sinks: rows of a user's table are never deleted.
    PostgreSQL: the run's rows of the commit table go, so that a run submitted again under the
    same id writes again. Every database is connected to before any row goes: one that cannot
    be reached refuses the clear (SinkTableError) with nothing removed, unless `force`, where
    its commit rows stay and the result says so. Delta: app transactions cannot leave a
    table's log; a run submitted again under the same id is refused. `reach_only`: only
    connect (clear --all checks every run's databases before clearing any run)."""
    out: list[TableClear] = []
    with ExitStack() as stack:
        conns: dict[str, Any] = {}
        unreachable: dict[str, str] = {}
        for s in table_sinks(wf):
            if s.type != "postgres":
                continue
            what = f"sink {s.component!r} (postgres)"
            try:
                conns[s.component] = stack.enter_context(postgres.connect(s.impl.param("url") or "", what))
            except SinkTableError as err:
                if not force:
                    raise SinkTableError(f"{err}; nothing was cleared: clear run {run_id} again once the "
                                         "database answers, or with --force (its commit rows then stay)") from None
                unreachable[s.component] = str(err)
        if reach_only:
            return []
        for s in table_sinks(wf):
            run_col = s.impl.param("run-column")
            if s.type == "postgres":
                done = TableClear(s.component, s.type, s.where)
                how = (f"DELETE FROM {s.where} WHERE {run_col} = '{run_id}' removes them" if run_col else
                       "they carry no run id: the sink has no run-column")
                if s.component in unreachable:
                    done.error = unreachable[s.component]
                else:
                    try:
                        done.commit_table, done.commit_rows_removed = postgres.clear_commits(
                            conns[s.component], s.component, s.impl, run_id)
                    except SinkTableError as err:
                        if not force:
                            raise
                        done.error = str(err)
                if done.error is None:
                    done.note = (f"rows in table {s.where} kept ({how}); {done.commit_rows_removed} commit rows "
                                 f"of the run removed from {done.commit_table}: a run submitted again as "
                                 f"{run_id} writes its rows again")
                else:
                    done.note = (f"rows in table {s.where} kept ({how}); the run's commit rows stayed (the "
                                 f"database did not answer: --force): a run submitted again as {run_id} would "
                                 "skip the parts written before")
                    log.warning("run %s: sink %r: %s", run_id, s.component, done.error)
            else:
                how = (f"DeltaTable(path).delete(\"{run_col} = '{run_id}'\") removes them" if run_col else
                       "they carry no run id: the sink has no run-column")
                done = TableClear(s.component, s.type, s.where, note=(
                    f"rows in Delta table {s.where} kept ({how}); its log keeps the run's app transactions "
                    f"for good, so submitting again under run id {run_id} is refused"))
            out.append(done)
    return out


def _remove_delta_data(s: TableSink, wf: Workflow, run_id: str) -> list[str]:
    from deltalake.exceptions import DeltaError
    uri = delta.location(s.impl, wf.base_dir or ".")
    try:
        return delta.remove_uncommitted(uri, run_id, [s.component])
    except (DeltaError, OSError) as err:
        why = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise SinkTableError(f"sink {s.component!r} (delta): cannot remove run {run_id}'s uncommitted data "
                             f"files from {uri}: {why}") from None


def remove_uncommitted_data(wf: Workflow, run_id: str) -> list[str]:
    """At the end of `recover`, and at `clear` once the run's keys are gone: at each Delta sink,
    the run's data files that no commit names (delta.remove_uncommitted). Best effort: a table
    that cannot be reached is logged (they are never read), and the next recover or clear tries
    again."""
    removed: list[str] = []
    for s in table_sinks(wf):
        if s.type == "delta":
            try:
                removed += _remove_delta_data(s, wf, run_id)
            except SinkTableError as err:
                log.warning("run %s: %s", run_id, err)
    return removed
