"""pystorm 3.1.4 bolts for tests/unit/multilang/test_multilang.py; the first argument picks one."""
import sys
import time

from pystorm import Bolt


class PassThrough(Bolt):
    """auto_anchor + auto_ack, need_task_ids false: the throughput case."""

    def process(self, tup):
        self.emit(tup.values)


class Split(Bolt):
    """auto_ack: one anchored emit per word."""

    def process(self, tup):
        for word in tup.values[0].split():
            self.emit([word])


class AckFail(Bolt):
    """Explicit: fails odd numbers, emits and acks even ones."""
    auto_ack = False
    auto_anchor = False

    def process(self, tup):
        n = tup.values[0]
        if n % 2:
            self.fail(tup)
        else:
            self.emit([n * 10], anchors=[tup])
            self.ack(tup)


class Pairs(Bolt):
    """Holds every other tuple and emits the pair anchored to both (multi-anchoring)."""
    auto_ack = False
    auto_anchor = False
    held = None

    def process(self, tup):
        if self.held is None:
            self.held = tup
            return
        first, self.held = self.held, None
        self.emit([first.values[0], tup.values[0]], anchors=[first, tup])
        self.ack(first)
        self.ack(tup)


class TaskIds(Bolt):
    """Asks for task ids and emits them on stream "ids"."""

    def process(self, tup):
        ids = self.emit(tup.values, need_task_ids=True)
        self.emit(["ids", ids], stream="ids")


class Direct(Bolt):
    """Direct emits to task 3 (pystorm never waits for ids here)."""

    def process(self, tup):
        ids = self.emit(tup.values, direct_task=3, need_task_ids=True)
        self.emit(["direct", ids], stream="ids")


class Ticks(Bolt):
    def process(self, tup):
        self.emit(tup.values)

    def process_tick(self, tup):
        self.emit(["tick", tup.values[0]], stream="ticks")


class Slow(Bolt):
    """Each tuple takes 0.4 s (longer than the heartbeat interval the test sets)."""

    def process(self, tup):
        time.sleep(0.4)
        self.emit(tup.values)


class Metrics(Bolt):
    count = 0

    def process(self, tup):
        self.count += 1
        self.report_metric("seen", self.count)
        self.emit(tup.values)


class Raises(Bolt):
    """Raises on "bad": pystorm sends log, error, sync, fail and exits 1."""

    def process(self, tup):
        if tup.values[0] == "bad":
            raise ValueError("cannot handle %r" % tup.values[0])
        self.emit(tup.values)


class Prints(Bolt):
    """print() on "bad": raw text in the protocol stream."""

    def process(self, tup):
        if tup.values[0] == "bad":
            print("debugging output from a bolt", flush=True)
        self.emit(tup.values)


class Context(Bolt):
    """Emits what the handshake told it, once per tuple."""

    def initialize(self, conf, context):
        self.seen = [conf.get("topology.subprocess.timeout.secs"), conf.get("topology.name"),
                     conf.get("recovery.tracking"), context.get("componentid"),
                     context.get("taskid"), context.get("stream->outputfields"),
                     context.get("source->stream->fields")]

    def process(self, tup):
        self.emit(self.seen + [list(tup.values), tup.values.word])


class Logs(Bolt):
    def process(self, tup):
        self.log("seen %s" % tup.values[0], level="warn")
        self.emit(tup.values)


BOLTS = {"passthrough": PassThrough, "split": Split, "ackfail": AckFail, "pairs": Pairs,
         "taskids": TaskIds, "direct": Direct, "ticks": Ticks, "slow": Slow,
         "metrics": Metrics, "context": Context, "raises": Raises, "prints": Prints, "logs": Logs}

if __name__ == "__main__":
    BOLTS[sys.argv[1]]().run()
