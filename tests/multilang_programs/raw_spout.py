"""A spout speaking the multilang protocol by hand: emits 0..4 (message id = value, task ids
requested as in Storm's default) then nothing. Mode "exit" / "hang" / "garbage" misbehaves
once on the third `next` (a marker file, the second argument, remembers it did).
Mode "nopid" answers its pid and never writes the pid file; "latepid" answers its pid first (as
Storm's storm.py does) and writes the file only once it has read its first command.
Mode "badstream" emits message 2 on the undeclared stream "nowhere"; "badstream-retry" also
re-emits every message it is told failed, at its next `next` (a spout that retries for ever)."""
import os
import sys
import time

from raw_protocol import handshake, late_pid, raw, read_msg, send

mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
marker = sys.argv[2] if len(sys.argv) > 2 else None
pid_file = handshake(mode)
count = 0
retry = []
while True:
    cmd = read_msg()
    late_pid(mode, pid_file)
    if cmd["command"] == "next" and retry:
        mid = retry.pop(0)
        send({"command": "emit", "id": mid, "tuple": [mid], "stream": "nowhere"})
        read_msg()                      # its task ids
    elif cmd["command"] == "next":
        if count == 2 and mode in ("exit", "hang", "garbage") and not os.path.exists(marker):
            open(marker, "w").close()
            if mode == "exit":
                sys.exit(4)
            if mode == "hang":
                time.sleep(3600)
            if mode == "garbage":
                raw("not the protocol\n")
        if count < 5:
            emit = {"command": "emit", "id": count, "tuple": [count]}
            if count == 2 and mode.startswith("badstream"):
                emit["stream"] = "nowhere"
            send(emit)
            ids = read_msg()
            if not isinstance(ids, list):
                sys.stderr.write("expected task ids, got %r\n" % (ids,))
                sys.exit(9)
            send({"command": "log", "msg": "sent %d to %s" % (count, ids)})
        count += 1
    elif cmd["command"] in ("ack", "fail"):
        send({"command": "log", "msg": "%s %s" % (cmd["command"], cmd["id"])})
        if cmd["command"] == "fail" and mode == "badstream-retry":
            retry.append(cmd["id"])
    send({"command": "sync"})
