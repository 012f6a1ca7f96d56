"""recovery.api.loader: importing component classes named in a workflow, and the errors that
name the component and the class."""
from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

from recovery import BasicBolt, Bolt, Spout
from recovery.api.loader import ClassLoadError, check_classes, component_class, load_class
from recovery.errors import RecoveryError, WorkflowError
from recovery.model.xml.parse import load, parse_string

WORKFLOWS = Path(__file__).resolve().parents[3] / "workflows"
NS = 'xmlns="urn:recovery:workflow:1"'
_counter = itertools.count()

MODULE = """
from recovery import BasicBolt, Bolt, Spout

class Source(Spout):
    def next_tuple(self):
        return False

class Passthrough(BasicBolt):
    def process(self, tup):
        self.emit(tup.values)

class Outer:
    class Inner(Bolt):
        pass

class NotAComponent:
    pass

not_a_class = 42
"""


@pytest.fixture
def pkg(tmp_path):
    """A fresh, uniquely named package in tmp_path: (base_dir, package name)."""
    name = f"loader_pkg_{os.getpid()}_{next(_counter)}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "comps.py").write_text(MODULE)
    (tmp_path / name / "broken.py").write_text("import definitely_not_a_module_xyz\n")
    (tmp_path / name / "raises.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / name / "syntax.py").write_text("def f(:\n")
    yield str(tmp_path), name
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]


def test_loads_spouts_and_bolts_from_base_dir(pkg):
    base, name = pkg
    spout = load_class(f"{name}.comps:Source", base, component="src", kind="spout")
    assert issubclass(spout, Spout)
    bolt = load_class(f"{name}.comps:Passthrough", base, kind="bolt")
    assert issubclass(bolt, BasicBolt)
    assert issubclass(load_class(f"{name}.comps:Outer.Inner", base), Bolt)


def test_importing_writes_no_bytecode(pkg):
    base, name = pkg
    load_class(f"{name}.comps:Source", base)
    assert not list(Path(base).rglob("__pycache__"))


@pytest.mark.parametrize("ref,kind,message", [
    ("{pkg}.nothere:X", "bolt", "no module named '{pkg}.nothere'"),
    ("{pkg}.comps:Missing", "bolt", "module '{pkg}.comps' ("),
    ("{pkg}.comps:not_a_class", "bolt", "'not_a_class' is a int, not a class"),
    ("{pkg}.comps:NotAComponent", "bolt", "is not a subclass of recovery.Bolt"),
    ("{pkg}.comps:NotAComponent", None, "is not a subclass of recovery.Spout or recovery.Bolt"),
    ("{pkg}.comps:Source", "bolt", "is a Spout, but the component is a <bolt>"),
    ("{pkg}.comps:Passthrough", "spout", "is a Bolt, but the component is a <spout>"),
    ("{pkg}.broken:X", "bolt", "importing '{pkg}.broken' failed: ModuleNotFoundError: No module "
                               "named 'definitely_not_a_module_xyz'"),
    ("{pkg}.raises:X", "bolt", "importing '{pkg}.raises' failed: RuntimeError: boom at import"),
    ("{pkg}.syntax:X", "bolt", "importing '{pkg}.syntax' failed: SyntaxError"),
    ("no_colon_here", "bolt", 'expected "package.module:ClassName"'),
])
def test_errors_name_the_component_and_the_ref(pkg, ref, kind, message):
    base, name = pkg
    ref = ref.format(pkg=name)
    with pytest.raises(ClassLoadError) as info:
        load_class(ref, base, component="split", kind=kind)
    err = info.value
    assert isinstance(err, WorkflowError) and isinstance(err, RecoveryError)
    assert err.exit_code == 2
    assert err.component == "split" and err.ref == ref
    assert err.message.startswith(f"component 'split': class {ref!r}")
    assert message.format(pkg=name) in err.message


def test_missing_top_level_package_says_where_it_looked(tmp_path):
    with pytest.raises(ClassLoadError) as info:
        load_class("no_such_pkg_qq.mod:X", str(tmp_path))
    assert info.value.message == (f"class 'no_such_pkg_qq.mod:X': no module named "
                                  f"'no_such_pkg_qq' (searched {tmp_path} first)")


def _workflow_doc(name: str) -> str:
    return (f'<workflow {NS} name="w">'
            f'<spout id="s" class="{name}.comps:Source"><stream fields="x"/></spout>'
            f'<spout id="t" class="{name}.comps:Passthrough"><stream fields="x"/></spout>'
            f'<bolt id="b" class="{name}.comps:Passthrough"><input from="s"/>'
            '<stream fields="x"/></bolt>'
            f'<bolt id="c" class="{name}.nothere:X"><input from="b"/></bolt>'
            '<bolt id="d"><sink type="jsonl" path="out/d"/><input from="b"/></bolt>'
            '</workflow>')


def test_check_classes_gives_one_message_per_bad_class(pkg):
    base, name = pkg
    wf = parse_string(_workflow_doc(name), base_dir=base)
    problems = check_classes(wf)
    assert len(problems) == 2
    assert problems[0].startswith(f"component 't': class '{name}.comps:Passthrough' is a Bolt")
    assert problems[1].startswith(f"component 'c': class '{name}.nothere:X': no module named")


def test_component_class(pkg):
    base, name = pkg
    wf = parse_string(_workflow_doc(name), base_dir=base)
    assert component_class(wf, "b").__name__ == "Passthrough"
    with pytest.raises(ClassLoadError, match="is not implemented by a class"):
        component_class(wf, "d")


def test_example_workflow_classes_resolve_against_the_workflows_folder():
    for path in sorted(WORKFLOWS.glob("*.xml")):
        wf = load(path)
        assert check_classes(wf) == [], path
    wf = load(WORKFLOWS / "wordcount.xml")
    cls = component_class(wf, "split")
    assert cls.__module__ == "wordcount.components"
    assert Path(sys.modules[cls.__module__].__file__) == WORKFLOWS / "wordcount" / "components.py"
    assert load_class("wordcount.components:WordCount", str(WORKFLOWS), kind="bolt").__name__ \
        == "WordCount"


class _CountingFinder:
    """A path entry finder that counts how often it is told to forget its listing."""

    def __init__(self):
        self.invalidated = 0

    def invalidate_caches(self):
        self.invalidated += 1

    def find_spec(self, fullname, target=None):
        return None


def test_loading_a_class_refreshes_the_workflow_folders_finders_only(pkg, monkeypatch):
    """A module written into the workflow's folder (or one of its packages) after a first load
    is found; the finders of other sys.path entries (PySpark's zip in a Spark worker, whose
    listing is read again on every refresh) are left as they are."""
    base, name = pkg
    load_class(f"{name}.comps:Source", base)
    elsewhere, inside = _CountingFinder(), _CountingFinder()
    monkeypatch.setitem(sys.path_importer_cache, "/opt/spark/python/lib/pyspark.zip", elsewhere)
    monkeypatch.setitem(sys.path_importer_cache, os.path.join(base, "elsewhere-not-a-package"), inside)
    (Path(base) / name / "later.py").write_text(MODULE)
    assert load_class(f"{name}.later:Passthrough", base, kind="bolt").__name__ == "Passthrough"
    assert elsewhere.invalidated == 0 and inside.invalidated == 1


def test_a_workflow_module_changed_on_disk_is_imported_again(tmp_path):
    """A reused Spark worker (or a notebook's driver) loads the code as it is now after a fix."""
    (tmp_path / "changing_pkg").mkdir()
    (tmp_path / "changing_pkg" / "__init__.py").write_text("")
    module = tmp_path / "changing_pkg" / "bolts.py"
    module.write_text("from recovery import BasicBolt\n\nclass B(BasicBolt):\n    VERSION = 1\n")
    try:
        assert load_class("changing_pkg.bolts:B", str(tmp_path)).VERSION == 1
        assert load_class("changing_pkg.bolts:B", str(tmp_path)).VERSION == 1   # unchanged: the same module
        module.write_text("from recovery import BasicBolt\n\nclass B(BasicBolt):\n    VERSION = 2  # fixed\n")
        assert load_class("changing_pkg.bolts:B", str(tmp_path)).VERSION == 2
    finally:
        for name in [m for m in sys.modules if m.startswith("changing_pkg")]:
            del sys.modules[name]
