"""recovery.model.code: which files of a workflow's folder ship with its job, their digest,
and their zip."""
from __future__ import annotations

import os
import stat
import tracemalloc
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


# --- links: what a link points to ships only when it lies in the workflow's folder -----------

def test_a_link_out_of_the_workflows_folder_is_refused_in_one_line_naming_it(tmp_path):
    base = folder(tmp_path / "wf")
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$hash\n")
    (base / "pkg" / "leak.txt").symlink_to(secret)
    with pytest.raises(WorkflowError) as refused:
        code.bundle(workflow(base))
    message = str(refused.value)
    assert "\n" not in message
    assert f"pkg/leak.txt is a link to {secret}, outside the workflow's folder {base}" in message
    assert '<exclude pattern="pkg/leak.txt"/>' in message
    # a folder linked out of it too, and a link to it through <include>
    (base / "pkg" / "leak.txt").unlink()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "key.pem").write_text("KEY")
    (base / "keys").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(WorkflowError, match=r"keys is a link to .*elsewhere, outside the workflow's folder"):
        code.code_files(workflow(base, '<resources><include path="keys/key.pem"/></resources>'))
    with pytest.raises(WorkflowError, match=r"keys is a link to .*elsewhere, outside"):
        code.code_files(workflow(base, '<resources><include path="keys"/></resources>'))


def test_an_excluded_link_out_of_the_folder_ships_nothing_and_is_not_refused(tmp_path):
    base = folder(tmp_path / "wf")
    (tmp_path / "shadow").write_text("secret")
    (base / "pkg" / "leak.txt").symlink_to(tmp_path / "shadow")
    files = code.code_files(workflow(base, '<resources><exclude pattern="leak.txt"/></resources>'))
    assert "pkg/leak.txt" not in files and "pkg/sub/mod.py" in files


def test_a_link_inside_the_folder_ships_as_what_it_points_to(tmp_path):
    base = folder(tmp_path / "wf")
    (base / "pkg" / "table.json").symlink_to(base / "lookup" / "table.json")
    (base / "pkg" / "shared").symlink_to(base / "multilang" / "lib")      # a folder
    (base / "pkg" / "loop").symlink_to(base / "pkg")                      # a loop: walked once
    wf = workflow(base)
    files = code.code_files(wf)
    assert {"pkg/table.json", "pkg/shared/util.py"} <= set(files)
    assert not any(f.startswith("pkg/loop/") for f in files)
    (tmp_path / "zips").mkdir()
    packed = code.pack(code.bundle(wf), tmp_path / "zips")
    with zipfile.ZipFile(packed.path) as zf:
        assert zf.read("pkg/table.json") == b"{}"
        info = zf.getinfo("pkg/table.json")
        assert (info.external_attr >> 16) & 0o170000 != 0o120000   # a file, not a link


def test_a_link_to_nothing_is_refused(tmp_path):
    base = folder(tmp_path / "wf")
    (base / "pkg" / "gone.txt").symlink_to(base / "nothing")
    with pytest.raises(WorkflowError, match=r"pkg/gone.txt is a link to .*nothing, which does not exist"):
        code.code_files(workflow(base))


# --- size: what ships is streamed, and capped by recovery.ship.max.bytes ---------------------

def test_code_over_the_cap_is_refused_naming_the_largest_files_and_exclude_is_the_fix(tmp_path):
    base = folder(tmp_path / "wf")
    (base / "pkg" / "big.bin").write_bytes(b"\0" * 3000)
    (base / "pkg" / "mid.bin").write_bytes(b"\0" * 2000)
    capped = '<config><property name="recovery.ship.max.bytes" value="4000"/></config>'
    xml = XML.format(resources="", spout="spouts:S", script="multilang/split.py").replace(
        'name="w">', f'name="w">{capped}', 1)
    wf = parse_string(xml, base_dir=str(base))
    with pytest.raises(WorkflowError) as refused:
        code.bundle(wf, "/x/w.xml")
    message = str(refused.value)
    assert message.startswith("/x/w.xml: <resources>: the workflow's code to ship is 4.9 KiB in 10 files, ")
    assert "over recovery.ship.max.bytes (3.9 KiB); the largest: pkg/big.bin (2.9 KiB), pkg/mid.bin (2.0 KiB)" in message
    assert '<exclude pattern="..."/>' in message and "\n" not in message
    excluded = parse_string(xml.replace("<spout", '<resources><exclude pattern="*.bin"/></resources><spout', 1),
                            base_dir=str(base))
    assert not {"pkg/big.bin", "pkg/mid.bin"} & set(code.bundle(excluded).files)


def test_the_default_cap_is_256_mib(tmp_path):
    assert workflow(folder(tmp_path)).settings().ship_max_bytes == 256 * 1024 * 1024


def test_packing_and_the_digest_stream_files_never_reading_one_whole(tmp_path):
    base = folder(tmp_path / "wf")
    data = os.urandom(1 << 20) * 24          # 24 MiB
    (base / "pkg" / "big.bin").write_bytes(data)
    wf = workflow(base)
    (tmp_path / "zips").mkdir()
    tracemalloc.start()
    try:
        packed = code.pack(code.bundle(wf), tmp_path / "zips")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak} bytes allocated at the peak: a file was read whole"
    with zipfile.ZipFile(packed.path) as zf:
        assert zf.read("pkg/big.bin") == data


def test_the_zip_is_its_owners_alone_whatever_the_umask(tmp_path):
    base = folder(tmp_path / "wf")
    (tmp_path / "zips").mkdir()
    old = os.umask(0o022)
    try:
        packed = code.pack(code.bundle(workflow(base)), tmp_path / "zips")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(packed.path).st_mode) == 0o600
    os.chmod(packed.path, 0o644)          # one packed by an older version: tightened when used again
    code.pack(code.bundle(workflow(base)), tmp_path / "zips")
    assert stat.S_IMODE(os.stat(packed.path).st_mode) == 0o600
