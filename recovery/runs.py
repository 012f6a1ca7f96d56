"""Run records: what was submitted, where it is, what it counted."""
from __future__ import annotations

import json
import os
import secrets
import socket
import time
from typing import Any

from recovery import keys
from recovery.errors import RunError

RUNNING = "running"
COMPLETED = "completed"      # every root complete
PENDING = "pending"          # failures queued for recovery
DEAD = "dead"                # nothing left to recover, but some roots are dead
CRASHED = "crashed"          # the driver died mid-round (found when its pid is gone)
ERROR = "error"              # Spark gave up on a round; `recover` resumes it


def new_run_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def _dec(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def create(client: Any, run_id: str, xml: str, wf_json: str, file: str | None, master: str,
           tracking: bool) -> None:
    now = time.time()
    client.hset(keys.run_record(run_id), mapping={
        "run_id": run_id, "xml": xml, "workflow_json": wf_json, "file": file or "",
        "master": master, "status": RUNNING, "started": now, "ended": "", "round": 0,
        "driver_pid": os.getpid(), "driver_host": socket.gethostname(),
        "tracking": int(tracking), "stats": "{}", "rounds": "[]",
    })
    client.zadd(keys.runs_index(), {run_id: now})


def get(client: Any, run_id: str) -> dict[str, Any]:
    raw = client.hgetall(keys.run_record(run_id))
    if not raw:
        raise RunError(f"no run {run_id!r} in this Redis (see `recovery runs`)")
    rec = {_dec(k): _dec(v) for k, v in raw.items()}
    for k in ("stats", "rounds", "summary"):
        if rec.get(k):
            rec[k] = json.loads(rec[k])
    return rec


def update(client: Any, run_id: str, **fields: Any) -> None:
    enc = {k: json.dumps(v) if isinstance(v, (dict, list)) else ("" if v is None else v)
           for k, v in fields.items()}
    client.hset(keys.run_record(run_id), mapping=enc)


def list_ids(client: Any) -> list[str]:
    return [_dec(r) for r in client.zrange(keys.runs_index(), 0, -1)]


def driver_alive(rec: dict[str, Any]) -> bool:
    """Is the driver of a `running` run still alive? (Only knowable on the same host.)"""
    if rec.get("driver_host") != socket.gethostname():
        return True
    try:
        pid = int(rec.get("driver_pid") or 0)
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped by its parent) is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True


def status_of(rec: dict[str, Any]) -> str:
    if rec.get("status") == RUNNING and not driver_alive(rec):
        return CRASHED
    return rec.get("status", "")
