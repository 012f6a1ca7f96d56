"""An S3-protocol endpoint for the tests: moto's server (`moto[server]`), a real HTTP endpoint on
loopback serving the S3 API, on a free port, in a process of its own (as any S3 service is: a
server in the test process would need the GIL to answer, which pyarrow holds while it finishes
an upload in a stream's destructor). The spill store reaches it through pyarrow's S3FileSystem,
as it would reach any S3 service: a URI whose query names the endpoint (`endpoint_override`,
`scheme=http`, `region`), and credentials in the environment (tests/conftest.py sets dummy ones
for the whole session, before Spark starts, so that its Python workers and the CLI processes
inherit them). Used through the ``s3_endpoint`` (session) and ``s3_bucket`` (a fresh bucket per
test) fixtures.
"""
from __future__ import annotations

import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

REGION = "us-east-1"

# the server's process: prints its URL, serves until its stdin closes (the test session ended,
# or died)
_SERVE = """
import sys
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
print(f"http://{host}:{port}", flush=True)
sys.stdin.read()
server.stop()
"""


@dataclass
class S3Endpoint:
    """moto's threaded server on 127.0.0.1, in a child process logging to `folder`/moto.log;
    `url` is its http://host:port."""
    folder: Path
    proc: subprocess.Popen | None = None
    url: str = ""

    def start(self) -> S3Endpoint:
        log = self.folder / "moto.log"
        with log.open("w") as out:
            self.proc = subprocess.Popen([sys.executable, "-c", _SERVE], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=out, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()    # "" once the process ended: it failed
        if not line.startswith("http://"):
            self.stop()
            raise RuntimeError(f"the S3 endpoint (moto's server) did not start: {line} "
                               f"{log.read_text(errors='replace')[-2000:]}")
        self.url = line
        return self

    def stop(self) -> None:
        """Close its stdin (it stops), or kill it if it does not end."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def client(self) -> Any:
        """A boto3 S3 client of the endpoint (for what pyarrow cannot do: buckets, uploads)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.url, region_name=REGION)

    def new_bucket(self) -> Bucket:
        name = f"spill-{secrets.token_hex(6)}"
        self.client().create_bucket(Bucket=name)
        return Bucket(self, name)


@dataclass
class Bucket:
    """One bucket of the endpoint: spill URIs into it, and what it holds."""
    endpoint: S3Endpoint
    name: str

    def uri(self, prefix: str = "spill", credentials: tuple[str, str] | None = None, **options: str) -> str:
        """`s3://bucket/prefix?endpoint_override=…&region=…&scheme=http`, and any more of
        pyarrow's options; `credentials` (access key, secret key) go in the user info, where
        pyarrow takes them (`s3://KEY:SECRET@bucket/…`), instead of the environment's."""
        query = {"endpoint_override": self.endpoint.url, "region": REGION, "scheme": "http", **options}
        user = f"{quote(credentials[0], safe='')}:{quote(credentials[1], safe='')}@" if credentials else ""
        path = f"{self.name}/{prefix}" if prefix else self.name
        return f"s3://{user}{path}?" + "&".join(f"{k}={quote(v, safe=':/')}" for k, v in query.items())

    def keys(self, prefix: str = "") -> list[str]:
        """Every object's key under `prefix` (pyarrow's empty folder markers end with "/")."""
        found: list[str] = []
        pages = self.endpoint.client().get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=prefix)
        for page in pages:
            found += [o["Key"] for o in page.get("Contents", [])]
        return sorted(found)

    def files(self, prefix: str = "") -> list[str]:
        """The keys of objects that are files, not pyarrow's folder markers."""
        return [k for k in self.keys(prefix) if not k.endswith("/")]

    def uploads(self, prefix: str = "") -> list[str]:
        """The keys of multipart uploads begun and neither completed nor aborted (an attempt
        that died while writing its file)."""
        listed = self.endpoint.client().list_multipart_uploads(Bucket=self.name, Prefix=prefix)
        return sorted(u["Key"] for u in listed.get("Uploads", []))

    def get(self, key: str) -> bytes:
        return bytes(self.endpoint.client().get_object(Bucket=self.name, Key=key)["Body"].read())

    def put(self, key: str, data: bytes) -> None:
        self.endpoint.client().put_object(Bucket=self.name, Key=key, Body=data)

    def delete(self, key: str) -> None:
        self.endpoint.client().delete_object(Bucket=self.name, Key=key)
