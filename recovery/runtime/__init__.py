"""What runs inside a Spark task, one module per job:

- modes.py: each component's execution mode (row, chunk, batch, and the spout, source and sink
  forms), decided once and stored in the chain plan;
- stage.py: the task function of a stage, dispatched on its components' modes;
- task.py: TaskRunner, which sets up a task, drives its component over its input and commits;
- row_loop.py: the row mode's loop (a bolt's input one tuple at a time);
- chunks.py: the chunk mode's loop (a Python bolt's input a chunk at a time);
- guard.py: the one guarded call of user code every loop makes;
- collector.py: TaskCollector, the OutputCollector a component is bound to (emits with their
  anchors, ids and routes, acks, fails, logs, output chunks, ledger contributions);
- timeouts.py: MessageTimeouts, the message timeout and its last-resort watchdog;
- roots.py: SpoutRoots, a spout task's root ids and a root-replay round's selection;
- routing.py: Router, Storm's groupings at emit time;
- wire.py: the chunks tasks send each other (row chunks and Arrow chunks);
- factory.py: builds the object that implements a component;
- batch/: the batch runtime (BatchBolts and the sinks they feed).
"""
