"""Storm's multilang protocol by hand, for raw_bolt.py and raw_spout.py: messages read and
written as JSON followed by "end", the handshake, and the pid file, which modes "nopid" and
"latepid" leave out or write late on purpose."""
import json
import os
import sys


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


def handshake(mode, before_pid=None):
    """Read the handshake, call `before_pid(handshake)` (a mode that misbehaves before it
    answers), write the pid file unless the mode is "nopid" or "latepid", answer the pid;
    returns the pid file's path."""
    hello = read_msg()
    if before_pid is not None:
        before_pid(hello)
    pid_file = os.path.join(hello["pidDir"], str(os.getpid()))
    if mode not in ("nopid", "latepid"):
        open(pid_file, "w").close()
    send({"pid": os.getpid()})
    return pid_file


def late_pid(mode, pid_file):
    """Mode "latepid": the pid file written once the first message after the handshake is read."""
    if mode == "latepid" and not os.path.exists(pid_file):
        open(pid_file, "w").close()
