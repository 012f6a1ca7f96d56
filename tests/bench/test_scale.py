"""bench/scale.py's argument parsing, AOF accounting and report (no bench is run here)."""
from __future__ import annotations

import argparse
import os

import pytest

from bench import scale


def test_defaults_are_the_four_cases_of_the_issue():
    args = scale.parse_args([])
    assert args.roots == (100_000, 1_000_000) and args.rates == (0.001, 0.1)
    assert args.workflow == "bench_pipeline" and args.redis is None and not args.keep


def test_quick_preset_and_explicit_lists():
    assert scale.parse_args(["--quick"]).roots == scale.QUICK_ROOTS
    args = scale.parse_args(["--quick", "--roots", "1e3,5000", "--rates", "0,0.5"])
    assert args.roots == (1000, 5000) and args.rates == (0.0, 0.5)


@pytest.mark.parametrize("argv", [["--roots", "ten"], ["--roots", "0"], ["--rates", "1.5"],
                                  ["--rates", ","]])
def test_bad_lists_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        scale.parse_args(argv)
    assert exc.value.code == 2
    assert "error: argument" in capsys.readouterr().err


def test_aof_meter_counts_appends_and_each_rewrites_new_file():
    aof = scale.AofMeter(current=100, base=0)
    aof.update(600, 0)            # 500 appended
    aof.update(900, 0)            # 300 more
    aof.update(450, 400)          # a rewrite wrote 400, then 50 appended
    aof.update(470, 400)          # 20 more
    assert (aof.appended, aof.rewritten, aof.written) == (870, 400, 1270)


def test_driver_hwm_is_read_from_proc():
    assert scale.vm_hwm_bytes(os.getpid()) > 0
    assert scale.vm_hwm_bytes(2 ** 22 + 12345) is None


def _case(roots, rate, driver, redis_peak):
    case = scale.Case(roots, rate, server_peak=redis_peak, failed_tuples=int(roots * rate))
    for name in ("submit", "recover"):
        case.phases.append(scale.Phase(name, wall=1.5, cpu=2.0, redis_cpu=0.5, driver_peak=driver,
                                       redis_peak=redis_peak // 2, aof_written=10_000_000,
                                       aof_rewrites=1, result={"status": "completed"}))
    return case


def test_report_prints_every_case_and_the_goals_honestly():
    cases = [_case(100_000, 0.001, 200_000_000, 3_000_000),       # 30 B per root
             _case(100_000, 0.1, 210_000_000, 5_000_000),
             _case(1_000_000, 0.001, 230_000_000, 40_000_000),    # 40 B per root: the worst
             _case(1_000_000, 0.1, 300_000_000, 60_000_000)]
    args = argparse.Namespace(workflow="bench_pipeline", master="local[2]", redis=None)
    text = scale.report(cases, args, (1.0, 2.0))
    assert "| 1,000,000 |   0.1 |" in text and text.count("completed") == 8
    assert ("goal: Redis per root on the success path (rate 0.001; worst at 1,000,000 roots): "
            "40 B, 1.25x the goal of <= 32 B: not met") in text
    assert ("goal: driver peak RSS at (1,000,000, 0.1) / at (100,000, 0.001): 300.0 / 200.0 MB "
            "= 1.50, goal <= 1.2: not met") in text
    met = scale.goals([_case(100, 0.001, 100, 3000), _case(1000, 0.1, 110, 1000)])
    assert met[0].endswith("30 B, 0.94x the goal of <= 32 B: met") and met[1].endswith("= 1.10, goal <= 1.2: met")


def test_one_case_has_no_rss_ratio():
    assert scale.goals([_case(100, 0.1, 100, 100)])[1] == "driver RSS ratio: needs two cases"


def test_redis_cluster_mode_is_parsed_and_its_goals_are_ratios(capsys):
    from bench import cluster_commit
    args = scale.parse_args(["--redis-cluster", "3", "--roots", "1000"])
    assert (args.redis_cluster, args.roots, args.cluster_tasks, args.cluster_workers) == (3, (1000,), 16, 4)
    with pytest.raises(SystemExit):
        scale.parse_args(["--redis-cluster", "1"])
    assert "N >= 2" in capsys.readouterr().err
    one = {"masters": 1, "commits_per_s": 10.0, "commits_per_busiest_master_cpu_s": 100.0,
           "bytes_per_root_per_master": [16.0]}
    many = {"masters": 3, "commits_per_s": 12.0, "commits_per_busiest_master_cpu_s": 260.0,
            "bytes_per_root_per_master": [6.0, 6.0, 4.0]}
    lines = cluster_commit.goals(one, many)
    assert lines[0].startswith("commit throughput, 3 masters / 1 master, by the busiest master's CPU: 2.60x, "
                               "goal >= 2.5x: met (wall clock: 1.20x")
    assert lines[1] == "busiest master / average of the bytes per root (3 masters): 1.12, goal <= 1.5: met"
