"""`recovery launcher` prints the script spark-submit runs; inside it, spark-submit's flags
choose the session, and a --master or --conf after the command is refused in one line."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from recovery import run as api
from recovery.cli import main


def test_launcher_prints_the_path_of_a_script_shipped_in_the_package():
    result = CliRunner().invoke(main, ["launcher"])
    assert result.exit_code == 0
    script = Path(result.stdout.strip())
    assert script.is_file() and script.name == "spark_submit.py"
    assert script.parent.parent == Path(api.__file__).parent   # inside the installed package
    assert "def main(" in script.read_text()


def test_inside_spark_submit_master_and_conf_after_the_command_are_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(api, "_ambient_spark", [object()])
    for extra in (["--master", "local[2]"], ["--conf", "spark.a=b"]):
        result = CliRunner().invoke(main, ["submit", "workflows/wordcount.xml", *extra])
        assert result.exit_code == 2, result.output
        [line] = result.stderr.splitlines()
        assert line.startswith("error: running inside spark-submit: its own flags"), line
