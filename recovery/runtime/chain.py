"""A chain task: task i of each member of a chain (model.graph.ChainPlan), in one Spark task
and one Python worker, as Flink runs chained operators.

Each member keeps its own TaskRunner, so ids, anchoring, acks, counters, failed positions,
queues, keyed state and message timeouts are per member, exactly as in a stage of its own; the
members' XOR ledger contributions are combined at the commit and written once, by the head.
Only the transport differs: a chunk a member sends to a member of the chain (always its task i:
runtime.routing) is handed over in memory, never shuffled nor spilled; a chunk for a component
outside the chain leaves the stage (to Spark) and goes into the chain's one spill file (the
head's tracker's). Members run lazily, pulled from the last ones: along a line of
members one chunk is in memory at a time.

The chain task commits once for all its members (tracking.tracker's commit_together): the
chain's ledger pieces, then one commit point (one transaction) for all of them, then each
member's staged queue writes; a retried or resumed chain task whose commit exists replays its spill file
and re-executes no member.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from recovery.model.graph import Chain
from recovery.runtime.collector import Output
from recovery.runtime.task import TaskRunner
from recovery.tracking import ledger
from recovery.tracking.tracker import commit_together

# start(component id, input) -> (its runner, the iterator of its output): the runner of the
# member's execution mode (runtime.stage); `input` is the head's Spark input, or a member's
# chunks from its upstream member
Start = Callable[[str, Any], tuple[TaskRunner, Iterator[Output]]]


class ChainTask:
    """Task `index` of every member of `chain`, one after the other, fed in memory."""

    def __init__(self, chain: Chain, index: int, start: Start):
        self.chain = chain
        self.index = index
        self.start = start

    def run(self, head_input: Any) -> Iterator[Output]:
        members = self.chain.members
        inside = frozenset(members)
        inbox: dict[str, deque[Output]] = {m: deque() for m in members[1:]}
        outbox: deque[Output] = deque()
        outputs: dict[str, Iterator[Output]] = {}
        runners: list[TaskRunner] = []

        def pull(member: str) -> bool:
            """One more chunk of `member`'s output, passed on; False once it has ended."""
            item = next(outputs[member], None)
            if item is None:
                return False
            consumer = item[0][0]
            inbox.get(consumer, outbox).append(item)
            return True

        def fed(member: str, upstream: str) -> Iterator[Output]:
            """A member's input: its upstream member's chunks for it, pulled as it reads them."""
            box = inbox[member]
            while True:
                while box:
                    yield box.popleft()
                if not pull(upstream):
                    break
            while box:
                yield box.popleft()

        for m in members:
            # (generators: nothing runs before the first pull, below)
            feed = head_input if not runners else fed(m, runners[0].wf.component(m).inputs[0].source)
            runner, outputs[m] = self.start(m, feed)
            runners.append(runner)
            runner.in_chain = True
            runner.collector.local = inside
            runner.collector.spill = runners[0].tracker
        head = runners[0]
        if head.tracker is not None and head.tracker.committed() is not None:
            # committed with all its members: its outputs that leave the stage, from its spill
            yield from head.tracker.stored_output()
            return
        for m in reversed(members):   # the last members first: each pulls what it reads
            while pull(m):
                while outbox:
                    yield outbox.popleft()
        while outbox:
            yield outbox.popleft()
        if head.tracker is not None:
            self._commit(runners)

    def _commit(self, runners: list[TaskRunner]) -> None:
        trackers = [r.tracker for r in runners if r.tracker is not None]
        # the members commit at once, so their ledger contributions go in as one: XORed per root
        # here, the ids passed from member to member cancel, and a root's entry is written once
        # for the chain (by its head), not once per member
        merged = ledger.combine(r.collector.contributions() for r in runners)
        staged = [t.staged_commit(merged if i == 0 else {}, r.stats, r.state, r.commit_extra())
                  for i, (r, t) in enumerate(zip(runners, trackers))]
        if not commit_together(trackers, staged):
            # its run was taken over (or cleared) while it ran: nothing committed, nothing of
            # its output may flow on (the job fails; its driver says why)
            raise trackers[0].fenced_error()
        runners[0].drop_consumed_outputs(trackers[0], list(self.chain.members))
