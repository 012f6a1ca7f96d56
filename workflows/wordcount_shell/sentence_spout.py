"""A pystorm spout: the lines of a text file, split across the spout's tasks by line number
(task i of n takes lines i, i+n, ...), each emitted once with its line number as message id;
it re-emits what fails and emits nothing more once every line went out. With the topology
property `wordcount_shell.fates` it appends each "ack ID" / "fail ID" it hears to that file."""
import sys

from pystorm import Spout


class SentenceSpout(Spout):
    def initialize(self, conf, context):
        me = context["componentid"]
        tasks = sorted(int(t) for t, c in context["task->component"].items() if c == me)
        index, n = tasks.index(int(context["taskid"])), len(tasks)
        with open(sys.argv[1], encoding="utf-8") as fh:
            lines = [l.rstrip("\n") for l in fh]
        self.todo = [(i, l) for i, l in enumerate(lines) if i % n == index and l.strip()]
        self.by_id = dict(self.todo)
        self.fates = conf.get("wordcount_shell.fates")

    def _note(self, what, tup_id):
        if self.fates:
            with open(self.fates, "a") as fh:
                fh.write("%s %s\n" % (what, tup_id))

    def ack(self, tup_id):
        self._note("ack", tup_id)

    def next_tuple(self):
        if self.todo:
            i, line = self.todo.pop(0)
            self.emit([line], tup_id=i)

    def fail(self, tup_id):
        self._note("fail", tup_id)
        self.todo.append((tup_id, self.by_id[tup_id]))


if __name__ == "__main__":
    SentenceSpout().run()
