"""recovery.model.code: which files of a workflow's folder ship with its job, their digest,
and their zip."""
from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from recovery.errors import WorkflowError
from recovery.model import code
from recovery.model.xml.parse import parse_string
from recovery.model.xml.write import to_xml

XML = """<workflow xmlns="urn:recovery:workflow:1" name="w">
  {resources}
  <spout id="s" class="{spout}"><stream fields="x"/></spout>
  <bolt id="sh"><shell command="python" script="{script}"/><input from="s"/><stream fields="x"/></bolt>
  <bolt id="b" class="pkg.sub.mod:B"><input from="sh"/></bolt>
</workflow>"""


def folder(tmp_path: Path) -> Path:
    files = {"pkg/__init__.py": "", "pkg/sub/__init__.py": "", "pkg/sub/mod.py": "B = 1\n",
             "pkg/sub/__pycache__/mod.cpython-311.pyc": "x", "pkg/data.csv": "1,2\n",
             "spouts.py": "S = 1\n", "multilang/split.py": "import storm\n", "multilang/storm.py": "",
             "multilang/lib/util.py": "", "top.py": "", "other.py": "", "readme.txt": "",
             "data/input.txt": "lines\n", "lookup/table.json": "{}", "w.xml": ""}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def workflow(base: Path, resources: str = "", spout: str = "spouts:S", script: str = "multilang/split.py"):
    return parse_string(XML.format(resources=resources, spout=spout, script=script), base_dir=str(base))


def test_the_classes_packages_and_the_shell_scripts_folder_ship_and_nothing_else(tmp_path):
    wf = workflow(folder(tmp_path))
    assert code.code_files(wf) == (
        "multilang/lib/util.py", "multilang/split.py", "multilang/storm.py",
        "pkg/__init__.py", "pkg/data.csv", "pkg/sub/__init__.py", "pkg/sub/mod.py", "spouts.py")


def test_a_script_in_the_workflows_folder_ships_with_the_files_of_its_suffix_beside_it(tmp_path):
    wf = workflow(folder(tmp_path), script="top.py", spout="recovery.testing.components:ListSpout")
    files = code.code_files(wf)
    assert {"top.py", "other.py", "spouts.py"} <= set(files)
    assert not {"readme.txt", "w.xml", "data/input.txt"} & set(files)
    assert not any(f.startswith("multilang/") for f in files)   # (a class of an installed package ships nothing)


def test_resources_include_and_exclude(tmp_path):
    resources = ('<resources><include path="lookup"/><include path="data/input.txt"/>'
                 '<exclude pattern="*.csv"/><exclude pattern="multilang/lib/*"/></resources>')
    wf = workflow(folder(tmp_path), resources)
    files = code.code_files(wf)
    assert {"lookup/table.json", "data/input.txt"} <= set(files)
    assert "pkg/data.csv" not in files and "multilang/lib/util.py" not in files
    assert workflow(tmp_path, resources).resources == wf.resources
    assert parse_string(to_xml(wf), base_dir=str(tmp_path)) == wf   # the writer keeps <resources>


def test_an_include_that_does_not_exist_or_leaves_the_folder_is_refused(tmp_path):
    with pytest.raises(WorkflowError, match=r"<include path='nothing'> does not exist"):
        code.code_files(workflow(folder(tmp_path), '<resources><include path="nothing"/></resources>'))
    with pytest.raises(WorkflowError, match=r":2: <include path='../x'>: give a path inside"):
        workflow(tmp_path, '<resources><include path="../x"/></resources>')


def test_the_digest_follows_paths_and_contents_not_where_the_folder_is(tmp_path):
    a, b = folder(tmp_path / "a"), folder(tmp_path / "b")
    first = code.bundle(workflow(a))
    assert code.bundle(workflow(b)).digest == first.digest
    (b / "pkg" / "sub" / "mod.py").write_text("B = 2\n")
    assert code.bundle(workflow(b)).digest != first.digest
    (b / "pkg" / "sub" / "mod.py").write_text("B = 1\n")
    (b / "pkg" / "sub" / "mod.py").rename(b / "pkg" / "sub" / "mod2.py")
    (b / "pkg" / "sub" / "mod.py").write_text("")
    assert code.bundle(workflow(b)).digest != first.digest
    (b / "pkg" / "sub" / "__pycache__" / "mod.cpython-311.pyc").write_text("changed")
    assert code.bundle(workflow(a)).digest == first.digest   # caches never count


def test_the_zip_holds_the_files_and_equal_code_makes_equal_zips(tmp_path):
    base = folder(tmp_path / "wf")
    bundle = code.bundle(workflow(base))
    (tmp_path / "one").mkdir()
    packed = code.pack(bundle, tmp_path / "one")
    (tmp_path / "two").mkdir()
    again = code.pack(code.bundle(workflow(base)), tmp_path / "two")
    assert Path(packed.path).name == f"{bundle.name}.zip"
    assert Path(packed.path).read_bytes() == Path(again.path).read_bytes()
    with zipfile.ZipFile(packed.path) as zf:
        assert tuple(zf.namelist()) == bundle.files
        assert zf.read("pkg/sub/mod.py") == b"B = 1\n"


def test_a_workflow_without_a_folder_ships_nothing():
    wf = parse_string(XML.format(resources="", spout="spouts:S", script="x.py"))
    assert code.code_files(wf) == () and code.bundle(wf).files == ()
