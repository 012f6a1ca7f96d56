"""The recovery-cost benchmark's workflow (workflows/bench_pipeline.xml; bench/recovery_cost.py)."""
