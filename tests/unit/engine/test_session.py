"""recovery.engine.session: what the Spark driver is given before its JVM starts, without
starting one: its files under RECOVERY_HOME are private."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest

from recovery.engine import session
from recovery.engine.session import prepare_environment
from tests.helpers import file_mode


@pytest.fixture(params=[0o000, 0o022], ids=["umask-000", "umask-022"])
def umask(request) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_the_spark_conf_folder_and_its_log4j_file_are_private_whatever_the_umask(tmp_path, monkeypatch, umask):
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "unused"))   # never change the suite's
    home = tmp_path / "home"
    prepare_environment(home)
    conf = home / "spark-conf"
    assert file_mode(conf) == 0o700
    assert file_mode(conf / "log4j2.properties") == 0o600     # was 0644 (0666 at umask 000)
    assert f"appender.file.fileName = {(home / 'spark.log').resolve()}" in (conf / "log4j2.properties").read_text()


def test_a_log4j_file_an_earlier_version_left_open_is_tightened(tmp_path, monkeypatch, umask):
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "unused"))
    conf = tmp_path / "home" / "spark-conf"
    conf.mkdir(parents=True, mode=0o755)
    (conf / "log4j2.properties").write_text("rootLogger.level = info\n")
    os.chmod(conf, 0o755)
    os.chmod(conf / "log4j2.properties", 0o666)
    prepare_environment(tmp_path / "home")
    assert file_mode(conf) == 0o700 and file_mode(conf / "log4j2.properties") == 0o600
    assert "rootLogger.level = warn" in (conf / "log4j2.properties").read_text()


def test_the_driver_jvm_gets_our_log_settings_by_option_unless_the_user_has_a_conf_folder(tmp_path, monkeypatch):
    from recovery.engine.session import driver_java_options
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    log4j = tmp_path / "log4j2.properties"
    assert f"-Dlog4j2.configurationFile={log4j}" in driver_java_options(log4j, str(tmp_path / "spark"))
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "theirs"))
    assert driver_java_options(log4j, str(tmp_path / "spark")) == ""


def test_the_workers_socket_folder_is_private_and_those_of_ended_drivers_are_swept(monkeypatch):
    short = tempfile.mkdtemp(prefix="rs-", dir="/tmp")   # (a pytest folder is too long for sockets)
    try:
        monkeypatch.setattr(tempfile, "tempdir", short)
        ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                               capture_output=True, text=True, check=True).stdout.strip()
        left = os.path.join(short, f"{session.SOCKET_DIR_PREFIX}{ended}-abc")
        os.mkdir(left)
        open(os.path.join(left, ".x.sock"), "w").close()
        alive = os.path.join(short, f"{session.SOCKET_DIR_PREFIX}{os.getpid()}-abc")
        os.mkdir(alive)
        folder = session.worker_socket_dir()
        assert folder is not None and os.path.dirname(folder) == short
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        assert not os.path.exists(left) and os.path.exists(alive)
    finally:
        shutil.rmtree(short)


def test_no_socket_folder_where_the_temporary_folder_is_too_long_for_a_socket(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 40)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    assert session.worker_socket_dir() is None
