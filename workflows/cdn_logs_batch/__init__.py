"""Batch (Arrow) components of workflows/cdn_logs_batch.xml: cdn_logs's job with pyarrow.compute."""
