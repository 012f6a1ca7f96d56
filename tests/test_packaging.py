"""The package as a user installs it: a wheel built from the source, installed into a fresh
venv, validates a workflow from another folder (the schema must be
package data, not a file beside the source tree)."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _can_build_without_isolation() -> bool:
    """setuptools builds wheels itself from 70.1; before, it needs the `wheel` package."""
    import setuptools
    major, minor = (int(p) for p in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
def test_wheel_installed_in_a_fresh_venv_validates_from_another_folder(tmp_path):
    # build from a copy, so that the build writes nothing into the checkout
    src = tmp_path / "src"
    shutil.copytree(ROOT / "recovery", src / "recovery",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    dist = tmp_path / "dist"
    # without isolation when this environment can build (offline, faster); else pip
    # fetches the build requirements as `make`'s install does
    isolation = ["--no-build-isolation"] if _can_build_without_isolation() else []
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", *isolation, "-w", dist, src,
         cwd=tmp_path)
    wheel = next(dist.glob("recovery-*.whl"))
    assert "recovery/model/xml/workflow.xsd" in zipfile.ZipFile(wheel).namelist()

    # a fresh venv with recovery from the wheel only; its dependencies come from this
    # interpreter's site-packages through a .pth line (a path line adds the folder but runs
    # none of its .pth files, so the editable install of the checkout stays out)
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    _run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q",
         "--no-deps", "--no-index", wheel, cwd=tmp_path)
    venv_python = venv / "bin" / "python"
    purelib = Path(_run(venv_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                        cwd=tmp_path).strip())
    (purelib / "shared_venv_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    where = _run(venv_python, "-c", "import recovery.model.xml.parse as w; print(w.__file__)",
                 cwd=elsewhere, env=env).strip()
    assert Path(where).is_relative_to(purelib), where

    workflow = ROOT / "workflows" / "wordcount.xml"
    out = _run(venv / "bin" / "recovery", "validate", workflow, cwd=elsewhere, env=env)
    assert out == f"ok {workflow} (4 components)\n"
