"""Components of workflows/wordcount.xml."""
from __future__ import annotations

import re

from recovery import BasicBolt, Bolt, Tuple

WORD = re.compile(r"[a-z0-9']+")


class SplitSentence(BasicBolt):
    """sentence -> one tuple per word (lower case, punctuation dropped). A BasicBolt: every
    emit is anchored to the sentence, which is acked when process() returns."""

    def process(self, tup: Tuple) -> None:
        for word in WORD.findall(tup["sentence"].lower()):
            self.emit([word])


class WordCount(Bolt):
    """word -> [word, count so far]. Explicit anchoring and ack, as Storm's IRichBolt; the
    counts live in keyed state, which outlives the Spark task and the run.

    Which occurrence of a word gets which count depends on arrival order, but the records
    of a word are [word, 1] .. [word, n] whatever the order: after a recovery the sink holds
    the same records as a failure-free run (as a multiset), and the state the same counts."""

    def process(self, tup: Tuple) -> None:
        word = tup["word"]
        count = (self.state.get(word) or 0) + 1
        self.state.put(word, count)
        self.emit([word, count], anchors=[tup])
        self.ack(tup)
