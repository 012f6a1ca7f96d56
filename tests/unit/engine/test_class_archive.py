"""recovery.engine.class_archive: the driver JVM writes its class archive under a temporary
name, and the archive takes its name only once that JVM has ended cleanly; later drivers map it.
The JVM is stood for by real processes that end as a JVM does when its stdin closes."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from recovery.engine import class_archive


@pytest.fixture
def spark_home(tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.setattr(class_archive, "_pending", [])
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "spark-core.jar").write_bytes(b"jar")
    return str(home)


def jvm_like(exit_code: int, writes: Path | None) -> subprocess.Popen:
    """A process that, like PySpark's gateway JVM, runs until its stdin closes, then (as the
    JVM writes its archive at exit) writes `writes` and exits with `exit_code`."""
    script = ("import sys\nsys.stdin.read()\n"
              + (f"open({str(writes)!r}, 'wb').write(b'archive')\n" if writes else "")
              + f"sys.exit({exit_code})\n")
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)


def pending_of(options: str) -> Path:
    (option,) = [o for o in options.split() if o.startswith("-XX:ArchiveClassesAtExit=")]
    return Path(option.split("=", 1)[1])


def test_a_first_driver_writes_under_a_temporary_name_and_keeps_it_once_its_jvm_ended_cleanly(spark_home):
    options = class_archive.java_options(spark_home)
    pending = pending_of(options)
    archive = class_archive.archive_path(spark_home)
    assert pending != archive and pending.parent == archive.parent and not archive.exists()
    class_archive.finish(jvm_like(0, pending))
    assert archive.read_bytes() == b"archive" and not pending.exists()
    # the next driver maps it
    assert f"-XX:SharedArchiveFile={archive}" in class_archive.java_options(spark_home)


def test_an_archive_of_a_jvm_that_did_not_end_cleanly_is_never_kept(spark_home):
    pending = pending_of(class_archive.java_options(spark_home))
    class_archive.finish(jvm_like(137, pending))
    assert not class_archive.archive_path(spark_home).exists() and not pending.exists()
    # so the next driver writes one again rather than mapping a file cut short
    assert "-XX:ArchiveClassesAtExit=" in class_archive.java_options(spark_home)


def test_a_jvm_that_wrote_nothing_leaves_no_archive(spark_home):
    class_archive.java_options(spark_home)
    class_archive.finish(jvm_like(0, None))
    assert not class_archive.archive_path(spark_home).exists()


def test_no_archive_with_a_configuration_folder_on_the_class_path(spark_home, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    assert class_archive.java_options(spark_home) == ""
    monkeypatch.delenv("SPARK_CONF_DIR")
    (Path(spark_home) / "conf").mkdir()
    assert class_archive.java_options(spark_home) != ""    # an empty folder is no obstacle
    (Path(spark_home) / "conf" / "spark-defaults.conf").write_text("spark.master local\n")
    assert class_archive.java_options(spark_home) == ""


def test_another_spark_install_gets_another_archive(spark_home):
    before = class_archive.archive_path(spark_home)
    (Path(spark_home) / "jars" / "spark-sql.jar").write_bytes(b"jar")
    assert class_archive.archive_path(spark_home) != before


def test_temporary_archives_left_by_dead_drivers_are_removed(spark_home):
    folder = class_archive.archive_path(spark_home).parent
    folder.mkdir(parents=True)
    stale, fresh = folder / "spark-x.jsa.1.tmp", folder / "spark-x.jsa.2.tmp"
    stale.write_bytes(b"cut"), fresh.write_bytes(b"being written")
    old = stale.stat().st_mtime - class_archive.STALE_SECONDS - 10
    import os
    os.utime(stale, (old, old))
    class_archive.drop_stale(folder)
    assert not stale.exists() and fresh.exists()
