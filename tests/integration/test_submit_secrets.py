"""Secret-looking Spark properties from `--properties-file` during a real `recovery submit`: no
process's command line holds their values (any account reads /proc/PID/cmdline), the private
file that carried them to spark-submit is gone once the JVM started, and they still reach
Spark (an executor's environment holds the one it was given)."""
from __future__ import annotations

import fcntl
import os
import secrets
import subprocess
import sys
from pathlib import Path

from recovery.connectors.sink_folders import read_jsonl_dir
from tests.helpers import descendants, wait_for

WAIT = 240.0   # seconds a state may take to come on a loaded machine (bounds a hang only)


def _workflow(folder: Path, ctl: Path) -> Path:
    """spout -> gate -> out, where `gate` blocks in its first tuple while the test holds
    ctl/lock, and emits each line with the AWS secret its executor's environment holds."""
    pkg = f"secret_gate_{secrets.token_hex(4)}"
    (folder / pkg).mkdir()
    (folder / pkg / "__init__.py").write_text("")
    (folder / pkg / "components.py").write_text(f'''
import fcntl, os
from recovery import BasicBolt
CTL = {str(ctl)!r}

class Gate(BasicBolt):
    def process(self, tup):
        open(os.path.join(CTL, "entered-%d" % os.getpid()), "a").close()
        with open(os.path.join(CTL, "lock"), "rb") as lock:   # blocks while the test holds it
            fcntl.flock(lock, fcntl.LOCK_SH)
        self.emit([tup.values[0], os.environ.get("AWS_SECRET_ACCESS_KEY", "")])
''')
    (folder / "in.txt").write_text("a\nb\nc\n")
    xml = folder / "gated.xml"
    xml.write_text(f'''<workflow xmlns="urn:recovery:workflow:1" name="gated">
  <spout id="lines" parallelism="1"><source type="file" path="in.txt" format="text"/><stream fields="line"/></spout>
  <bolt id="gate" parallelism="1" class="{pkg}.components:Gate">
    <input from="lines" grouping="shuffle"/><stream fields="line key"/></bolt>
  <bolt id="out" parallelism="1"><sink type="jsonl" path="out"/><input from="gate" grouping="global"/></bolt>
</workflow>''')
    return xml


def _command_lines() -> dict[int, bytes]:
    """Every process's arguments as another account would read them."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    out[int(entry)] = fh.read()
            except OSError:   # ended meanwhile
                pass
    return out


def test_secret_properties_never_reach_a_command_line_yet_reach_spark(tmp_path, redis_url):
    values = {"spark.hadoop.fs.s3a.secret.key": f"S3KEY-{secrets.token_hex(8)}",
              "spark.executorEnv.AWS_SECRET_ACCESS_KEY": f"AWSKEY-{secrets.token_hex(8)}",
              "spark.recovery.test.db.password": f"DBPASS-{secrets.token_hex(8)}"}
    props = tmp_path / "spark.properties"
    props.write_text("".join(f"{k} {v}\n" for k, v in values.items()) + "spark.executor.memory 1g\n")
    props.chmod(0o600)
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    xml = _workflow(tmp_path, ctl)
    home = tmp_path / "home"
    lock = (ctl / "lock").open("wb")
    fcntl.flock(lock, fcntl.LOCK_EX)
    proc = subprocess.Popen([sys.executable, "-m", "recovery", "submit", str(xml), "--properties-file", str(props),
                             "--json"], env=dict(os.environ, RECOVERY_REDIS_URL=redis_url, RECOVERY_HOME=str(home)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def gate_entered() -> bool:
            assert proc.poll() is None, f"submit ended (exit {proc.returncode}) before its gate bolt ran"
            return any(p.name.startswith("entered-") for p in ctl.iterdir())

        wait_for(gate_entered, WAIT, "the run's gate bolt to hold its first tuple")
        # the run is mid-round: its JVM and a Python worker are up
        lines = _command_lines()
        ours = descendants(proc.pid)
        assert any(b"SparkSubmit" in lines.get(pid, b"") for pid in ours), "the run's JVM was not seen"
        leaks = {pid: key for pid, line in lines.items() for key, value in values.items() if value.encode() in line}
        assert leaks == {}
        # the file that carried them to spark-submit is gone once the JVM started
        assert [p.name for p in (home / "spark-conf").iterdir() if p.name != "log4j2.properties"] == []
    finally:
        lock.close()   # the gate goes on
        out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 0, err
    assert not any(value in out + err for value in values.values())
    # the executor's environment holds the key the file gave it: the properties reached Spark
    rows = list(read_jsonl_dir(str(tmp_path / "out")))
    assert sorted(r["line"] for r in rows) == ["a", "b", "c"]
    assert {r["key"] for r in rows} == {values["spark.executorEnv.AWS_SECRET_ACCESS_KEY"]}
