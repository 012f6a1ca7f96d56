"""A file sink's folder on a store opened by URI (s3://, gs://, hdfs://, ...): its parts
committed by marker, never by rename (an object store has none: S3's move is a copy, then a
delete).

Each attempt at a part writes an object of its own (`attempt`), under its final name from the
start: the part's name with a token unique to the attempt, written as the part's chunks come
(an object store uploads it in parts). Once the object is whole (on an object store it
appears only when its upload completes), the attempt checks that its driver still owns the run,
then writes the part's marker, `_committed/<part name>.d<N>`, whose content is the object's
name. That one small write is the commit: a reader takes, for each part, the object its marker
names, and nothing else (`committed`). A Spark retry or a resumed round writes a new object and
points the same marker at it (a write of one object is atomic), then removes the object it
replaced: a part is never counted twice. An object no marker names (an attempt that died before
its marker) is never read; `recovery clear RUN` removes the run's (`remove_uncommitted`).

    <folder>/part-<run id>-r<round>-<component>-t<task>-<token>.<jsonl|parquet>     the attempts
    <folder>/_committed/part-<run id>-r<round>-<component>-t<task>.<jsonl|parquet>.d<N>   the markers

Nothing here can lock (a local folder's rename is done under a lock, with the driver's ownership
checked inside it), so a driver that was taken over may still write a marker after its check
passed. N orders them: the number of drivers that held the run before the attempt's (the
ownership check returns it, tracking.tracker.TaskTracker.check_fence), which grows at every
take-over. Of a part's markers, the one with the highest N counts; a lower one (a driver's that
was taken over) is never read, and `clear` removes it.

Readers that list a folder (Spark, pyarrow.dataset) skip `_committed/` but would read every
attempt: read such a folder through its markers.

On S3 an attempt killed while its object was uploading leaves an unfinished multipart upload,
which S3 keeps (and bills) until it is aborted, and which no listing of objects shows. A part's
commit aborts the unfinished uploads of its other attempts, and `clear` the run's
(`abort_uploads`, through boto3 when it is installed: pyarrow has no call for it).
"""
from __future__ import annotations

import importlib
import logging
import re
import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from recovery.tracking.spill_files import ArrowFiles, bare_uri, error_text, location_secrets

log = logging.getLogger(__name__)

COMMITTED = "_committed"
# an attempt's object: a part's name (part-<run>-r<round>-<component>-t<task>) and a token
ATTEMPT = re.compile(r"^part-.+-r\d{4,}-.+-t\d{4,}-[0-9a-f]{16}\.(?:jsonl|parquet)$")
# a marker: the part's name and the number of drivers before the one that wrote it
MARKER = re.compile(r"^(?P<part>part-.+\.(?:jsonl|parquet))\.d(?P<drivers>\d+)$")


def attempt_name(part: str) -> str:
    """The object an attempt at `part` writes: the part's name with a token of its own."""
    stem, ext = part.rsplit(".", 1)
    return f"{stem}-{secrets.token_hex(8)}.{ext}"


def part_of(attempt: str) -> str:
    """The part an attempt's object belongs to (its name without the token)."""
    stem, ext = attempt.rsplit(".", 1)
    return f"{stem[:-17]}.{ext}"


def marker_name(part: str, drivers: int) -> str:
    return f"{part}.d{drivers}"


def _s3_client(uri: str) -> Any:
    """A boto3 client of the S3 service an s3:// URI names, with pyarrow's options of the URI
    (endpoint_override, scheme, region, credentials in the user info or the query), else
    boto3's own chain (the environment, ~/.aws); None without boto3."""
    try:
        boto3 = importlib.import_module("boto3")   # (optional: the `s3` extra)
    except ImportError:
        return None
    parsed = urlparse(uri)
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    endpoint = query.get("endpoint_override")
    if endpoint and "://" not in endpoint:
        endpoint = f"{query.get('scheme', 'https')}://{endpoint}"
    key = unquote(parsed.username) if parsed.username else query.get("access_key")
    secret = unquote(parsed.password) if parsed.password else query.get("secret_key")
    return boto3.client("s3", endpoint_url=endpoint, region_name=query.get("region"),
                        aws_access_key_id=key or None, aws_secret_access_key=secret or None,
                        aws_session_token=query.get("session_token"))


class ObjectFolder:
    """A sink's folder at a URI: its markers, the objects they name, the attempts' objects."""

    def __init__(self, uri: str):
        self.uri = uri
        self.files = ArrowFiles(uri, bare_uri(uri))
        self.fs = self.files.fs
        self.base = self.files.base
        self.shown = self.files.shown
        self._secrets = location_secrets(uri)

    def why(self, err: BaseException) -> str:
        return error_text(err, self._secrets)

    def path(self, rel: str) -> str:
        return f"{self.base}/{rel}" if self.base else rel

    def _listed(self, rel: str) -> list[str]:
        """The names of the files directly in `rel` ("": the folder), none when it is missing."""
        from pyarrow import fs as pafs
        base = self.path(rel) if rel else self.base
        listed = self.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        return sorted(i.base_name for i in listed if i.type == pafs.FileType.File)

    def is_file(self) -> bool:
        """A file sits where the folder should be."""
        from pyarrow import fs as pafs
        return bool(self.base) and self.fs.get_file_info(self.base).type == pafs.FileType.File

    def _markers(self, match: Callable[[str], Any]) -> dict[str, list[tuple[int, str]]]:
        """part -> its markers (drivers, marker name), highest first, for the parts `match` accepts."""
        found: dict[str, list[tuple[int, str]]] = {}
        for name in self._listed(COMMITTED):
            m = MARKER.match(name)
            if m and match(m["part"]):
                found.setdefault(m["part"], []).append((int(m["drivers"]), name))
        return {part: sorted(ms, reverse=True) for part, ms in found.items()}

    def markers(self, match: Callable[[str], Any]) -> list[str]:
        """The names of the parts committed here (those with a marker) that `match` accepts."""
        return sorted(self._markers(match))

    def committed(self, match: Callable[[str], Any]) -> dict[str, str]:
        """part -> the object its counting marker (the highest) names, for the parts `match`
        accepts; a marker that names no attempt's object of its part (not one of ours) counts
        for nothing."""
        out: dict[str, str] = {}
        for part, found in self._markers(match).items():
            name = self._read_marker(found[0][1])
            if name is not None and ATTEMPT.match(name) and part_of(name) == part:
                out[part] = name
        return out

    def named_by(self, part: str) -> str | None:
        """The object `part`'s counting marker names, or None."""
        return self.committed(lambda p: p == part).get(part)

    def attempts(self) -> list[str]:
        """The names of every attempt's object in the folder, committed or not."""
        return [n for n in self._listed("") if ATTEMPT.match(n)]

    def _read_marker(self, marker: str) -> str | None:
        try:
            with self.files.open(f"{COMMITTED}/{marker}") as fh:
                return fh.read(1024).decode("utf-8", "replace").strip()
        except FileNotFoundError:
            return None

    def commit(self, part: str, write: Callable[[Any], object],
               fence: Callable[[], int | None] | None) -> str:
        """Write an attempt's object for `part` at once (`write(stream)`), then commit it
        (`Attempt.commit`). Returns the object's name."""
        attempt = self.attempt(part)
        try:
            write(attempt.stream)
        except BaseException:
            attempt.abort()
            raise
        return attempt.commit(fence)

    def attempt(self, part: str) -> Attempt:
        """A new attempt at `part`: its object, open for writing as the part's chunks come (an
        object store uploads it in parts: a multipart upload on S3)."""
        name = attempt_name(part)
        self.files.prepare(COMMITTED)   # (folders on a filesystem that has them: HDFS)
        return Attempt(self, part, name, self.files.create(name))

    def remove_quietly(self, name: str) -> None:
        """Best effort: an object left behind is never read, and `clear` removes it."""
        try:
            self.files.remove(name)
        except (OSError, ValueError) as err:
            log.info("sink folder %s: %s not removed: %s", self.shown, name, self.why(err))

    def abort_uploads(self, prefix: str, match: Callable[[str], Any], keep: str | None = None) -> list[str]:
        """On S3: abort the unfinished multipart uploads of the objects whose names start with
        `prefix` and that `match` accepts, but `keep` (an attempt's own). Returns their names;
        [] on another store, or without boto3 (an S3 lifecycle rule that aborts incomplete
        uploads does it then)."""
        if self.fs.type_name != "s3" or not self.base:
            return []
        client = _s3_client(self.uri)
        if client is None:
            log.info("sink folder %s: unfinished uploads not looked for (boto3 is not installed)", self.shown)
            return []
        bucket, _, key_base = self.base.partition("/")
        key_prefix = f"{key_base}/{prefix}" if key_base else prefix
        aborted = []
        try:
            for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=key_prefix):
                for upload in page.get("Uploads", ()):
                    name = upload["Key"][len(key_base) + 1 if key_base else 0:]
                    if "/" not in name and match(name) and name != keep:
                        client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
                        aborted.append(name)
        except Exception as err:   # botocore's errors are its own: as the store's other errors
            raise OSError(f"unfinished uploads under {self.shown}/{prefix}: {self.why(err)}") from None
        return aborted

    def remove_parts(self, match: Callable[[str], Any], attempts: list[str]) -> list[str]:
        """The parts `match` accepts (all their markers first, so no marker ever names a
        removed object, then the objects they named) and attempts' objects; missing ones are
        fine. Returns the names removed, relative to the folder."""
        markers = self._markers(match)
        named = [self._read_marker(m) for found in markers.values() for _, m in found]
        gone = [f"{COMMITTED}/{m}" for found in markers.values() for _, m in found]
        for rel in gone:
            self.files.remove(rel)
        objects = sorted({n for n in named if n and ATTEMPT.match(n)} | set(attempts))
        for name in objects:
            self.files.remove(name)
        return gone + objects

    def remove_uncounted(self, match: Callable[[str], Any], own_attempts: Callable[[str], Any]) -> list[str]:
        """For the parts `match` accepts: the markers that do not count (a driver's that was
        taken over), and the attempts' objects `own_attempts` accepts that no counting marker
        names. Returns the names removed, relative to the folder."""
        kept = set(self.committed(match).values())
        losers = [f"{COMMITTED}/{m}" for found in self._markers(match).values() for _, m in found[1:]]
        stale = [n for n in self.attempts() if own_attempts(n) and n not in kept]
        for rel in losers + stale:
            self.files.remove(rel)
        return losers + stale


class Attempt:
    """One attempt's object at a part, being written: `stream` takes its bytes; `commit` ends
    the upload (the object appears whole), then, after `fence`, which raises unless the task's
    driver still owns the run and returns how many drivers held it before, points the part's
    marker at it; `abort` drops it. Whatever fails before the marker removes the object."""

    def __init__(self, folder: ObjectFolder, part: str, name: str, stream: Any):
        self.folder, self.part, self.name, self.stream = folder, part, name, stream

    def commit(self, fence: Callable[[], int | None] | None) -> str:
        folder, part, name = self.folder, self.part, self.name
        try:
            self.stream.close()
            drivers = int((fence() if fence is not None else 0) or 0)
            marker = marker_name(part, drivers)
            previous = folder._read_marker(marker)
            with folder.files.create(f"{COMMITTED}/{marker}") as fh:
                fh.write(name.encode())
        except BaseException:
            folder.remove_quietly(name)
            raise
        if previous is not None and previous != name and ATTEMPT.match(previous) and part_of(previous) == part:
            folder.remove_quietly(previous)   # a retry's: no marker names it any more
        stem = part.rsplit(".", 1)[0]
        try:   # the part's attempts killed while uploading: nothing of theirs is needed now
            folder.abort_uploads(f"{stem}-", lambda n: ATTEMPT.match(n) and part_of(n) == part, keep=name)
        except OSError as err:   # best effort: `clear` looks again
            log.info("sink folder %s: unfinished uploads of %s not aborted: %s", folder.shown, part, folder.why(err))
        return name

    def abort(self) -> None:
        """Best effort: the upload ended and the object removed (never read: no marker names it)."""
        try:
            self.stream.close()
        except (OSError, ValueError) as err:
            log.info("sink folder %s: %s not completed: %s", self.folder.shown, self.name, self.folder.why(err))
        self.folder.remove_quietly(self.name)
