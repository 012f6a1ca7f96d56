"""A file sink's folder on a store opened by URI (s3://, gs://, hdfs://, ...): its parts
committed by marker, never by rename (an object store has none: S3's move is a copy, then a
delete).

Each attempt at a part writes an object of its own, under its final name from the start: the
part's name with a token unique to the attempt. Once the object is whole (on an object store it
appears only when its upload completes), the attempt checks that its driver still owns the run,
then writes the part's marker, `_committed/<part name>`, whose content is the object's name. That
one small write is the commit: a reader takes, for each marker, the object it names, and nothing
else (`committed_parts`). A Spark retry or a resumed round writes a new object and points the same
marker at it (a write of one object is atomic), then removes the object it replaced: a part is
never counted twice. An object no marker names (an attempt that died before its marker, or whose
driver was taken over) is never read; `recovery clear RUN` removes the run's
(`remove_uncommitted`).

    <folder>/part-<run id>-r<round>-<component>-t<task>-<token>.<jsonl|parquet>   the attempts
    <folder>/_committed/part-<run id>-r<round>-<component>-t<task>.<jsonl|parquet>   the markers

Readers that list a folder (Spark, pyarrow.dataset) skip `_committed/` but would read every
attempt: read such a folder through its markers.

Unlike a local folder's rename, done under a lock on the folder with the fence checked inside it,
nothing here can lock: the fence is checked right before the marker is written, so a driver taken
over in between could still point a marker at its attempt's object.
"""
from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable
from typing import Any

from recovery.tracking.spill_files import ArrowFiles, bare_uri, error_text, location_secrets

log = logging.getLogger(__name__)

COMMITTED = "_committed"
# an attempt's object: a part's name (part-<run>-r<round>-<component>-t<task>) and a token
ATTEMPT = re.compile(r"^part-.+-r\d{4,}-.+-t\d{4,}-[0-9a-f]{16}\.(?:jsonl|parquet)$")


def attempt_name(part: str) -> str:
    """The object an attempt at `part` writes: the part's name with a token of its own."""
    stem, ext = part.rsplit(".", 1)
    return f"{stem}-{secrets.token_hex(8)}.{ext}"


def part_of(attempt: str) -> str:
    """The part an attempt's object belongs to (its name without the token)."""
    stem, ext = attempt.rsplit(".", 1)
    return f"{stem[:-17]}.{ext}"


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

    def markers(self, match: Callable[[str], Any]) -> list[str]:
        """The names of the parts committed here (their markers) that `match` accepts."""
        return [n for n in self._listed(COMMITTED) if match(n)]

    def attempts(self) -> list[str]:
        """The names of every attempt's object in the folder, committed or not."""
        return [n for n in self._listed("") if ATTEMPT.match(n)]

    def named_by(self, part: str) -> str | None:
        """The object `part`'s marker names, or None (no marker; or a marker that names no
        attempt's object of that part, which is not one of ours, so it is never read)."""
        try:
            with self.files.open(f"{COMMITTED}/{part}") as fh:
                name = fh.read(1024).decode("utf-8", "replace").strip()
        except FileNotFoundError:
            return None
        return name if ATTEMPT.match(name) and part_of(name) == part else None

    def commit(self, part: str, write: Callable[[Any], None], fence: Callable[[], None] | None) -> str:
        """Write an attempt's object for `part`, then point the part's marker at it (after
        `fence`, which raises unless the task's driver still owns the run). Returns the object's
        name. An attempt that fails before its marker removes its object."""
        name = attempt_name(part)
        try:
            self.files.prepare(COMMITTED)   # (folders on a filesystem that has them: HDFS)
            with self.files.create(name) as fh:
                write(fh)
            previous = self.named_by(part)
            if fence is not None:
                fence()
            with self.files.create(f"{COMMITTED}/{part}") as fh:
                fh.write(name.encode())
        except BaseException:
            self._remove_quietly(name)
            raise
        if previous is not None and previous != name:   # a retry's: no marker names it any more
            self._remove_quietly(previous)
        return name

    def _remove_quietly(self, name: str) -> None:
        """Best effort: an object left behind is never read, and `clear` removes it."""
        try:
            self.files.remove(name)
        except (OSError, ValueError) as err:
            log.info("sink folder %s: %s not removed: %s", self.shown, name, self.why(err))

    def remove_parts(self, parts: list[str], attempts: list[str]) -> list[str]:
        """Parts (their markers first, so no marker ever names a removed object, then the
        objects they named) and attempts' objects; missing ones are fine. Returns the names
        removed, relative to the folder."""
        named = [self.named_by(p) for p in parts]
        for part in parts:
            self.files.remove(f"{COMMITTED}/{part}")
        objects = sorted({n for n in named if n} | set(attempts))
        for name in objects:
            self.files.remove(name)
        return [f"{COMMITTED}/{p}" for p in parts] + objects
