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
    counts live in keyed state, which outlives the Spark task and the run."""

    def process(self, tup: Tuple) -> None:
        word = tup["word"]
        count = (self.state.get(word) or 0) + 1
        self.state.put(word, count)
        self.emit([word, count], anchors=[tup])
        self.ack(tup)
