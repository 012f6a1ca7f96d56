"""recovery.home: where local state lives, and its folders and files kept private."""
from __future__ import annotations

import os

from recovery import home
from tests.helpers import file_mode


def test_state_home_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("RECOVERY_HOME", str(tmp_path / "env"))
    assert home.state_home(tmp_path / "arg") == tmp_path / "arg"
    assert home.state_home() == tmp_path / "env"
    monkeypatch.delenv("RECOVERY_HOME")
    monkeypatch.chdir(tmp_path)
    assert home.state_home() == tmp_path / ".recovery"
    assert home.state_home().is_absolute()


def test_state_home_relative_is_made_absolute(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert home.state_home("state") == tmp_path / "state"


def test_private_dir_and_file_ignore_the_umask(tmp_path, umask_022):
    folder = home.private_dir(tmp_path / "parent" / "home")
    assert file_mode(folder) == 0o700
    assert file_mode(home.private_file(folder / "x.log")) == 0o600
    os.umask(0o277)  # would make an owner-unwritable folder
    assert file_mode(home.private_dir(tmp_path / "other")) == 0o700


def test_private_dir_and_file_tighten_ours(tmp_path):
    folder = tmp_path / "loose"
    folder.mkdir()
    os.chmod(folder, 0o755)
    (folder / "a.log").write_text("kept")
    os.chmod(folder / "a.log", 0o644)
    home.private_dir(folder)
    home.private_file(folder / "a.log")
    assert (file_mode(folder), file_mode(folder / "a.log")) == (0o700, 0o600)
    assert (folder / "a.log").read_text() == "kept"
