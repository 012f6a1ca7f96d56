"""A pystorm bolt (auto-anchored, auto-acked): a sentence into its words.

For failure demos and tests: with the topology property `wordcount_shell.fail.word` set, a
sentence holding that word raises, once per sentence, the first time it is seen (a marker
file per sentence in `wordcount_shell.fail.markers`), so recovery's replay succeeds."""
import hashlib
import os

from pystorm import Bolt


class SplitSentence(Bolt):
    def initialize(self, conf, context):
        self.fail_word = conf.get("wordcount_shell.fail.word")
        self.markers = conf.get("wordcount_shell.fail.markers")

    def process(self, tup):
        sentence = tup.values[0]
        words = sentence.split()
        if self.fail_word and self.fail_word in words and self.markers:
            marker = os.path.join(self.markers, hashlib.sha1(sentence.encode()).hexdigest())
            if not os.path.exists(marker):
                open(marker, "w").close()
                raise ValueError("transient failure on %r" % sentence)
        for word in words:
            self.emit([word])


if __name__ == "__main__":
    SplitSentence().run()
