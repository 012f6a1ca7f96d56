"""cdn_logs.xml written in Python with `recovery.Topology`: the same workflow, the same model.

    cd workflows
    python cdn_logs.py                 # print the XML (what cdn_logs.xml holds, without its comment)
    python cdn_logs.py submit          # run it: relative paths resolve against this folder (the cwd)
"""
from __future__ import annotations

import sys

from recovery import Topology

t = Topology("cdn_logs", config={"topology.message.timeout.secs": 30, "recovery.max.attempts": 3})
logs = t.spout("logs", source={"type": "file", "path": "data/cdn.log", "format": "text"}, fields="line", parallelism=2)
split = t.bolt("split", "cdn_logs.components:SplitLog", parallelism=2,
               fields="clientip time method host path protocol protocol-version code size dltime").input(logs, "local_or_shuffle")
normalize = t.bolt("normalize", "cdn_logs.components:NormalizeLog", parallelism=2,
                   fields="key host minute code bytes dltime").input(split, "local_or_shuffle")
aggregate = t.bolt("aggregate", "cdn_logs.components:AggregateLog", parallelism=4,
                   fields="key requests bytes").input(normalize, "fields", fields="key")
t.bolt("output", sink={"type": "jsonl", "path": "out/cdn_logs"}).input(aggregate, "shuffle")


if __name__ == "__main__":
    if sys.argv[1:] == ["submit"]:
        import recovery
        run = recovery.submit(t)
        print(run.status().model_dump_json(indent=2))
    else:
        print(t.to_xml(), end="")
