"""One root of a run, followed (`recovery trace RUN ROOT`, `Run.trace`, the web view's trace
page): its message id in its source's own terms, its state (complete, pending or dead, and why
a dead one is), every failure of a tuple of its tree (component, task, round, attempt, error),
every round that replayed one, its requeues and its dead letter. Read-only, from what the run
keeps of its failures (tracking/queue/history.py) and its dead letters and ledger.

A root is named by its id (what `dead --json` shows in `roots`) or by its message id
(`message_root`): `FILE:OFFSET` for a file source (the file's base name, the line's byte
offset), `PARTITION:OFFSET` for a Redis-stream or Kafka source, the id-field value for a spark
source. Root ids are derived from message ids (tracking/ids.py `root_id`, salted per spout), so
a message id gives its root at once; the way back, from a root to its message, is a search of
the source's positions (a file's lines, the offsets a log spout read), done only when no
failure record of the root carries its message id.
"""
from __future__ import annotations

import html
import os
import time
from typing import Any

import numpy as np
from pydantic import BaseModel
from redis import Redis

from recovery.connectors import files, log_offsets
from recovery.errors import BadRequest, NotFound
from recovery.jobs.reports import Report, ShownTuple
from recovery.model.failed import FailedTuple
from recovery.model.record import RunRecord
from recovery.model.workflow import Component, SourceImpl, Workflow
from recovery.tracking import ids, ledger, runs
from recovery.tracking import queue as failed_queue
from recovery.tracking.queue import history

COMPLETE, PENDING, DEAD = "complete", "pending", "dead"
RETRIES_EXHAUSTED, MESSAGE_GONE = "retries exhausted", "message gone"
LOG_SOURCES = ("redis-stream", "kafka")
#: Offsets hashed at a time while searching a source for a root's message.
SEARCH_BATCH = 1 << 16


class RootNotFound(NotFound):
    """A root (or message id) the run holds nothing of."""


class TraceFailure(BaseModel):
    """A failure of a tuple of the root's tree."""
    component: str
    task: int
    round: int
    attempt: int
    error: str


class TraceReplay(BaseModel):
    """A round that replayed a tuple of the root's tree at a task."""
    round: int
    component: str
    task: int


class RootTrace(Report):
    """A root of a run, followed (module doc). `dropped`: events of the positions its tuples
    failed at that the history's cap turned away (its account may then be short)."""
    run_id: str
    root: int
    message_id: Any = None
    state: str
    reason: str | None = None
    failures: list[TraceFailure] = []
    replays: list[TraceReplay] = []
    requeued: list[float] = []
    dead_letter: dict[str, Any] | None = None
    dropped: int = 0
    tree: list[dict[str, Any]] | None = None   # with --tree (jobs/trace_tree.py)
    nondeterministic: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        out = self.model_dump(exclude={"tree", "nondeterministic"})
        if self.tree is not None:
            out["tree"] = self.tree
            out["nondeterministic"] = self.nondeterministic or []
        return out

    def _repr_html_(self) -> str:
        return trace_html(self)


def parse_root(text: str | int) -> int:
    """A root id as `dead --json` and `status --json` show them: a decimal 64-bit number."""
    value = str(text).strip()
    if not value.isdigit() or not 0 < int(value) < 1 << 64:
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise BadRequest(f"invalid root {shown!r}: a root is a decimal id, as `recovery dead --json` shows in "
                         "`roots` (or give --message with the message id in its source's terms)")
    return int(value)


# --- message ids ------------------------------------------------------------------------------------
def _spouts(wf: Workflow) -> list[Component]:
    return [c for c in wf.components if c.kind == "spout"]


def _salts(spout_id: str, rec: RunRecord) -> list[int]:
    """The spout's root salts of every root epoch the run used (0: its first ids)."""
    epochs = sorted({0, rec.root_epoch, *rec.root_epochs})
    return [ids.name_salt(spout_id, str(e)) if e else ids.name_salt(spout_id) for e in epochs]


def _two_numbers(text: str) -> tuple[int, int] | None:
    first, sep, second = text.rpartition(":")
    if sep and first.isdigit() and second.isdigit():
        return int(first), int(second)
    return None


def message_candidates(spout: Component, text: str) -> list[Any]:
    """The message ids `text` can be for this spout, in its source's terms (module doc); empty
    when it is not in the form that source's ids take."""
    impl = spout.impl
    if not isinstance(impl, SourceImpl):   # a spout class's own ids: as text, or a number
        return [text, int(text)] if text.lstrip("-").isdigit() else [text]
    if impl.type == "file":
        name, sep, offset = text.rpartition(":")
        return [(os.path.basename(name), int(offset))] if sep and name and offset.isdigit() else []
    if impl.type in LOG_SOURCES:
        pair = _two_numbers(text)
        return [pair] if pair is not None else []
    if impl.type == "spark":   # an id-field's value: its text, or the number it reads as
        out: list[Any] = [text]
        try:
            out.insert(0, int(text))
        except ValueError:
            try:
                out.append(float(text))
            except ValueError:
                pass
        return out
    return []


def shown_message(message_id: Any) -> Any:
    """A message id as `--message` takes it: FILE:OFFSET, PARTITION:OFFSET, an id-field's value."""
    if isinstance(message_id, (list, tuple)) and len(message_id) == 2 and isinstance(message_id[1], int):
        return f"{message_id[0]}:{message_id[1]}"
    if isinstance(message_id, bytes):
        return message_id.decode("utf-8", "replace")
    return message_id


def message_roots(wf: Workflow, rec: RunRecord, text: str) -> list[tuple[int, Any, str]]:
    """(root id, message id, spout) of every spout and root epoch `text` can name a message of;
    BadRequest when it is in no spout's form."""
    out = []
    for spout in _spouts(wf):
        for mid in message_candidates(spout, text):
            out += [(ids.root_id(salt, mid), mid, spout.id) for salt in _salts(spout.id, rec)]
    if not out:
        forms = sorted({_form(s) for s in _spouts(wf)})
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise BadRequest(f"invalid message id {shown!r}: run {rec.run_id}'s spouts take {' or '.join(forms)}")
    return out


def _form(spout: Component) -> str:
    impl = spout.impl
    if isinstance(impl, SourceImpl) and impl.type == "file":
        return "FILE:OFFSET (a file source's base name and byte offset)"
    if isinstance(impl, SourceImpl) and impl.type in LOG_SOURCES:
        return "PARTITION:OFFSET"
    return "the id-field value"


def search_message(client: Redis, wf: Workflow, rec: RunRecord, root: int) -> tuple[Any, str] | None:
    """(the message id of `root`, its spout), found by deriving the root ids of the positions
    the run's file and log sources read (vectorized, in batches); None when none of them is it
    (a spark or class spout's messages are not searched: their ids are the data's)."""
    wanted = np.uint64(root)
    for spout in _spouts(wf):
        impl = spout.impl
        if not isinstance(impl, SourceImpl):
            continue
        for salt in _salts(spout.id, rec):
            if impl.type == "file":
                found = _search_files(impl, wf, salt, wanted)
            elif impl.type in LOG_SOURCES:
                found = _search_log(client, rec.run_id, spout.id, salt, wanted)
            else:
                continue
            if found is not None:
                return found, spout.id
    return None


def _search_files(impl: SourceImpl, wf: Workflow, salt: int, wanted: np.uint64) -> Any:
    try:
        sources = files.source_files(impl, wf.base_dir)
    except (OSError, ValueError):   # the input moved or went since the run: nothing to search
        return None
    for source in sources:
        try:
            with source.open() as fh:
                data = fh.read()
        except OSError:
            continue
        starts = np.concatenate(([0], np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1))
        starts = starts[starts < len(data)].astype(np.uint64)
        for a in range(0, len(starts), SEARCH_BATCH):
            offs = starts[a:a + SEARCH_BATCH]
            hit = np.flatnonzero(ids.derive_many(salt, ids.position_hashes(source.name, offs)) == wanted)
            if hit.size:
                return (source.name, int(offs[hit[0]]))
    return None


def _search_log(client: Redis, run_id: str, spout_id: str, salt: int, wanted: np.uint64) -> Any:
    plan = log_offsets.replay_plan(client, run_id, spout_id)
    for p, spans in ((plan or {}).get("spans") or {}).items():
        for lo, hi in spans:
            for a in range(lo, hi, SEARCH_BATCH):
                offs = np.arange(a, min(hi, a + SEARCH_BATCH), dtype=np.uint64)
                hit = np.flatnonzero(ids.derive_many(salt, ids.pair_hashes(int(p), offs)) == wanted)
                if hit.size:
                    return (int(p), int(offs[hit[0]]))
    return None


# --- the trace -----------------------------------------------------------------------------------------
def _dead_letters_of(client: Redis, run_id: str, root: int) -> list[FailedTuple]:
    return [d for d in failed_queue.dead_letters(client, run_id) if root in d.roots]


def trace(client: Redis, run_id: str, root: str | int | None = None, message: str | None = None) -> RootTrace:
    """The trace of a root (`root`, its id, or `message`, its message id: module doc).
    RunNotFound, BadRequest (a root or message id in the wrong form) or RootNotFound (one the
    run holds nothing of: it never failed, or is not the run's): exit 2, one line."""
    rec = runs.get(client, run_id)
    if (root is None) == (message is None):
        raise BadRequest("give a root id or --message, not both")
    candidates: list[tuple[int, Any, str | None]] = [(parse_root(root), None, None)] if root is not None else \
        list(message_roots(rec.original_workflow(), rec, str(message)))
    for root_id, message_id, spout in candidates:
        found = _trace_of(client, rec, root_id, message_id, spout)
        if found is not None:
            return found
    shown = f"message {message!r} (root {candidates[0][0]})" if message is not None else f"root {candidates[0][0]}"
    raise RootNotFound(f"run {run_id} holds nothing of {shown}: a root leaves a record only when a tuple "
                       "of its tree fails or while it is pending (see `recovery dead --json` for roots)")


def _trace_of(client: Redis, rec: RunRecord, root: int, message_id: Any, spout: str | None) -> RootTrace | None:
    run_id = rec.run_id
    if message_id is None:   # a source's record that failed carries it; else the source's positions
        for e in (e for p in history.of_root(client, run_id, root) for e in p.events):
            if e.message_id is not None:
                message_id, spout = (tuple(e.message_id) if isinstance(e.message_id, list) else e.message_id,
                                     e.src_component or None)
                break
    if message_id is None:
        found = search_message(client, rec.original_workflow(), rec, root)
        if found is not None:
            message_id, spout = found
    # a root replay re-emits a message under a root id of its round's epoch: the message's roots
    # of every epoch the run used are this root's story
    aliases = [root]
    if message_id is not None and spout is not None and len(_salts(spout, rec)) > 1:
        aliases += [r for r in (ids.root_id(salt, message_id) for salt in _salts(spout, rec)) if r != root]
    where = [p for r in aliases for p in history.of_root(client, run_id, r)]
    events = sorted((e for p in where for e in p.events), key=lambda e: (e.time or 0.0, e.round or 0))
    letters = [d for r in aliases for d in _dead_letters_of(client, run_id, r)]
    dead = bool(failed_queue.dead_among(client, run_id, aliases))
    pending = not dead and bool(ledger.pending_among(client, run_id, aliases))
    if not events and not letters and not dead and not pending:
        return None
    failures, replays, requeued = [], [], []
    seen: set[tuple[str, int, int]] = set()   # (component, task, tuple id) that failed before
    for e in events:
        if e.kind == history.FAILED:
            failures.append(TraceFailure(component=e.component, task=e.task, round=e.round or 0,
                                         attempt=e.attempt or 0, error=e.error))
            if (e.component, e.task, e.tuple_id) in seen:   # it failed again where it was replayed
                replays.append(TraceReplay(round=e.round or 0, component=e.component, task=e.task))
            seen.add((e.component, e.task, e.tuple_id))
        elif e.kind == history.REPLAYED:
            replays.append(TraceReplay(round=e.round or 0, component=e.component, task=e.task))
        elif e.kind == history.REQUEUED and e.time is not None:
            requeued.append(e.time)
    replays = list({(r.round, r.component, r.task): r for r in replays}.values())
    state = DEAD if dead else PENDING if pending else COMPLETE
    reason = None
    if dead:
        gone = any(d.gone for d in letters) or any(e.gone for e in events if e.kind == history.FAILED)
        reason = MESSAGE_GONE if gone else RETRIES_EXHAUSTED
    if message_id is None:
        message_id = next((d.message_id for d in letters if d.message_id is not None), None)
    letter = letters[0] if letters else None
    return RootTrace(run_id=run_id, root=root, message_id=shown_message(message_id), state=state, reason=reason,
                     failures=failures, replays=sorted(replays, key=lambda r: (r.round, r.component, r.task)),
                     requeued=requeued,
                     dead_letter=ShownTuple.of(letter, failed_queue.dead_key(letter)).to_json() if letter else None,
                     dropped=sum(p.dropped for p in where))


# --- shown --------------------------------------------------------------------------------------------
def trace_lines(t: RootTrace) -> list[str]:
    """The trace as the terminal shows it (the caller escapes what came from data)."""
    state = t.state + (f" ({t.reason})" if t.reason else "")
    lines = [f"run {t.run_id}  root {t.root}  message {t.message_id if t.message_id is not None else '(unknown)'}",
             f"state: {state}"]
    if t.failures:
        lines.append(f"failures ({len(t.failures)}):")
        lines += [f"  round {f.round}  {f.component} task {f.task}  attempt {f.attempt}  {f.error}" for f in t.failures]
    else:
        lines.append("failures: none")
    if t.replays:
        lines.append("replays: " + ", ".join(f"round {r.round} at {r.component} task {r.task}" for r in t.replays))
    if t.requeued:
        lines.append("requeued: " + ", ".join(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(w))
                                              for w in t.requeued))
    if t.dead_letter is not None:
        d = t.dead_letter
        lines.append(f"dead letter: {d.get('key')}  attempts {d.get('attempt')}  error: {d.get('error')}")
    if t.dropped:
        lines.append(f"({t.dropped} events of these tasks were over recovery.history.max.events and not kept)")
    if t.tree is not None:
        lines.append(f"tree ({len(t.tree)} tuples, re-derived in a sandbox with the code as it is now):")
        for node in t.tree:
            agrees = {True: "agrees with the run", False: "DIFFERS from the run",
                      None: "not recorded"}[node["recorded"]]
            records = f"  records {node['records']}" if node.get("records") else ""
            lines.append(f"  tuple {node['id']}  {node['component']} task {node['task']}  stream {node['stream']}  "
                         f"parent {node['parent']}  {agrees}{records}")
        if t.nondeterministic:
            lines.append("not deterministic: " + ", ".join(t.nondeterministic))
    return lines


def trace_html(t: RootTrace) -> str:
    """The trace as an HTML fragment (a notebook, the web view), every value escaped."""
    def e(value: Any) -> str:
        return html.escape("" if value is None else str(value))
    state = e(t.state) + (f" ({e(t.reason)})" if t.reason else "")
    parts = [f'<div class="recovery-trace"><table class="summary"><tr><th>run</th><th>root</th><th>message</th>'
             f'<th>state</th></tr><tr><td>{e(t.run_id)}</td><td>{e(t.root)}</td><td>{e(t.message_id)}</td>'
             f'<td class="state">{state}</td></tr></table>']
    parts.append('<table class="failures"><tr><th>round</th><th>component</th><th>task</th><th>attempt</th>'
                 "<th>error</th></tr>")
    for f in t.failures:
        parts.append(f"<tr><td>{e(f.round)}</td><td>{e(f.component)}</td><td>{e(f.task)}</td>"
                     f"<td>{e(f.attempt)}</td><td>{e(f.error)}</td></tr>")
    parts.append("</table>")
    if t.replays:
        parts.append('<p class="replays">replayed: ' + ", ".join(
            f"round {e(r.round)} at {e(r.component)} task {e(r.task)}" for r in t.replays) + "</p>")
    if t.requeued:
        parts.append(f'<p class="requeued">requeued {len(t.requeued)} time{"s" if len(t.requeued) != 1 else ""}</p>')
    if t.dead_letter is not None:
        parts.append(f'<p class="dead-letter">dead letter {e(t.dead_letter.get("key"))}: '
                     f'{e(t.dead_letter.get("error"))}</p>')
    parts.append("</div>")
    return "".join(parts)
