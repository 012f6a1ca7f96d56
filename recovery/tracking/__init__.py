"""Tracking in Redis: every key (keys.py), derived ids, the XOR ledger, a task's tracker and commit,
keyed state, run records."""
