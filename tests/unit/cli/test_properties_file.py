"""`--properties-file FILE` of the commands that start Spark (submit, submit --follow, recover):
Spark properties from a private file, as spark-submit takes them; refused in one line when others
may read it; its values reach the Spark session and never any output."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from recovery.cli import main
from recovery.engine import session
from recovery.errors import RecoveryError
from recovery.visible import visible

WORKFLOWS = Path(__file__).resolve().parents[3] / "workflows"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
PROPERTIES = f"""# cloud keys for the executors
spark.executorEnv.AWS_ACCESS_KEY_ID AKIDEXAMPLE
spark.executorEnv.AWS_SECRET_ACCESS_KEY={SECRET}
! a Java properties comment
   spark.executor.memory : 4g

spark.cores.max=8
"""


def private(tmp_path: Path, text: str = PROPERTIES, mode: int = 0o600) -> Path:
    path = tmp_path / "spark.properties"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_properties_file_reads_as_spark_submits_does(tmp_path):
    assert session.properties_file(str(private(tmp_path))) == {
        "spark.executorEnv.AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "spark.executorEnv.AWS_SECRET_ACCESS_KEY": SECRET,
        "spark.executor.memory": "4g", "spark.cores.max": "8"}
    # from then on no message or log line shows the secret, wherever it is quoted
    assert visible(f"error: could not use {SECRET} as a key") == "error: could not use *** as a key"
    assert visible("spark.executor.memory 4g") == "spark.executor.memory 4g"   # not a secret's value


@pytest.mark.parametrize("line, message", [
    ("spark.executorEnv.TOKEN", "spark.executorEnv.TOKEN has no value"),
    ("spark.executorEnv.TOKEN=", "spark.executorEnv.TOKEN has no value"),
    ("executorEnv.PASSWORD=hunter2-value", "executorEnv.PASSWORD is not a Spark property (spark.*)"),
])
def test_a_bad_line_is_refused_naming_file_line_and_key_never_the_value(tmp_path, line, message):
    path = private(tmp_path, f"spark.a=1\n\n{line}\n")
    with pytest.raises(RecoveryError) as refused:
        session.properties_file(str(path))
    assert str(refused.value).startswith(f"--properties-file {path}:3: {message}")
    assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize("command", [["submit", str(WORKFLOWS / "wordcount.xml")],
                                     ["submit", str(WORKFLOWS / "cdn_logs_stream.xml"), "--follow"],
                                     ["recover", "r1"]], ids=["submit", "follow", "recover"])
@pytest.mark.parametrize("mode", [0o644, 0o640])
def test_a_properties_file_others_may_read_is_refused_before_anything_runs(tmp_path, command, mode, monkeypatch):
    path = private(tmp_path, mode=mode)
    monkeypatch.setenv("RECOVERY_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(main, [*command, "--properties-file", str(path), "--redis", "redis://127.0.0.1:1/0"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"error: --properties-file {path}: mode 0{mode:o} lets other accounts "
                                          f"read or change it; `chmod 600 {path}`"]
    assert SECRET not in result.output
    assert not (tmp_path / "home").exists()


class _Started(Exception):
    """Raised where the command would start Spark: the settings it would start it with are known."""


@pytest.mark.parametrize("follow", [False, True], ids=["submit", "follow"])
def test_submit_starts_spark_with_the_files_properties_and_conf_wins_and_nothing_shows_them(
        tmp_path, fake_redis, monkeypatch, follow):
    path = private(tmp_path)
    started: list[dict[str, str]] = []

    def spark_for(master, conf):
        started.append(conf)
        raise _Started

    monkeypatch.setattr("recovery.run.start_session", spark_for)
    monkeypatch.setattr("recovery.run.client_for", lambda url: (fake_redis, "redis://fake"))
    monkeypatch.setenv("RECOVERY_HOME", str(tmp_path / "home"))
    workflow = ["cdn_logs_stream.xml", "--follow"] if follow else ["wordcount.xml"]
    if follow:
        from recovery.connectors.redis_stream import topics
        topics.produce(fake_redis, "cdn_logs", [("k", b"x")], 1)
    result = CliRunner().invoke(main, ["-vv", "submit", str(WORKFLOWS / workflow[0]), *workflow[1:],
                                       "--properties-file", str(path), "--conf", "spark.cores.max=2"])
    assert isinstance(result.exception, _Started), result.output
    assert started == [{"spark.executorEnv.AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
                        "spark.executorEnv.AWS_SECRET_ACCESS_KEY": SECRET,
                        "spark.executor.memory": "4g", "spark.cores.max": "2"}]
    assert SECRET not in result.output
