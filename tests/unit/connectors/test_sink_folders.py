"""File sinks' writer modes (recovery/connectors/sink_folders.py): the mode attribute in the XML and the model,
the driver-side check of a sink's folder at submit, and what `overwrite` removes when a run
completes. Folders hold hand-made part files here; tests/integration/test_sinks.py runs them."""
from __future__ import annotations

import pytest

from recovery.connectors.sink_folders import check_file_folders, part_files, part_name, replace_other_runs
from recovery.errors import RecoveryError, WorkflowError
from recovery.model.xml.parse import parse_string
from recovery.model.xml.write import to_xml

XML = '''<workflow xmlns="urn:recovery:workflow:1" name="s">
  <spout id="src"><source type="file" path="in.txt"/><stream fields="line"/></spout>
  <bolt id="out" parallelism="2"><sink type="jsonl" path="out/x"{mode}/><input from="src"/></bolt>
  <bolt id="pq"><sink type="parquet" path="out/p"/><input from="src"/></bolt>
  <bolt id="hash"><sink type="redis" key="k"/><input from="src"/></bolt>
</workflow>'''


def workflow(tmp_path, mode: str | None = None):
    return parse_string(XML.format(mode=f' mode="{mode}"' if mode else ""), base_dir=str(tmp_path))


def touch_parts(folder, run_id: str, rounds=(0,), component="out", tasks=(2, 3), ext="jsonl") -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    names = [part_name(run_id, r, component, t, ext) for r in rounds for t in tasks]
    for n in names:
        (folder / n).write_text('{"line": "x"}\n')
    return names


@pytest.mark.parametrize("mode", ["error", "overwrite", "append"])
def test_mode_is_in_the_model_and_round_trips_through_xml(tmp_path, mode):
    wf = workflow(tmp_path, mode)
    impl = wf.component("out").impl
    assert impl.mode == mode and dict(impl.params) == {"path": "out/x"}
    assert impl.write_mode(reads_topics=False) == impl.write_mode(reads_topics=True) == mode   # written: it wins
    assert f'mode="{mode}"' in to_xml(wf)
    assert parse_string(to_xml(wf), base_dir=wf.base_dir) == wf


def test_mode_defaults_to_error_and_is_not_written_when_not_given(tmp_path):
    wf = workflow(tmp_path)
    assert not wf.reads_topics
    assert wf.component("out").impl.mode is None and wf.component("out").impl.write_mode(wf.reads_topics) == "error"
    assert "mode=" not in to_xml(wf)


TOPIC_XML = XML.replace('<source type="file" path="in.txt"/>', '<source type="redis-stream" topic="events"/>')


def topic_workflow(tmp_path, mode: str | None = None):
    return parse_string(TOPIC_XML.format(mode=f' mode="{mode}"' if mode else ""), base_dir=str(tmp_path))


def test_a_topic_reading_workflow_s_file_sinks_append_by_default_and_a_written_mode_still_wins(tmp_path):
    """Each bounded submit of a stream continues it from its committed offsets into the same
    folders: another run's parts there are the stream's earlier output, not a mistake."""
    wf = topic_workflow(tmp_path)
    assert wf.reads_topics and wf.component("out").impl.mode is None
    assert wf.component("out").impl.write_mode(wf.reads_topics) == "append"
    assert "mode=" not in to_xml(wf)                                  # a default, not written
    touch_parts(tmp_path / "out" / "x", "run-a")
    touch_parts(tmp_path / "out" / "p", "run-a", component="pq", ext="parquet")
    check_file_folders(wf, "run-b")                                        # accepted: both sinks append
    assert replace_other_runs(wf, "run-b") == []                      # and keep the earlier runs' parts
    with pytest.raises(RecoveryError, match="earlier run with the same id 'run-a'"):
        check_file_folders(wf, "run-a")                                    # never the same run id's parts
    strict = topic_workflow(tmp_path, "error")
    with pytest.raises(RecoveryError, match=r"^sink 'out' \(jsonl\): folder .* already holds another run's output"):
        check_file_folders(strict, "run-b")


def test_a_bad_mode_or_a_mode_on_a_redis_sink_names_the_line(tmp_path):
    with pytest.raises(WorkflowError, match=r"^w.xml:3: .*'mode'.*'truncate'"):
        parse_string(XML.format(mode=' mode="truncate"'), file="w.xml")
    bad = XML.format(mode="").replace('key="k"', 'key="k" mode="append"')
    with pytest.raises(WorkflowError, match=r"^w.xml:5: bolt 'hash': <sink type=\"redis\"> takes no mode="):
        parse_string(bad, file="w.xml")


def test_error_mode_refuses_a_folder_holding_another_runs_parts(tmp_path):
    wf = workflow(tmp_path)
    check_file_folders(wf, "run-b")                                  # no folder yet: fine
    (tmp_path / "out" / "x").mkdir(parents=True)
    (tmp_path / "out" / "x" / "notes.txt").write_text("not a part")
    (tmp_path / "out" / "x" / ".tmp-123").write_text("a writer's temporary file")
    check_file_folders(wf, "run-b")                                  # only part files count
    touch_parts(tmp_path / "out" / "x", "run-a")
    with pytest.raises(RecoveryError) as err:
        check_file_folders(wf, "run-b")
    msg = str(err.value)
    assert "\n" not in msg and err.value.exit_code == 2
    assert msg.startswith(f"sink 'out' (jsonl): folder {tmp_path / 'out' / 'x'} already holds another "
                          "run's output (2 part files, e.g. part-run-a-r0000-out-t0002.jsonl)")
    assert 'mode="overwrite"' in msg and 'mode="append"' in msg


def test_overwrite_and_append_accept_another_runs_parts_but_not_parts_of_the_same_run_id(tmp_path):
    touch_parts(tmp_path / "out" / "x", "run-a")
    for mode in ("overwrite", "append"):
        check_file_folders(workflow(tmp_path, mode), "run-b")
        # a cleared run submitted again under its old id: its new parts would mix with the old
        with pytest.raises(RecoveryError, match="earlier run with the same id 'run-a'"):
            check_file_folders(workflow(tmp_path, mode), "run-a")


def test_a_sink_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    with pytest.raises(RecoveryError, match=r"sink 'out' \(jsonl\): folder .*out/x is a file, not a folder"):
        check_file_folders(workflow(tmp_path, "append"), "run-b")


def test_overwrite_removes_exactly_the_other_runs_parts(tmp_path):
    folder = tmp_path / "out" / "x"
    other = touch_parts(folder, "run-a") + touch_parts(folder, "run-a-r0001-out", tasks=(9,))
    own = touch_parts(folder, "run-b", rounds=(0, 1, 12))
    (folder / "_SUCCESS").write_text("")
    wf = workflow(tmp_path, "overwrite")
    removed = replace_other_runs(wf, "run-b")
    assert sorted(removed) == sorted(str(folder / n) for n in other)
    assert part_files(str(folder)) == sorted(own)
    assert (folder / "_SUCCESS").exists()
    assert replace_other_runs(wf, "run-b") == []               # idempotent


def test_overwrite_uses_the_submitted_workflow_in_a_recovery_round(tmp_path):
    """A recovery round's workflow may hold none of the run's sinks: the submitted one decides."""
    folder = tmp_path / "out" / "x"
    other = touch_parts(folder, "run-a")
    round_wf = parse_string(XML.format(mode="").replace('path="out/x"', 'path="out/elsewhere"'),
                            base_dir=str(tmp_path))
    submitted = workflow(tmp_path, "overwrite")
    assert replace_other_runs(round_wf, "run-b", submitted.to_task_json()) == [str(folder / n) for n in other]


@pytest.mark.parametrize("mode", ["error", "append"])
def test_error_and_append_remove_nothing(tmp_path, mode):
    folder = tmp_path / "out" / "x"
    names = touch_parts(folder, "run-a") + touch_parts(folder, "run-b")
    assert replace_other_runs(workflow(tmp_path, mode), "run-b") == []
    assert part_files(str(folder)) == sorted(names)


def test_an_unreadable_folder_is_a_one_line_error(tmp_path, monkeypatch):
    import os as os_module
    touch_parts(tmp_path / "out" / "x", "run-a")

    def denied(path):
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(os_module, "listdir", denied)
    with pytest.raises(RecoveryError, match=r"^sink 'out' \(jsonl\): folder .*out/x cannot be read: Permission denied$"):
        check_file_folders(workflow(tmp_path, "append"), "run-b")
