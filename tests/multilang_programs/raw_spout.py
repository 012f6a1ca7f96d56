"""A spout speaking the multilang protocol by hand: emits 0..4 (message id = value, task ids
requested as in Storm's default) then nothing. Mode "exit" / "hang" / "garbage" misbehaves
once on the third `next` (a marker file, the second argument, remembers it did)."""
import json
import os
import sys
import time


def read_msg():
    lines = []
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        if line == "end\n":
            return json.loads("".join(lines))
        lines.append(line)


def raw(text):
    sys.stdout.write(text)
    sys.stdout.flush()


def send(obj):
    raw(json.dumps(obj) + "\nend\n")


mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
marker = sys.argv[2] if len(sys.argv) > 2 else None
handshake = read_msg()
open(os.path.join(handshake["pidDir"], str(os.getpid())), "w").close()
send({"pid": os.getpid()})
count = 0
while True:
    cmd = read_msg()
    if cmd["command"] == "next":
        if count == 2 and mode != "ok" and not os.path.exists(marker):
            open(marker, "w").close()
            if mode == "exit":
                sys.exit(4)
            if mode == "hang":
                time.sleep(3600)
            if mode == "garbage":
                raw("not the protocol\n")
        if count < 5:
            send({"command": "emit", "id": count, "tuple": [count]})
            ids = read_msg()
            if not isinstance(ids, list):
                sys.stderr.write("expected task ids, got %r\n" % (ids,))
                sys.exit(9)
            send({"command": "log", "msg": "sent %d to %s" % (count, ids)})
        count += 1
    elif cmd["command"] in ("ack", "fail"):
        send({"command": "log", "msg": "%s %s" % (cmd["command"], cmd["id"])})
    send({"command": "sync"})
