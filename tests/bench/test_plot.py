"""bench/plot.py draws the same SVG bytes from the same JSON, the committed pictures are what it
draws from the committed results, and the README's table is the one it prints; the benches'
JSON writer (bench/_common.Results) records what the figures depend on."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import _common as C
from bench import plot

ROOT = Path(__file__).resolve().parents[2]
MACHINE = {"cpus": 2, "python": "3.11.7", "pyspark": "4.3.0", "load_average_start": [1.5, 1.2, 1.0],
           "load_average_end": [2.0, 1.4, 1.1], "note": "a fixture"}


def _doc(bench: str, parameters: dict, figures: dict) -> dict:
    return {"bench": bench, "schema": 1, "date": "2026-01-02", "command": f".venv/bin/python bench/{bench}.py",
            "machine": MACHINE, "parameters": parameters, "figures": figures}


def _variant(wall: float, cpu: float, roots: int) -> dict:
    return {"wall_s": [wall], "cpu_s": [cpu], "median_wall_s": wall, "median_cpu_s": cpu,
            "roots_per_s": round(roots / wall), "sink_records": roots, "digest": "abc"}


def fixture_results(folder: Path) -> Path:
    """A small JSON of every bench plot.py reads."""
    folder.mkdir(parents=True, exist_ok=True)
    docs = {
        "tracking_overhead": _doc("tracking_overhead", {"workflow": "cdn_logs", "roots": 1000}, {
            "variants": {"tracked": _variant(3.0, 5.0, 1000), "untracked": _variant(2.5, 4.0, 1000),
                         "plain": _variant(2.0, 3.5, 1000)},
            "ratios": {"tracked/untracked": {"wall": 1.2, "cpu": 1.25}, "untracked/plain": {"wall": 1.25, "cpu": 1.14},
                       "tracked/plain": {"wall": 1.5, "cpu": 1.43}}, "same_result": True}),
        "tracking_overhead_cdn_logs_batch": _doc("tracking_overhead", {"workflow": "cdn_logs_batch", "roots": 1000}, {
            "variants": {"tracked": _variant(0.5, 1.0, 1000), "untracked": _variant(0.4, 0.8, 1000),
                         "row": _variant(3.0, 5.0, 1000)},
            "ratios": {"tracked/untracked": {"wall": 1.25, "cpu": 1.25}, "row/tracked": {"wall": 6.0, "cpu": 5.0}},
            "same_result": True}),
        "recovery_cost": _doc("recovery_cost", {"workflow": "bench_pipeline", "roots": 1000, "rate": 0.01,
                                                "failing_component": "aggregate"}, {
            "failed_tuples": 10,
            "strategies": {
                "localized": {"executions": 30, "rounds": 1, "wall_s": 1.5, "duplicates": {"main": 0, "archive": 0},
                              "missing": {"main": 0, "archive": 0}, "status": "completed"},
                "root-replay": {"executions": 61, "rounds": 2, "wall_s": 4.0, "duplicates": {"main": 0, "archive": 10},
                                "missing": {"main": 0, "archive": 0}, "status": "completed"},
                "full rerun": {"executions": 6000, "rounds": 1, "wall_s": 9.0,
                               "duplicates": {"main": 990, "archive": 1000},
                               "missing": {"main": 0, "archive": 0}, "status": "completed"}}}),
        "scale": _doc("scale", {"workflow": "bench_pipeline"}, {"cases": [
            {"roots": r, "rate": rate, "redis_bytes_per_root": b, "redis_polled_bytes_per_root": b / 2,
             "driver_peak_rss_bytes": rss}
            for r, rate, b, rss in [(1000, 0.001, 80.0, 150e6), (1000, 0.1, 180.0, 151e6),
                                    (10000, 0.001, 74.0, 150e6), (10000, 0.1, 170.0, 152e6)]]}),
        "shell_throughput": _doc("shell_throughput", {"tuples": 100}, {
            "shell": {"tuples_per_s": 30000}, "python": {"tuples_per_s": 1000000}}),
        "framework_cost": _doc("framework_cost", {"roots": 100}, {"framework_us_per_execution": {"tracked": 0.4}}),
    }
    for name, doc in docs.items():
        (folder / f"{name}.json").write_text(json.dumps(doc))
    return folder


def test_two_runs_draw_byte_identical_svgs(tmp_path):
    results = fixture_results(tmp_path / "results")
    first = plot.draw(results, tmp_path / "a")
    second = plot.draw(results, tmp_path / "b")
    assert [p.name for p in first] == sorted(plot.PLOTS, key=list(plot.PLOTS).index)
    for a, b in zip(first, second):
        data = a.read_bytes()
        assert data.startswith(b"<?xml") and b"<svg" in data
        assert data == b.read_bytes(), a.name
        assert b"<dc:date>" not in data            # no date in the metadata


def test_the_pictures_show_the_figures_of_their_json(tmp_path):
    results = fixture_results(tmp_path / "results")
    out = tmp_path / "out"
    plot.draw(results, out)
    recovery = (out / "perf-recovery.svg").read_text()
    for text in ("localized", "root-replay", "full rerun", "6,000", "1.5 s"):
        assert text in recovery, text
    assert "61" in recovery and "9.0 s" in recovery
    tracking = (out / "perf-tracking.svg").read_text()
    assert all(v in tracking for v in ("tracked", "untracked", "plain", "3.0", "5.0"))
    assert "0.1% failing" in (out / "perf-scale.svg").read_text()


def test_a_missing_json_skips_its_picture_and_says_so(tmp_path, capsys):
    results = fixture_results(tmp_path / "results")
    (results / "scale.json").unlink()
    written = plot.draw(results, tmp_path / "out")
    assert "perf-scale.svg" not in {p.name for p in written} and len(written) == len(plot.PLOTS) - 1
    assert "no scale.json" in capsys.readouterr().err


def test_the_committed_pictures_are_what_plot_draws_from_the_committed_results(tmp_path):
    committed = sorted((ROOT / "docs").glob("perf-*.svg"))
    assert {p.name for p in committed} == set(plot.PLOTS), "run `.venv/bin/python bench/plot.py`"
    for path in plot.draw(plot.RESULTS, tmp_path):
        assert path.read_bytes() == (ROOT / "docs" / path.name).read_bytes(), \
            f"docs/{path.name} is not what bench/plot.py draws from bench/results: run it again"


def test_the_readme_table_is_the_one_plot_prints_from_the_committed_results():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Performance", 1)[1].split("\n## ", 1)[0]
    assert plot.table() in section, "paste `.venv/bin/python bench/plot.py --table` into the README"
    for name in plot.PLOTS:
        assert f"docs/{name}" in section, name


def test_the_table_has_a_reproducing_command_on_every_row(tmp_path):
    rows = [line for line in plot.table(fixture_results(tmp_path / "results")).splitlines()[2:] if line.startswith("|")]
    assert len(rows) == 11
    assert all(re.search(r"\| `\.venv/bin/python bench/\w+\.py[^`]*` \|$", row) for row in rows), rows


def test_results_record_the_machine_the_parameters_and_the_figures(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["bench/x.py", "--tuples", "5", "--json", str(tmp_path / "x.json"),
                                     "--note", "busy machine"])
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--tuples", type=int)
    C.add_result_args(ap, "x")
    args = ap.parse_args()
    results = C.Results("x", args, {"tuples": args.tuples})
    path = results.write({"rate": 12.5})
    doc = json.loads(path.read_text())
    assert doc["bench"] == "x" and doc["parameters"] == {"tuples": 5} and doc["figures"] == {"rate": 12.5}
    assert doc["command"] == ".venv/bin/python bench/x.py --tuples 5"
    assert doc["machine"]["note"] == "busy machine"
    assert doc["machine"]["cpus"] >= 1 and doc["machine"]["python"] and doc["machine"]["pyspark"]
    assert len(doc["machine"]["load_average_start"]) == 3 and re.match(r"\d{4}-\d\d-\d\d$", doc["date"])


@pytest.mark.parametrize("given, expected", [(None, C.RESULTS / "x.json"), ("-", None), ("o/y.json", Path("o/y.json"))])
def test_where_results_go(given, expected):
    import argparse
    assert C.result_path(argparse.Namespace(json_path=given), "x") == expected


def _with_chains(folder: Path) -> Path:
    """The fixture's results as the benches write them with chaining: every variant of
    tracking_overhead also unchained, framework_cost's chained figures."""
    results = fixture_results(folder)
    for name, kinds in (("tracking_overhead", ("tracked", "untracked", "plain")),
                        ("tracking_overhead_cdn_logs_batch", ("tracked", "untracked", "row"))):
        doc = json.loads((results / f"{name}.json").read_text())
        f = doc["figures"]
        for kind in kinds:
            f["variants"][f"{kind} unchained"] = _variant(7.0, 9.0, 1000)
            f["ratios"][f"{kind} chained/unchained"] = {"wall": 0.61, "cpu": 0.52}
        (results / f"{name}.json").write_text(json.dumps(doc))
    doc = json.loads((results / "framework_cost.json").read_text())
    doc["figures"]["chained"] = {"variants": {"tracked": {"cpu_us_per_execution": 8.0, "chained_over_unchained": 0.45}},
                                 "framework_us_per_execution": {"tracked": 1.25}}
    (results / "framework_cost.json").write_text(json.dumps(doc))
    return results


def test_chained_and_unchained_figures_are_in_the_table_and_the_pictures(tmp_path):
    results = _with_chains(tmp_path / "results")
    text = plot.table(results)
    assert "| chained / unchained, tracked, cdn_logs | 0.52x CPU, 0.61x wall |" in text
    assert "| tracked / untracked, cdn_logs_batch | 1.25x CPU, 1.25x wall |" in text
    assert "1.25 µs CPU above plain PySpark chained the same way; 125,000 executions per CPU s, 0.45x" in text
    rows = [line for line in text.splitlines()[2:] if line.startswith("|")]
    assert len(rows) == 14
    plot.draw(results, tmp_path / "out")
    for name, figure in (("perf-tracking.svg", "9.0"), ("perf-batch.svg", "143")):
        svg = (tmp_path / "out" / name).read_text()
        assert "unchained" in svg and figure in svg, name


def _busy(monkeypatch, share: float) -> None:
    """The next Results' run as if other processes used `share` of the machine."""
    def stop(self):
        return {"bench_cpu_s": 10.0, "other_cpu_s": 40.0, "other_cpu_share": share, "busy": share > C.BUSY_SHARE}
    monkeypatch.setattr(C.MachineMonitor, "stop", stop)


def _results(tmp_path, monkeypatch, *flags: str) -> C.Results:
    import argparse
    monkeypatch.setattr("sys.argv", ["bench/x.py", *flags])
    # (where Results reads it; _common only re-exports it)
    monkeypatch.setattr("bench._results.RESULTS", tmp_path / "results")
    ap = argparse.ArgumentParser()
    C.add_result_args(ap, "x")
    return C.Results("x", ap.parse_args(flags), {})


def test_a_busy_run_does_not_replace_the_results_unless_busy_ok(tmp_path, monkeypatch, capsys):
    _busy(monkeypatch, 0.4)
    results = _results(tmp_path, monkeypatch)
    assert results.write({"rate": 1}) is None and results.refused
    assert not (tmp_path / "results" / "x.json").exists()
    err = capsys.readouterr().err
    assert "not written: other processes used 40% of the machine" in err and "--busy-ok" in err
    path = _results(tmp_path, monkeypatch, "--busy-ok").write({"rate": 1})
    doc = json.loads(path.read_text())
    assert doc["busy"] is True and doc["machine"]["other_cpu_share"] == 0.4
    assert doc["command"] == ".venv/bin/python bench/x.py --busy-ok"


def test_a_quiet_run_is_written_and_not_busy(tmp_path, monkeypatch, capsys):
    _busy(monkeypatch, 0.05)
    path = _results(tmp_path, monkeypatch).write({"rate": 1})
    doc = json.loads(path.read_text())
    assert doc["busy"] is False and doc["machine"]["other_cpu_s"] == 40.0
    assert "other processes used 40 CPU s (5% of the machine" in capsys.readouterr().out


def test_the_monitor_counts_a_child_process_as_the_benchs(tmp_path):
    import resource
    import subprocess
    import sys
    monitor = C.MachineMonitor()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    use = monitor.stop()
    child = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    assert use["bench_cpu_s"] >= round(child, 1) - 0.1
    assert set(use) == {"bench_cpu_s", "other_cpu_s", "other_cpu_share", "busy"}


def test_busy_figures_are_marked_in_the_table_and_the_pictures(tmp_path):
    results = fixture_results(tmp_path / "results")
    for name in ("tracking_overhead", "scale"):
        doc = json.loads((results / f"{name}.json").read_text())
        doc["busy"] = True
        doc["machine"] = {**doc["machine"], "other_cpu_share": 0.35}
        (results / f"{name}.json").write_text(json.dumps(doc))
    text = plot.table(results)
    marked = [line for line in text.splitlines() if "(busy machine: other processes used 35% of it)" in line]
    assert len(marked) == 5     # tracking_overhead's three rows, scale's two
    assert all("bench/tracking_overhead.py" in line or "bench/scale.py" in line for line in marked)
    plot.draw(results, tmp_path / "out")
    assert "BUSY MACHINE: OTHER PROCESSES USED 35% OF IT" in (tmp_path / "out" / "perf-tracking.svg").read_text()
    assert "BUSY" not in (tmp_path / "out" / "perf-recovery.svg").read_text()


def test_the_hand_written_job_and_the_peers_are_in_the_table_and_the_picture(tmp_path):
    results = _with_chains(tmp_path / "results")
    doc = json.loads((results / "tracking_overhead.json").read_text())
    v, r = doc["figures"]["variants"], doc["figures"]["ratios"]
    v[plot.COMPONENTS], v[f"{plot.COMPONENTS} unchained"] = v.pop("plain"), v.pop("plain unchained")
    v[plot.HAND] = _variant(1.5, 2.5, 1000)
    r.pop("untracked/plain")
    r["tracked/hand-written"] = {"wall": 2.0, "cpu": 2.1}
    r["untracked/hand-written"] = {"wall": 1.7, "cpu": 1.6}
    doc["figures"]["cold_submit"] = {"lines": 1000, "server_start_wall_s": 0.5, "submit_wall_s": 8.5,
                                     "wall_s": 9.0, "submit_cpu_s": 14.0, "status": "completed"}
    (results / "tracking_overhead.json").write_text(json.dumps(doc))
    peers = {"sizes": {"200000": {"variants": {
        "recovery tracked": _variant(6.0, 10.0, 200000), "bytewax, 2 workers": _variant(5.0, 6.0, 200000),
        "bytewax, 2 processes": _variant(4.0, 8.0, 200000)}, "same_result": True}}}
    (results / "peers.json").write_text(json.dumps(_doc("peers", {"roots": [200000]}, peers)))
    text = plot.table(results)
    assert "| tracked / a hand-written PySpark job of the same functions | 2.10x CPU, 2.00x wall |" in text
    assert "| untracked / the hand-written PySpark job | 1.60x CPU, 1.70x wall |" in text
    assert "9.0 s wall (0.5 + 8.5), 14.0 CPU s" in text
    assert "| recovery tracked / bytewax, 2 workers, recovery on, cdn_logs (200,000 roots) | 1.67x CPU, 1.20x wall |" \
        in text
    assert "bytewax, 2 processes, recovery on, cdn_logs (200,000 roots) | 1.25x CPU, 1.50x wall |" in text
    assert "plain PySpark RDD" not in text
    plot.draw(results, tmp_path / "out")
    svg = (tmp_path / "out" / "perf-tracking.svg").read_text()
    assert "hand-written PySpark" in svg and "component classes" in svg and "2.5" in svg
