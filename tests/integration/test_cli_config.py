"""Configuration and submit's checks through the CLI, on the real Redis and Spark: bad -p
values and unrunnable components are refused before anything is stored; `recover -p` mends
a run stored with a bad value."""
from __future__ import annotations

import json

import pytest

from recovery.errors import RunError
from recovery.jobs import clear, submit
from recovery.model.xml import parse as workflow_xml
from recovery.tracking import runs, spill
from tests.integration.conftest import copy_workflow
from tests.integration.test_cli_runs import cli


@pytest.mark.parametrize("prop,part", [
    ("recovery.max.attempts=abc", "-p recovery.max.attempts=abc: recovery.max.attempts must be "
                                  "an integer >= 1, got 'abc'"),
    ("recovery.max.attempts=0", "-p recovery.max.attempts=0: recovery.max.attempts must be "
                                "an integer >= 1, got '0'"),
    ("=x", "-p '=x': expected KEY=VALUE with a non-empty KEY"),
])
def test_submit_refuses_a_bad_property_and_stores_nothing(spark, redis_url, redis_client,
                                                          tmp_path, prop, part):
    xml = copy_workflow("wordcount", tmp_path)
    before = set(redis_client.keys("*"))
    code, out, err = cli(redis_url, "submit", str(xml), "-p", prop)
    assert code == 2, err
    assert err.count("\n") == 1 and part in err
    assert set(redis_client.keys("*")) == before


def test_recover_p_mends_a_run_stored_with_a_bad_value(spark, redis_url, redis_client, tmp_path):
    # a run stored with a value no check refused (as before the checks existed; submit checks
    # a workflow's properties now): the round's plan refuses it before any task runs, in one
    # line naming the property, and the run is left in `error`
    xml = copy_workflow("wordcount", tmp_path)
    wf = workflow_xml.load(xml).with_config({"recovery.max.attempts": "abc"})
    run_id = f"mend-{tmp_path.name}"
    # (stored as before the checks: a plan made by hand, not by `prepare`, which refuses it)
    plan = submit.SubmitPlan(wf, xml.read_text(), str(xml), run_id, True, "local[*]",
                             spill.location(None, None))
    with pytest.raises(RunError) as refused:
        submit.run(spark, redis_client, redis_url, plan)
    assert "\n" not in str(refused.value)
    assert "recovery.max.attempts must be an integer >= 1, got 'abc'" in str(refused.value)
    assert f"recovery recover {run_id} -p recovery.max.attempts=VALUE" in str(refused.value)
    assert runs.status_of(runs.get(redis_client, run_id)) == runs.ERROR

    # a bad new value is refused and changes nothing
    stored = runs.get(redis_client, run_id)
    code, _, err = cli(redis_url, "recover", run_id, "-p", "recovery.max.attempts=-1")
    assert code == 2 and err.count("\n") == 1 and "-p recovery.max.attempts=-1" in err
    after = runs.get(redis_client, run_id)
    assert (after.workflow_json, after.current_workflow) == (stored.workflow_json, stored.current_workflow)

    code, out, err = cli(redis_url, "recover", run_id, "-p", "recovery.max.attempts=2", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["status"] == "completed" and summary["resumed"] is True
    assert summary["roots"] == 500 and summary["complete"] == 500
    rec = runs.get(redis_client, run_id)
    assert rec.original_workflow().settings().max_attempts == 2
    clear.clear(redis_client, run_id)


def test_submit_names_file_and_line_of_a_class_that_does_not_load(spark, redis_url,
                                                                   redis_client, tmp_path):
    xml = copy_workflow("wordcount", tmp_path)
    text = xml.read_text().replace("wordcount.components:SplitSentence", "wordcount.components:Nope")
    xml.write_text(text)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "components:Nope" in l)
    before = set(redis_client.keys("*"))
    code, _, err = cli(redis_url, "submit", str(xml))
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {xml}:{line}: component 'split': class "
                          "'wordcount.components:Nope'"), err
    assert set(redis_client.keys("*")) == before


def test_submit_refuses_a_missing_shell_script_in_local_mode(spark, redis_url, redis_client,
                                                             tmp_path):
    xml = copy_workflow("wordcount_shell", tmp_path)
    text = xml.read_text().replace("wordcount_shell/splitsentence.py", "wordcount_shell/gone.py")
    xml.write_text(text)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "gone.py" in l)
    before = set(redis_client.keys("*"))
    code, _, err = cli(redis_url, "submit", str(xml), "--master", "local[2]")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {xml}:{line}: bolt 'split': shell script "
                          "'wordcount_shell/gone.py' not found"), err
    assert set(redis_client.keys("*")) == before
    # validate only warns: on a cluster the script may exist on the executors
    code, out, _ = cli(redis_url, "validate", str(xml))
    assert code == 0 and "warning: bolt 'split': shell script 'wordcount_shell/gone.py'" in out


def test_recover_p_refuses_an_injection_at_a_component_the_run_lacks(redis_url, redis_client, tmp_path):
    """`-p recovery.inject.f.component=nosuch` named no component and injected
    nothing, silently. The run here is stored by the test kit (no Spark needed to refuse)."""
    from recovery import testing
    xml = copy_workflow("wordcount", tmp_path)
    run = testing.run_local(workflow_xml.load(xml), redis_client, inputs={"sentences": ["a b"]})
    stored = runs.get(redis_client, run.run_id)
    for prop, part in (("recovery.inject.f.component=nosuch",
                        "-p recovery.inject.f.component=nosuch: recovery.inject.f.component: no component "
                        "'nosuch' in this workflow (its components: sentences, split, count, out)"),
                       ("recovery.inject.f.mode=sometimes", "recovery.inject.f.mode must be one of"),
                       ("recovery.inject.f.componnt=split", "did you mean recovery.inject.f.component?")):
        code, out, err = cli(redis_url, "recover", run.run_id, "-p", prop)
        assert code == 2 and out == "" and err.count("\n") == 1 and part in err, err
    after = runs.get(redis_client, run.run_id)
    assert (after.workflow_json, after.current_workflow) == (stored.workflow_json, stored.current_workflow)
