"""A minimal client of Storm's multilang protocol with the API of Storm's storm.py
(`storm.BasicBolt`, `storm.emit`, `storm.Tuple`), for the tests: JSON messages ended by a line
`end`; the handshake writes the pid file and answers the pid; every emit waits for its task
ids, as storm.py's does; a heartbeat is answered with `sync`; BasicBolt anchors its emits to
the input and acks it after `process`, or fails it when `process` raises."""
import json
import os
import sys
import traceback

_pending_tuples = []
_anchor = None


def _read_message():
    lines = []
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        if line == "end\n":
            return json.loads("".join(lines))
        lines.append(line)


def _send(message):
    sys.stdout.write(json.dumps(message) + "\nend\n")
    sys.stdout.flush()


class Tuple:
    def __init__(self, id, component, stream, task, values):
        self.id, self.component, self.stream, self.task, self.values = id, component, stream, task, values


def _read_tuple():
    while True:
        if _pending_tuples:
            message = _pending_tuples.pop(0)
        else:
            message = _read_message()
            if isinstance(message, list):   # task ids nobody waits for
                continue
        return Tuple(message["id"], message["comp"], message["stream"], message["task"], message["tuple"])


def emit(values, stream=None, anchors=None):
    anchors = anchors if anchors is not None else ([_anchor] if _anchor is not None else [])
    message = {"command": "emit", "tuple": values, "anchors": [a.id for a in anchors]}
    if stream is not None:
        message["stream"] = stream
    _send(message)
    while True:   # the task ids come back; tuples read meanwhile wait their turn
        reply = _read_message()
        if isinstance(reply, list):
            return reply
        _pending_tuples.append(reply)


def ack(tup):
    _send({"command": "ack", "id": tup.id})


def fail(tup):
    _send({"command": "fail", "id": tup.id})


def _handshake():
    setup = _read_message()
    pid = os.getpid()
    _send({"pid": pid})
    open(os.path.join(setup["pidDir"], str(pid)), "w").close()
    return setup["conf"], setup["context"]


class BasicBolt:
    def initialize(self, conf, context):
        pass

    def process(self, tup):
        pass

    def run(self):
        global _anchor
        conf, context = _handshake()
        self.initialize(conf, context)
        while True:
            tup = _read_tuple()
            if tup.task == -1 and tup.stream == "__heartbeat":
                _send({"command": "sync"})
                continue
            _anchor = tup
            try:
                self.process(tup)
                ack(tup)
            except Exception:
                _send({"command": "log", "msg": traceback.format_exc()})
                fail(tup)
            finally:
                _anchor = None
