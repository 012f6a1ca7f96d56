"""Shell components: Storm's multilang protocol (docs/references.md; framing and quoting in
protocol.py) over a child's stdin/stdout.

`ShellBolt(impl, base_dir)` (bolt.py) and `ShellSpout(impl, base_dir)` (spout.py), on ShellBase
(base.py) and a supervised child (process.py), run `command script args...`
(cwd = base_dir, the environment passed through) and speak the protocol unchanged, so a
program written for Storm (storm.py, storm.js, storm.rb, pystorm) runs as it is.

How the bolt works, for throughput: `process()` queues the tuple for the child's stdin
(written without blocking, a few milliseconds' worth at a time) and returns without waiting
for its ack; a reader thread parses whatever the child sends into a queue; every collector
call (emit, ack, fail, log) happens on the runtime's thread, in `process()` (what is already
there, without blocking) and in `finish()` (until every outstanding tuple is acked or
failed). At most `max_outstanding` tuples are in the child at a time. Waits are bounded by
`topology.subprocess.timeout.secs`, kept under `topology.message.timeout.secs` (the
runtime's own cooperative message timeout does not apply to shell bolts: these bounded waits
are how their tuples time out).

A child that misbehaves (invalid JSON, a message cut short by EOF, raw text printed on
stdout, exits, hangs, never acks) never stalls the run and never raises out of
`process()`/`finish()`: the child's process group is killed, the tuples it was working on
fail here with an error quoting what it sent (and the tail of its stderr), and a fresh child
(a new handshake) takes the tuples after. Children run in their own process group, killed
as a whole and reaped: nothing is left behind. Which outstanding tuples fail:

- the tuples the child already emitted for (anchored to) but never acked or failed;
- when the child did not fail a tuple itself just before it went away (pystorm reports an
  exception with `error`, `fail` and exits), the oldest outstanding tuple is the one it was
  working on and fails too;
- the rest were never touched and go to the fresh child (a tuple outstanding in more than
  `max_resends` unexplained failures fails);
- a child that answers heartbeats but acks nothing for `topology.subprocess.timeout.secs`
  fails every outstanding tuple.

After `max_restarts` consecutive failures without one ack in between (`max_explained_restarts`
when the child reported each one, as pystorm does for an exception), the component stops
starting children and fails its tuples at once: a program that cannot work does not cost a
restart per tuple. A shell spout that gives up fails its task instead (ShellSpout says
why). The child's stderr goes to the collector's log at level "stderr".

An emit the collector refuses (an undeclared stream, a direct task that does not subscribe,
values a grouping or msgpack cannot take) is the program's mistake, never silent: a bolt's
fails the tuples it was anchored to (and later emits for them are dropped); a spout's with a
message id fails its record at the spout's position, dead at once, and the program is sent
`fail` for it. The pid file is not required (Storm's storm.py writes it after sending its
pid, and Storm's host never needs it); its absence is only noted when the child stops.
"""

