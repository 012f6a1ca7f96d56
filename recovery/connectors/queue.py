"""The queue source: a recovery round's spout that replays a failed position's queued tuples
(the recovery workflow's `<source type="queue" component= tasks=>`, model/synthesis.py), read by
the Spark task of that position (never by the driver)."""
from __future__ import annotations

import functools
import time
from collections.abc import Iterator

from recovery.connectors.files import decoder
from recovery.connectors.runner import SourceRunner
from recovery.model.workflow import SourceImpl
from recovery.tracking import queue as failed_queue


def queue_source(runner: SourceRunner) -> Iterator[None]:
    """Replays a failed position's cached queue: each tuple goes, with its id, roots, source and
    stream unchanged, directly to the task where it failed (a spout position's raw records are
    decoded again, as the spout would)."""
    impl = runner.comp.impl
    assert isinstance(impl, SourceImpl)   # the factory runs a source only for a <source>
    target = impl.param("component", "")   # required by the parser
    tasks = [int(t) for t in (impl.param("tasks") or "").split()]
    replaces_spout = target == runner.component_id
    if replaces_spout:   # the spout itself is replaced: each task replays its own position
        tasks = [t for t in tasks if t == runner.task_id]
    now = time.time()
    client, run_id = runner.client, runner.spec.run_id
    assert client is not None   # the runner connects for a queue source (TaskRunner._needs_redis)
    for task in tasks:
        waiting = []   # not_before of the tuples left backing off
        for rec in failed_queue.read(client, run_id, target, task):
            if (rec.not_before or 0) > now:
                waiting.append(rec.not_before or 0.0)
                continue   # still backing off: a later round takes it
            attempt = rec.attempt + 1
            if replaces_spout:
                fmt = rec.format or "text"
                stream = runner.comp.stream(rec.stream or "default") or runner.comp.streams[0]
                decode = decoder(fmt, stream.fields)
                raw = rec.raw
                mid = tuple(rec.message_id) if isinstance(rec.message_id, list) else rec.message_id
                # (its own root id: a dead letter requeued after a root replay was made under
                # another epoch's ids than the run's current one, and its entry is under it)
                if rec.gone:   # a requeued dead letter whose message was gone: it still is
                    runner.message_gone(mid, rec.error, stream.id, fmt, attempt, replayed=True, root=rec.id)
                    continue
                runner.spout_record(mid, functools.partial(decode, raw), raw, stream.id, fmt, attempt,
                                    replayed=True, root=rec.id)
            else:
                runner.replay_to(target, task, rec, attempt)
        # the position's earliest time is now exactly that of the tuples left waiting (the
        # replayed ones, when they fail again, are added back by the commit that queues them,
        # which comes after this one: their task consumes this one's output)
        failed_queue.reset_due(client, run_id, runner.spec.generation, target, task,
                               min(waiting) if waiting else None)
        yield None

