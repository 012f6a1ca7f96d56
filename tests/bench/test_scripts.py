"""Every bench script and every CLI command answers --help (exit 0, a usage line), and the
bench modules import one another without a circle."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from recovery.cli import main

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
# (a module another bench runs, such as cluster_commit.py for scale.py, is no script)
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py")
                 if not p.name.startswith("_") and '__name__ == "__main__"' in p.read_text(encoding="utf-8"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_bench_script_answers_help(script):
    assert len(SCRIPTS) >= 9
    out = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage:") and "Traceback" not in out.stderr


def commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, cmd in sorted(group.commands.items()):
        out.append((*prefix, name))
        if isinstance(cmd, click.Group):
            out += commands(cmd, (*prefix, name))
    return out


@pytest.mark.parametrize("command", commands(main), ids=" ".join)
def test_every_cli_command_answers_help(command):
    res = CliRunner().invoke(main, [*command, "--help"], prog_name="recovery")
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"Usage: recovery {' '.join(command)}")


def test_the_cli_answers_help_as_a_program():
    out = subprocess.run([sys.executable, "-m", "recovery", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Usage:" in out.stdout, out.stderr


def bench_imports() -> dict[str, set[str]]:
    """bench module -> the bench modules it imports (lazy imports inside functions too)."""
    edges: dict[str, set[str]] = {}
    for path in BENCH.glob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "bench":
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bench."):
                found.add(node.module.split(".", 1)[1])
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".", 1)[1] for a in node.names if a.name.startswith("bench.")}
        edges[path.stem] = found - {path.stem}
    return edges


def test_the_bench_modules_import_each_other_without_a_circle():
    from tests.test_structure import _cycles
    edges = bench_imports()
    assert edges["profile_round"] and edges["tracking_overhead"]   # the finder sees their imports
    assert _cycles(edges) == []
