"""How a location is opened and named (recovery/tracking/spill_files.py), shared by the spill
store, the file source and the file sinks: a local path or file:// URI is a local folder,
anything else the filesystem pyarrow.fs opens; messages name it without query or credentials."""
from __future__ import annotations

import pytest

from recovery.tracking.spill_files import ArrowFiles, LocalFiles, bare_uri, local_path, open_location


@pytest.mark.parametrize("where, path", [
    ("/data/out", "/data/out"),
    ("out", "out"),
    ("file:///mnt/shared/out", "/mnt/shared/out"),
    ("file://localhost/mnt/shared/out", "/mnt/shared/out"),
    ("file:///mnt/with%20space", "/mnt/with space"),
    ("file://otherhost/mnt/x", None),          # another host's: not a local path
    ("s3://bucket/out?region=us-east-1", None),
    ("hdfs://nn:8020/out", None),
    ("gs://bucket/out", None),
])
def test_a_local_path_is_a_plain_path_or_a_file_uri_of_this_host(where, path):
    assert local_path(where) == path


def test_a_uri_is_named_without_its_query_and_user_info():
    assert bare_uri("s3://KEY:SECRET@bucket/out/?endpoint_override=http://h:9000&secret_key=s") == "s3://bucket/out"
    assert bare_uri("hdfs://nn:8020/data#frag") == "hdfs://nn:8020/data"


def test_open_location_gives_a_local_folder_or_pyarrow_s_filesystem(tmp_path):
    assert isinstance(open_location(str(tmp_path)), LocalFiles)
    assert isinstance(open_location(f"file://{tmp_path}"), LocalFiles)
    default = open_location(str(tmp_path), default=str(tmp_path))
    assert isinstance(default, LocalFiles) and default.is_default
    at = open_location("mock:///some/where")       # pyarrow's in-memory filesystem
    assert isinstance(at, ArrowFiles) and at.base == "some/where" and at.shown == "mock:///some/where"
