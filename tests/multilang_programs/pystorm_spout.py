"""A pystorm 3.1.4 spout: emits "sentence i" with message id i for i < N (first argument,
default 5), re-emits what fails, then emits nothing (exhausted)."""
import sys

from pystorm import Spout


class Sentences(Spout):
    def initialize(self, conf, context):
        self.todo = list(range(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
        self.acked = []

    def next_tuple(self):
        if self.todo:
            i = self.todo.pop(0)
            self.emit(["sentence %d" % i], tup_id=i)

    def ack(self, tup_id):
        self.acked.append(tup_id)
        self.log("acked %s" % tup_id)

    def fail(self, tup_id):
        self.log("failed %s" % tup_id)
        self.todo.append(tup_id)

    def activate(self):
        self.log("activated")

    def deactivate(self):
        self.log("deactivated")


if __name__ == "__main__":
    Sentences().run()
