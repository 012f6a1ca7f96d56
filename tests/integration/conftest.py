"""Integration fixtures: one real local Spark session for the whole test session, and copies
of the example workflows in a temporary folder (sinks write next to the XML)."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from recovery.connectors.sink_folders import read_jsonl_dir
from recovery.jobs import submit as jobs_submit
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import keys
from tests.helpers import descendants, running, wait_for

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
# Debian's JDBC driver for PostgreSQL (libpostgresql-jdbc-java; .ci/run installs it): the
# session has it when it is there, so that spark sources read format="jdbc" from the test server
POSTGRES_JDBC_JAR = Path("/usr/share/java/postgresql.jar")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from recovery.engine.session import session
    home = tmp_path_factory.mktemp("spark-home")
    conf = {"spark.default.parallelism": "2"}
    if POSTGRES_JDBC_JAR.exists():
        conf["spark.jars"] = str(POSTGRES_JDBC_JAR)
    # local[2,3]: two cores, and a task may fail up to 3 times (Spark retries are tested)
    s = session("local[2,3]", conf, home=home)
    yield s
    s.stop()


def copy_workflow(name: str, dest: Path) -> Path:
    """workflows/NAME.xml with its package and data, copied under dest; returns the XML path."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(WORKFLOWS / f"{name}.xml", dest / f"{name}.xml")
    if (WORKFLOWS / name).is_dir():
        shutil.copytree(WORKFLOWS / name, dest / name, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(WORKFLOWS / "data", dest / "data", dirs_exist_ok=True)
    return dest / f"{name}.xml"


def with_absolute_paths(xml: Path) -> Path:
    """The workflow file with its relative `path=` attributes made absolute (against its folder),
    as a submit to a cluster's master needs them: a mount every host shares."""
    text = re.sub(r'\bpath="(?![/"]|[A-Za-z][A-Za-z0-9+.-]*:)', f'path="{xml.parent}/', xml.read_text())
    xml.write_text(text)
    return xml


def submit(spark: Any, redis_url: str, client: Any, xml_path: Path, config: dict[str, str] | None = None,
           tracking: bool = True, run_id: str | None = None) -> dict:
    wf = workflow_xml.load(xml_path)
    wf = wf.with_config(config or {})
    return jobs_submit.submit(spark, client, redis_url, wf, xml_path.read_text(), str(xml_path),
                       tracking_on=tracking, run_id=run_id)


def topic_copy_xml(name: str, *, topic: str = "events", spouts: int = 2, fields: str = "id word",
                   config: dict[str, str] | None = None, dead: str = "") -> str:
    """A workflow copying the JSON records of a Redis-stream topic into the jsonl sink out/copy:
    spout `events` (`spouts` tasks), bolt `out` (2 tasks, shuffle); `config` its properties,
    `dead` its <dead-letters> element."""
    head = ""
    if config:
        props = "".join(f'    <property name="{k}" value="{v}"/>\n' for k, v in config.items())
        head += f"  <config>\n{props}  </config>\n"
    if dead:
        head += f"  {dead}\n"
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<workflow xmlns="urn:recovery:workflow:1" name="{name}">
{head}  <spout id="events" parallelism="{spouts}">
    <source type="redis-stream" topic="{topic}" format="jsonl"/>
    <stream fields="{fields}"/>
  </spout>
  <bolt id="out" parallelism="2">
    <sink type="jsonl" path="out/copy"/>
    <input from="events" grouping="shuffle"/>
  </bolt>
</workflow>
"""


def valid_cdn_lines(lines: list[str]) -> list[list]:
    """[key, host, minute, code, bytes, dltime] of each cdn.log line the cdn_logs workflow accepts
    (its own functions, workflows/cdn_logs/components.py, loaded as plain Python)."""
    spec = importlib.util.spec_from_file_location("_cdn_reference", WORKFLOWS / "cdn_logs" / "components.py")
    assert spec is not None and spec.loader is not None
    comp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(comp)
    out = []
    for line in lines:
        try:
            f = comp.parse_line(line)
            out.append(comp.normalize(f[3], f[1], f[7], f[8], f[9]))
        except ValueError:
            pass
    return out


def sink_records(folder: Path) -> list[str]:
    """A jsonl sink's contents as a sorted list of canonical JSON lines (a multiset)."""
    import json
    return sorted(json.dumps(r, sort_keys=True) for r in read_jsonl_dir(str(folder)))


def start_submit(redis_url: str, xml: Path, run_id: str, props: dict[str, str], *options: str) -> subprocess.Popen:
    """A CLI `submit` of `xml` under `run_id` with `-p` properties (a driver to kill), its output
    discarded."""
    cmd = [sys.executable, "-m", "recovery", "submit", str(xml), "--run-id", run_id, "--json", *options]
    for k, v in props.items():
        cmd += ["-p", f"{k}={v}"]
    return subprocess.Popen(cmd, env=dict(os.environ, RECOVERY_REDIS_URL=redis_url),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kill_when_round_0(proc: subprocess.Popen, client: Any, run_id: str,
                      reached: Callable[[set[str]], bool], what: str) -> set[str]:
    """SIGKILL the driver `proc` once round 0's done markers (the tasks committed) satisfy
    `reached`; a driver that ends by itself first fails the test. Returns the markers then."""
    def done() -> set[str]:
        return {f.decode() for f in client.hkeys(keys.task_done(run_id, 0))}

    def kill_point() -> bool:
        if reached(done()):
            return True
        assert proc.poll() is None, f"submit ended (exit {proc.returncode}) before {what}"
        return False

    left: set[int] = set()
    try:
        wait_for(kill_point, 240, f"round 0 of {run_id} to reach {what}")
        left = descendants(proc.pid)   # its JVM and Spark's Python workers, still at work
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the driver ended by itself before the kill"
    # The JVM and its Python workers notice the driver's end by themselves: a task that had just
    # committed may still be dropping the spill files it consumed. What the test reads next is
    # the state they leave, once they are gone.
    wait_for(lambda: not any(running(p) for p in left), 120, "the killed driver's JVM and workers to end")
    return done()


WHERE_MODULE = '''
import os
from recovery import BasicBolt


class Where(BasicBolt):
    """Each word with the task that got it, and the folder its code was loaded from."""

    def process(self, tup):
        self.emit([tup.values[0], tup.task, os.path.dirname(os.path.abspath(__file__))])
'''

WHERE_XML = '''<workflow xmlns="urn:recovery:workflow:1" name="where">
  <spout id="words" parallelism="2">
    <source type="file" path="words.txt" format="text"/>
    <stream fields="word"/>
  </spout>
  <bolt id="where" parallelism="{parallelism}" class="where_code.where:Where">
    <input from="words" grouping="fields" fields="word"/>
    <stream fields="word task folder"/>
  </bolt>
  <bolt id="out" parallelism="1">
    <sink type="jsonl" path="out"/>
    <input from="where" grouping="shuffle"/>
  </bolt>
</workflow>
'''


def where_workflow(folder: Path, parallelism: int, n: int = 600) -> tuple[Path, list[str]]:
    """A workflow whose `where` bolt (fields grouping on the word, `parallelism` tasks) writes
    each word with the task that got it; its XML and its words."""
    (folder / "where_code").mkdir(parents=True)
    (folder / "where_code" / "__init__.py").write_text("")
    (folder / "where_code" / "where.py").write_text(WHERE_MODULE)
    words = [f"w{i % 97}-{i % 13}" for i in range(n)]
    (folder / "words.txt").write_text("\n".join(words) + "\n")
    (folder / "where.xml").write_text(WHERE_XML.format(parallelism=parallelism))
    return folder / "where.xml", words


def assert_router_tasks(xml: Path, records: list[dict], parallelism: int) -> None:
    """Every record of the `where` workflow came from the task the per-tuple router picks for
    its word, and every task got some."""
    from recovery.model.graph import TaskMap
    from recovery.runtime.routing import Router
    wf = workflow_xml.load(xml)
    tm = TaskMap.of(wf)
    router = Router(wf, tm, "words")
    for r in records:
        (_, index), _, _ = router.route("default", [r["word"]], 0, None)[0]
        assert r["task"] == tm.task_id("where", index), r
    assert len({r["task"] for r in records}) == parallelism
