"""The built-in sinks besides jsonl: a Redis hash and a Parquet directory."""
from __future__ import annotations

import json

from tests.integration.conftest import submit


def test_redis_hash_and_parquet_sinks_hold_every_tuple_once(spark, redis_url, redis_client, tmp_path):
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"k": f"key{i}", "v": i}) + "\n" for i in range(200)))
    xml = tmp_path / "s.xml"
    xml.write_text('''<workflow xmlns="urn:recovery:workflow:1" name="sinks">
      <spout id="src" parallelism="2"><source type="file" path="in.jsonl" format="jsonl"/><stream fields="k v"/></spout>
      <bolt id="hash" parallelism="2"><sink type="redis" key="test:sink" key-field="k"/><input from="src" grouping="fields" fields="k"/></bolt>
      <bolt id="pq" parallelism="2"><sink type="parquet" path="out/pq"/><input from="src"/></bolt>
    </workflow>''')
    s = submit(spark, redis_url, redis_client, xml)
    assert s["status"] == "completed" and s["roots"] == 200
    got = {k.decode(): json.loads(v) for k, v in redis_client.hgetall("test:sink").items()}
    assert got == {f"key{i}": {"k": f"key{i}", "v": i} for i in range(200)}
    import pyarrow.parquet as pq
    table = pq.read_table(str(tmp_path / "out" / "pq"))
    assert sorted(table.column("v").to_pylist()) == list(range(200))
