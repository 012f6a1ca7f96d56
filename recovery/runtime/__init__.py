"""What runs inside a Spark task, one module per job:

- task.py: TaskRunner, which sets up a task, drives its component over its input and commits;
- collector.py: TaskCollector, the OutputCollector a component is bound to (emits with their
  anchors, ids and routes, acks, fails, logs, output chunks, ledger contributions);
- timeouts.py: MessageTimeouts, the message timeout and its last-resort watchdog;
- roots.py: SpoutRoots, a spout task's root ids and a root-replay round's selection;
- routing.py: Router, Storm's groupings at emit time;
- wire.py: the chunks tasks send each other (row chunks and Arrow chunks);
- factory.py: builds the object that implements a component;
- batch/: the batch runtime (BatchBolts and the sinks they feed).
"""
