"""The workflow's code a run shipped: its digest in the run record; `recover` refuses changed
code in one line unless --code-changed, which stores the new digest; a cluster's master with the
embedded Redis is refused before anything starts."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from recovery import testing
from recovery.cli import main
from recovery.errors import RunError
from recovery.jobs import recover, submit
from recovery.model import code
from recovery.model.xml.parse import load
from recovery.tracking import runs

XML = f"""<workflow xmlns="urn:recovery:workflow:1" name="w">
  <spout id="s" class="{testing.TESTING_SPOUT}"><stream fields="x"/></spout>
  <bolt id="b" class="mine.bolts:Pass"><input from="s"/></bolt>
</workflow>"""


def workflow_folder(tmp_path: Path) -> Path:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "__init__.py").write_text("")
    (tmp_path / "mine" / "bolts.py").write_text("from recovery import BasicBolt\n\n\nclass Pass(BasicBolt):\n"
                                                "    def process(self, tup):\n        self.emit(tup.values)\n")
    (tmp_path / "w.xml").write_text(XML)
    return tmp_path / "w.xml"


def stored_run(client, xml: Path, run_id: str = "r1") -> str:
    """A run as submit stores it (the plan's digest in the record); its status settled."""
    wf = load(xml)
    plan = submit.prepare(wf, XML, str(xml), run_id=run_id)
    assert plan.code_digest == code.bundle(wf).digest
    lease = runs.create(client, run_id, XML, wf.to_task_json(), str(xml), "local", True)
    runs.update(client, run_id, lease.generation, code_digest=plan.code_digest, status=runs.PENDING)
    lease.release()
    return plan.code_digest


def test_recover_refuses_changed_code_unless_told_and_then_stores_the_new_digest(fake_redis, tmp_path):
    xml = workflow_folder(tmp_path)
    digest = stored_run(fake_redis, xml)
    assert recover.prepare(fake_redis, "r1").new_code_digest is None   # unchanged: nothing to say
    (tmp_path / "mine" / "bolts.py").write_text((tmp_path / "mine" / "bolts.py").read_text() + "# fixed\n")
    with pytest.raises(RunError) as refused:
        recover.prepare(fake_redis, "r1")
    assert str(refused.value) == (
        f"run r1: the workflow's code in {tmp_path} changed since it was submitted (sha256 {digest[:12]} then, "
        f"{code.bundle(load(xml)).digest[:12]} now); restore it, or recover with the new code: "
        "`recovery recover r1 --code-changed`")
    assert runs.get(fake_redis, "r1").code_digest == digest      # a refusal changes nothing
    plan = recover.prepare(fake_redis, "r1", code_changed=True)
    assert plan.new_code_digest == code.bundle(load(xml)).digest != digest


def test_data_files_beside_the_code_do_not_count_as_a_change(fake_redis, tmp_path):
    xml = workflow_folder(tmp_path)
    stored_run(fake_redis, xml)
    (tmp_path / "data.txt").write_text("more input\n")
    (tmp_path / "mine" / "__pycache__").mkdir()
    (tmp_path / "mine" / "__pycache__" / "bolts.cpython-311.pyc").write_bytes(b"\0")
    assert recover.prepare(fake_redis, "r1").new_code_digest is None


def test_a_clusters_master_with_the_embedded_redis_is_refused_in_one_line(tmp_path, monkeypatch):
    xml = workflow_folder(tmp_path)
    monkeypatch.delenv("RECOVERY_REDIS_URL", raising=False)
    monkeypatch.setenv("RECOVERY_HOME", str(tmp_path / "home"))
    for args in (["submit", str(xml), "--master", "spark://10.0.0.1:7077"],
                 ["recover", "r1", "--master", "yarn"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith("error: master ") and "cannot reach the embedded Redis" in line
        assert "--redis redis://HOST:PORT" in line and "docs/cluster.md" in line
    assert not (tmp_path / "home").exists()   # nothing started, nothing written


@pytest.mark.parametrize("command", [["validate"], ["submit"], ["submit", "--master", "local[2]"]])
def test_a_link_out_of_the_workflows_folder_is_refused_by_validate_and_submit_on_any_master(
        command, tmp_path, monkeypatch):
    (tmp_path / "wf").mkdir()
    xml = workflow_folder(tmp_path / "wf")
    (tmp_path / "id_rsa").write_text("PRIVATE KEY")
    (tmp_path / "wf" / "mine" / "key").symlink_to(tmp_path / "id_rsa")
    monkeypatch.setenv("RECOVERY_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(main, [command[0], str(xml), *command[1:]])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line == (f"error: {xml}: <resources>: mine/key is a link to {tmp_path / 'id_rsa'}, outside the "
                    f"workflow's folder {tmp_path / 'wf'}: it would ship what it points to; copy what the job "
                    'needs into the folder, or leave the link out with <exclude pattern="mine/key"/>')
    assert not (tmp_path / "home").exists()   # refused before anything started


@pytest.mark.parametrize("command", ["validate", "submit"])
def test_code_over_recovery_ship_max_bytes_is_refused_by_validate_and_submit(command, tmp_path, monkeypatch):
    (tmp_path / "wf").mkdir()
    xml = workflow_folder(tmp_path / "wf")
    (tmp_path / "wf" / "mine" / "model.bin").write_bytes(b"\1" * 5000)
    xml.write_text(XML.replace('name="w">', 'name="w"><config><property name="recovery.ship.max.bytes" '
                                            'value="4096"/></config>', 1))
    monkeypatch.setenv("RECOVERY_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(main, [command, str(xml)])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {xml}: <resources>: the workflow's code to ship is ")
    assert "over recovery.ship.max.bytes (4.0 KiB); the largest: mine/model.bin (4.9 KiB)" in line
    xml.write_text(xml.read_text().replace("<spout", '<resources><exclude pattern="*.bin"/></resources><spout', 1))
    assert CliRunner().invoke(main, ["validate", str(xml)]).exit_code == 0
