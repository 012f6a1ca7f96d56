"""`recovery validate` and `recovery graph` through click's CliRunner."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from recovery.cli import main

HERE = Path(__file__).resolve().parents[1]   # tests/unit: bad_workflows/
BAD = HERE / "bad_workflows"
WORKFLOWS = HERE.parent.parent / "workflows"
EXAMPLES = sorted(WORKFLOWS.glob("*.xml"))
NS = 'xmlns="urn:recovery:workflow:1"'


def _bad_cases():
    out = []
    for path in sorted(BAD.glob("*.xml")):
        m = re.match(r"<!-- expect (\d+): (.*) -->", path.read_text().splitlines()[0])
        out.append((str(path), int(m[1]), m[2]))
    return out


BAD_CASES = _bad_cases()


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize("path,line,part", BAD_CASES,
                         ids=[Path(p).stem for p, _, _ in BAD_CASES])
def test_validate_bad_file_exits_2_with_file_and_line(path, line, part):
    result = run("validate", path)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {path}:{line}: ")
    assert part in lines[0]
    assert "Traceback" not in result.output


@pytest.mark.parametrize("path,line,part", BAD_CASES[:6],
                         ids=[Path(p).stem for p, _, _ in BAD_CASES[:6]])
def test_graph_bad_file_exits_2(path, line, part):
    result = run("graph", path)
    assert result.exit_code == 2
    assert result.stderr.strip().startswith(f"error: {path}:{line}: ")


def test_hostile_xml_is_not_expanded_in_the_output():
    for name in ("xxe.xml", "billion_laughs.xml", "xxe_parameter_entity.xml"):
        result = run("validate", str(BAD / name))
        assert result.exit_code == 2
        assert "DOCTYPE" in result.stderr
        assert "root:" not in result.output and "lollol" not in result.output


def test_validate_missing_file_names_it(tmp_path):
    missing = str(tmp_path / "nope.xml")
    result = run("validate", missing)
    assert result.exit_code == 2
    assert result.stderr == f"error: {missing}: no such file\n"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_validate_examples_ok(path):
    result = run("validate", str(path))
    assert result.exit_code == 0, result.output
    assert re.fullmatch(rf"ok {re.escape(str(path))} \(\d+ components\)\n", result.stdout)
    assert result.stderr == ""


def test_validate_many_files_reports_each_and_exits_2_when_one_is_bad():
    bad = str(BAD / "cycle.xml")
    result = run("validate", str(EXAMPLES[0]), bad, str(EXAMPLES[1]))
    assert result.exit_code == 2
    assert result.stdout.count("ok ") == 2
    assert result.stderr.startswith(f"error: {bad}:12: cycle")


def test_validate_prints_class_warnings(tmp_path):
    (tmp_path / "w.xml").write_text(
        f'<workflow {NS} name="w"><spout id="s" class="no_such_pkg_abc.mod:S">'
        '<stream fields="x"/></spout></workflow>')
    result = run("validate", str(tmp_path / "w.xml"))
    assert result.exit_code == 0
    out = result.stdout.splitlines()
    assert out[0] == f"ok {tmp_path / 'w.xml'} (1 component)"
    assert out[1].startswith("warning: component 's': class 'no_such_pkg_abc.mod:S': ")
    assert "no module named 'no_such_pkg_abc'" in out[1]


def test_validate_json(tmp_path):
    bad = str(BAD / "unknown_component.xml")
    result = run("validate", "--json", str(EXAMPLES[0]), bad)
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["ok"] is False
    good, wrong = doc["files"]
    assert good["ok"] is True and good["components"] >= 4 and good["warnings"] == []
    assert wrong["ok"] is False
    assert wrong["error"]["file"] == bad and wrong["error"]["line"] == 8
    assert "unknown component 'spout1'" in wrong["error"]["message"]
    ok = run("validate", "--json", *map(str, EXAMPLES))
    assert ok.exit_code == 0 and json.loads(ok.stdout)["ok"] is True


def test_validate_needs_a_file():
    result = CliRunner().invoke(main, ["validate"])
    assert result.exit_code == 2


@pytest.mark.parametrize("fmt,needle", [("text", "stages: numbers"),
                                        ("dot", 'digraph "fanout"'),
                                        ("mermaid", "flowchart LR")])
def test_graph_formats(fmt, needle):
    result = run("graph", str(WORKFLOWS / "fanout.xml"), "--format", fmt)
    assert result.exit_code == 0, result.output
    assert needle in result.stdout
    assert "\x1b[" not in result.stdout            # no colours when not on a terminal


def test_graph_ascii_and_color():
    plain = run("graph", str(WORKFLOWS / "wordcount.xml"), "--ascii")
    assert plain.exit_code == 0 and plain.stdout.isascii()
    colored = run("graph", str(WORKFLOWS / "wordcount.xml"), "--color")
    assert "\x1b[" in colored.stdout


def test_graph_json():
    result = run("graph", str(WORKFLOWS / "wordcount.xml"), "--json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["order"] == ["sentences", "split", "count", "out"]
    assert {"from": "split", "to": "count", "stream": "default", "grouping": "fields",
            "fields": ["word"]} in doc["edges"]
    tasks = {c["id"]: c["tasks"] for c in doc["components"]}
    assert tasks == {"count": [1, 2], "out": [3], "sentences": [4, 5], "split": [6, 7]}


def test_graph_rejects_unknown_format():
    result = CliRunner().invoke(main, ["graph", str(EXAMPLES[0]), "--format", "png"])
    assert result.exit_code == 2


def test_graph_draws_a_workflow_whose_data_is_not_there_yet():
    path = str(BAD / "missing_data_file.xml")
    assert run("validate", path).exit_code == 2
    result = run("graph", path)
    assert result.exit_code == 0
    assert "source file (path=data/no-such-file.txt)" in result.stdout


# ------------------------------------------- properties on the command line

@pytest.mark.parametrize("prop,part", [
    ("recovery.max.attempts=abc", "-p recovery.max.attempts=abc: recovery.max.attempts must be "
                                  "an integer >= 1, got 'abc'"),
    ("recovery.max.attempts=0", "-p recovery.max.attempts=0: "),
    ("=x", "-p '=x': expected KEY=VALUE with a non-empty KEY"),
    ("recovery.max.attemps=3", "did you mean recovery.max.attempts?"),
    ("recovery.inject.f.component=nosuch", "-p recovery.inject.f.component=nosuch: recovery.inject.f.component: "
     "no component 'nosuch' in this workflow (its components: sentences, split, count, out)"),
    ("recovery.inject.f.componnt=split", "did you mean recovery.inject.f.component?"),
])
def test_submit_checks_properties_before_touching_redis(prop, part):
    # an unreachable Redis: the property error must come first, before any connection
    result = run("submit", str(WORKFLOWS / "wordcount.xml"), "-p", prop,
                 "--redis", "redis://127.0.0.1:1/0")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"error: {result.stderr[7:].strip()}"]
    assert part in result.stderr
    assert "127.0.0.1:1" not in result.stderr


def test_validate_bad_property_names_file_and_line_in_json():
    bad = str(BAD / "property_bad_value.xml")
    result = run("validate", "--json", bad)
    assert result.exit_code == 2
    err = json.loads(result.stdout)["files"][0]["error"]
    assert err["line"] == 5 and "recovery.max.attempts must be an integer" in err["message"]


def test_recover_help_says_what_p_does():
    result = run("recover", "--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "-p, --property K=V" in text
    assert "stored in the run record, and used by this and every later round" in text


def test_properties_lists_every_declaration():
    from recovery.model import config
    result = run("properties")
    assert result.exit_code == 0
    assert "recovery.max.attempts  (an integer >= 1, default 3)" in result.stdout
    doc = json.loads(run("properties", "--json").stdout)
    names = {p["name"] for p in doc["properties"]}
    assert set(config.PROPERTIES) <= names and "recovery.inject.NAME.mode" in names


def test_graph_shows_the_chains_in_text_and_json():
    text = run("graph", str(WORKFLOWS / "cdn_logs.xml"), "--ascii")
    assert text.exit_code == 0 and "chain: logs -> split -> normalize" in text.stdout
    doc = json.loads(run("graph", str(WORKFLOWS / "cdn_logs.xml"), "--json").stdout)
    assert doc["chains"] == [{"name": "logs -> split -> normalize", "members": ["logs", "split", "normalize"],
                              "parallelism": 2}]
    assert json.loads(run("graph", str(WORKFLOWS / "wordcount.xml"), "--json").stdout)["chains"] == []


def test_graph_gives_each_components_execution_mode_in_text_and_json():
    doc = json.loads(run("graph", str(WORKFLOWS / "cdn_logs_batch.xml"), "--json").stdout)
    assert {c["id"]: c["mode"] for c in doc["components"]} == {
        "logs": "batch-source", "split": "batch", "normalize": "batch", "aggregate": "batch", "output": "batch-sink"}
    text = run("graph", str(WORKFLOWS / "wordcount_shell.xml"), "--ascii").stdout
    modes = re.findall(r"^\* (\w+) .*\n(?:\|  .*\n)*?\|  mode    (\S+)", text, re.MULTILINE)
    assert dict(modes) == {"sentences": "spout", "split": "row", "count": "chunk", "out": "sink"}
