"""The private properties file that carries secret Spark properties to spark-submit: made 0600,
named by PYSPARK_SUBMIT_ARGS only while the context starts, removed afterwards; the settings
left for the command line hold no secret."""
from __future__ import annotations

import os
import re
import shlex
import stat

import pytest

from recovery.engine import submit_args

CONF = {"spark.executor.memory": "1g", "spark.hadoop.fs.s3a.secret.key": "s3 key\\with: odd=chars #!",
        "spark.executorEnv.AWS_SECRET_ACCESS_KEY": "wJalr/K7MDENG", "spark.app.db.password": " pässwörd\n😀"}


_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)")
_NAMED = {"n": "\n", "r": "\r", "t": "\t", "f": "\f"}


def _unescaped(text: str) -> str:
    def one(m: re.Match) -> str:
        e = m[1]
        return chr(int(e[1:], 16)) if len(e) == 5 else _NAMED.get(e, e)
    return _ESCAPE.sub(one, text).encode("utf-16", "surrogatepass").decode("utf-16")


def _java_properties(text: str) -> dict[str, str]:
    """java.util.Properties.load for one `key=value` a line: the first unescaped "=" splits."""
    out = {}
    for line in text.splitlines():
        key, value = re.split(r"(?<!\\)=", line, maxsplit=1)
        out[_unescaped(key)] = _unescaped(value)
    return out


@pytest.fixture
def no_jvm(monkeypatch):
    monkeypatch.setattr(submit_args, "_gateway_running", lambda: False)
    monkeypatch.delenv(submit_args.SUBMIT_ARGS, raising=False)


def test_secrets_go_to_a_private_file_named_by_pyspark_submit_args_while_the_block_runs(tmp_path, no_jvm):
    with submit_args.secrets_off_the_command_line(dict(CONF), tmp_path) as public:
        assert public == {"spark.executor.memory": "1g"}
        args = shlex.split(os.environ[submit_args.SUBMIT_ARGS])
        assert args[0] == "--properties-file" and args[-1] == "pyspark-shell"
        path = args[1]
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with open(path, encoding="ascii") as fh:
            assert _java_properties(fh.read()) == {k: v for k, v in CONF.items() if k != "spark.executor.memory"}
    assert not os.path.exists(path)
    assert submit_args.SUBMIT_ARGS not in os.environ


def test_what_pyspark_submit_args_held_is_kept_after_the_file_and_put_back(tmp_path, no_jvm, monkeypatch):
    monkeypatch.setenv(submit_args.SUBMIT_ARGS, "--jars x.jar pyspark-shell")
    with submit_args.secrets_off_the_command_line(dict(CONF), tmp_path):
        assert os.environ[submit_args.SUBMIT_ARGS].endswith(" --jars x.jar pyspark-shell")
    assert os.environ[submit_args.SUBMIT_ARGS] == "--jars x.jar pyspark-shell"


def test_no_secret_or_a_running_jvm_writes_nothing(tmp_path, monkeypatch, no_jvm):
    with submit_args.secrets_off_the_command_line({"spark.executor.memory": "1g"}, tmp_path) as public:
        assert public == {"spark.executor.memory": "1g"} and submit_args.SUBMIT_ARGS not in os.environ
    monkeypatch.setattr(submit_args, "_gateway_running", lambda: True)   # settings go to that JVM over py4j
    with submit_args.secrets_off_the_command_line(dict(CONF), tmp_path) as public:
        assert public == CONF and submit_args.SUBMIT_ARGS not in os.environ
    assert list(tmp_path.iterdir()) == []
