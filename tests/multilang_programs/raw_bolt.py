"""A bolt speaking the multilang protocol by hand, misbehaving on request.

The first argument is the mode: "ok" (misbehave only on the values below), "noack" (read
everything, answer heartbeats, ack nothing), "nopid" (answers its pid, never writes the pid
file), "latepid" (answers its pid first, as Storm's storm.py does, and writes the pid file only
once it has read its first tuple: a host that checks the file when the pid arrives always finds
it missing), "crashstart" (exit before the handshake answer), "fork" (start a grandchild
`sleep` in its process group first).
Per tuple value, in mode "ok": "badjson", "noend" (an ack without its end line, then exit;
"noend-stay": then sleep),
"exit" (exit 3), "hang" (sleep), "unknown" (an unknown command), "garbage" (raw text before
the emit), "badstream" (an anchored emit on the undeclared stream "nowhere" first), "bigint"
(emits 2**70 instead, which JSON carries and msgpack cannot); anything else is emitted
(anchored) and acked.
"""
import subprocess
import sys
import time

from raw_protocol import handshake, late_pid, raw, read_msg, send

mode = sys.argv[1] if len(sys.argv) > 1 else "ok"


def before_pid(hello):
    if mode == "crashstart":
        sys.stderr.write("cannot start: missing configuration\n")
        sys.exit(5)
    if mode == "fork":
        child = subprocess.Popen(["sleep", "60"])
        sys.stderr.write("grandchild %d\n" % child.pid)
        sys.stderr.flush()


pid_file = handshake(mode, before_pid)

while True:
    msg = read_msg()
    late_pid(mode, pid_file)
    if msg.get("stream") == "__heartbeat":
        send({"command": "sync"})
        continue
    if mode == "noack":
        continue
    value = msg["tuple"][0] if msg["tuple"] else None
    if value == "badjson":
        raw("{this is not json\nend\n")
        continue
    if value in ("noend", "noend-stay"):
        raw('{"command": "ack", "id": "%s"}\n' % msg["id"])
        if value == "noend":
            sys.exit(0)
        time.sleep(3600)
    if value == "exit":
        sys.stderr.write("dying on purpose\n")
        sys.stderr.flush()
        sys.exit(3)
    if value == "hang":
        time.sleep(3600)
    if value == "unknown":
        send({"command": "dance", "id": msg["id"]})
        continue
    if value == "garbage":
        raw("Traceback? no, just text on stdout\n")
    if value == "badstream":
        send({"command": "emit", "anchors": [msg["id"]], "stream": "nowhere", "tuple": [value],
              "need_task_ids": False})
    if value == "bigint":
        value = 2 ** 70
    send({"command": "emit", "anchors": [msg["id"]], "tuple": [value], "need_task_ids": False})
    send({"command": "ack", "id": msg["id"]})
