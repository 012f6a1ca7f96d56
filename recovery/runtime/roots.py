"""The root ids of a spout task: each root's id is derived from its message id (a built-in
source's position, a spout's message id), so a replay of the source yields the same ids."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from redis import Redis
from redis.typing import EncodableT, FieldT

from recovery.model.run import RunSpec
from recovery.tracking import ids, keys


class SpoutRoots:
    """The roots one spout task makes: their ids (salted per root epoch), the root-replay
    round's selection of the failed ones, their count in the task's stats, and the message id
    of each (the spout is told its fates later)."""

    def __init__(self, spec: RunSpec, component_id: str, stats: dict[str, float],
                 replay_client: Callable[[], Redis]):
        self.spec = spec
        self.component_id = component_id
        self.stats = stats
        self.replay_client = replay_client   # where a root-replay round's replay set is read
        self.made: set[int] = set()          # roots this task made (message ids are unique)
        self.messages: list[list] = []       # [root, message id]: acked/failed later
        self._salts: dict[int, int] = {}
        self._replay_set: frozenset[int] | None = None
        self._failed_at: dict[int, int] = {}   # old root -> the attempt it failed at (root replay)

    def salt(self, epoch: int) -> int:
        got = self._salts.get(epoch)
        if got is None:   # a blake2b per record would cost more than the record's routing
            got = self._salts[epoch] = (ids.name_salt(self.component_id, str(epoch)) if epoch
                                        else ids.name_salt(self.component_id))
        return got

    def root_id(self, message_id: Any) -> int:
        return ids.root_id(self.salt(self.spec.root_epoch), message_id)

    def selected(self, message_id: Any) -> bool:
        """Root replay re-reads the source and emits only the failed roots (by their old ids),
        read from the round's replay set once per task (it holds failed roots only)."""
        if not self.spec.root_replay:
            return True
        replay = self.replay_set()
        for epoch in (self.spec.filter_epoch, *self.spec.old_epochs):
            old = ids.root_id(self.salt(epoch), message_id)
            if old in replay:
                self.count_attempts({self.root_id(message_id): old})
                return True
        return False

    def replay_set(self) -> frozenset[int]:
        """The failed roots a root-replay round re-emits (its replay set, read once per task)."""
        if self._replay_set is None:
            client = self.replay_client()
            members = client.smembers(keys.root_replay_set(self.spec.run_id, self.spec.round))
            self._replay_set = frozenset(int(r) for r in members)
            found = client.hgetall(keys.root_replay_attempts(self.spec.run_id, self.spec.round))
            self._failed_at = {int(r): int(a) for r, a in found.items() if int(r) in self._replay_set}
        return self._replay_set

    def count_attempts(self, renamed: dict[int, int]) -> None:
        """Each replay of a root is an attempt of that root: the round's attempt of each root
        re-emitted (new id -> its old id's) is one more than the attempt it failed at, written
        before the root is emitted, so that a task failing one of its tuples in this round
        (tracking.tracker.TaskTracker.failure) counts that attempt, and after the bound makes
        it dead, as a localized replay does."""
        attempts: dict[FieldT, EncodableT] = {new: self._failed_at.get(old, 1) + 1 for new, old in renamed.items()}
        if attempts:
            self.replay_client().hset(keys.root_replay_attempts(self.spec.run_id, self.spec.round),
                                      mapping=attempts)

    def count(self, replayed: bool, n: int = 1) -> None:
        """`roots` counts each root once over a run's rounds: a replay (from a queue, or a
        root replay) is counted apart."""
        if replayed or self.spec.root_replay:
            self.stats["replayed_roots"] = self.stats.get("replayed_roots", 0) + n
        else:
            self.stats["roots"] += n

    # -- a block of roots at once (the batched file source), by their message ids' hashes --------
    def selected_many(self, hashes: np.ndarray) -> np.ndarray | None:
        """Which of the messages hashing to `hashes` (ids.position_hashes) a root-replay round
        re-emits, as a bool mask; None when every one is emitted (not a root replay)."""
        if not self.spec.root_replay:
            return None
        replay = self.replay_set()
        members = np.fromiter(replay, dtype=np.uint64, count=len(replay))
        old = ids.derive_many(self.salt(self.spec.filter_epoch), hashes)
        mask = np.isin(old, members)
        for epoch in self.spec.old_epochs:   # (selected by the first epoch whose id is in the set)
            older = ids.derive_many(self.salt(epoch), hashes)
            found = ~mask & np.isin(older, members)
            old[found] = older[found]
            mask |= found
        if mask.any():
            self.count_attempts(dict(zip(self.root_ids(hashes[mask]).tolist(), old[mask].tolist())))
        return mask

    def root_ids(self, hashes: np.ndarray) -> np.ndarray:
        """The root ids of the messages hashing to `hashes` (root_id's, by array)."""
        return ids.derive_many(self.salt(self.spec.root_epoch), hashes)
