"""The batch runtime: BatchBolts (recovery.api.batch) and the built-in sinks they feed, run a
batch of tuples at a time with the row runtime's ids, ledger, routes and failure localization.
Which components run here is their execution mode's say (runtime.modes: the batch modes).

- rows.py: a task's input tuples by column (Rows), read from row and Arrow chunks;
- collector.py: BatchCollector, the row collector's semantics by array;
- host.py: BatchHost, what the task loops below use of the task runner that runs them;
- bolt.py: the batch bolt's task loop (batching, bisection of a failing call);
- sink.py: the batch sink's task loop;
- runner.py: BatchTaskRunner, the TaskRunner (a BatchHost) that uses them.
"""
from recovery.runtime.batch.runner import BatchTaskRunner
from recovery.runtime.modes import is_batch_component, is_batch_sink, reads_in_batches

__all__ = ["BatchTaskRunner", "is_batch_component", "is_batch_sink", "reads_in_batches"]
