"""The workflow's code shipped with the job (model/code.py says which files): zipped under
RECOVERY_HOME/code, added to the SparkContext as an archive that every executor unpacks into
its SparkFiles folder, named by the code's digest. Tasks then import classes and run shell
scripts from that copy (RunSpec.code), never from the driver's folder.

In local mode the executors are this machine's processes: they use the workflow's own folder,
as relative data paths in shell arguments expect; nothing is shipped. Under Spark Connect the
server's workers may never see that folder: the zip always ships, as a session artifact
(`addArtifacts(..., archive=True)`), unpacked in the same place as a classic archive.

A zip is 0600 (it holds the workflow's code and whatever `<include>` adds) and belongs to the runs
that record its digest (RunRecord.code_digest): `clear` removes it with the last of them.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.engine import session
from recovery.home import private_dir, state_home
from recovery.model import code
from recovery.model.run import RunSpec
from recovery.model.workflow import Workflow

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def is_local(spark: SparkSession) -> bool:
    """Local mode of a classic session, whose executors are this process's children (the test
    kit's in-process engine counts as local); never a Spark Connect session's."""
    return not session.is_connect(spark) and session.is_local_master(session.master_of(spark))


def code_folder(home: Path | None = None) -> Path:
    """Where the zips of shipped code are kept: RECOVERY_HOME/code."""
    return Path(home or state_home()) / "code"


def remove_archives(digests: Iterable[str], home: Path | None = None) -> list[str]:
    """Remove the zips of the code of these digests (those that exist); their file names."""
    removed = []
    for digest in sorted(set(digests)):
        path = code_folder(home) / code.archive_name(digest)
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path.name)
    if removed:
        log.info("removed the shipped code archives %s", ", ".join(removed))
    return removed


def archives_except(digests: Iterable[str], home: Path | None = None) -> list[str]:
    """The digests of the zips under RECOVERY_HOME/code that none of `digests` names."""
    kept = {code.archive_name(d) for d in digests}
    folder = code_folder(home)
    return sorted(p.name[len(code.ARCHIVE_PREFIX):-len(".zip")]
                  for p in (folder.glob(f"{code.ARCHIVE_PREFIX}*.zip") if folder.is_dir() else ())
                  if p.name not in kept)


# the code each Spark Connect session was given (its artifacts cannot be listed from the client)
_connect_shipped: dict[str, set[str]] = {}


def ship(spark: SparkSession, wf: Workflow, home: Path | None = None) -> str | None:
    """Ship `wf`'s code to the executors (once per SparkContext and digest); the name tasks find
    it under (RunSpec.code), or None when nothing is shipped (local mode, no code to ship)."""
    bundle = code.bundle(wf)
    if not bundle.files:
        return None
    connect = session.is_connect(spark)
    if connect:
        shipped = _connect_shipped.setdefault(str(getattr(spark, "session_id", "")), set())
        if bundle.name in shipped:
            return bundle.name
    # (a classic session's SparkContext lists and adds archives; a Connect client has none)
    elif any(Path(a.split("#", 1)[0]).name == f"{bundle.name}.zip" for a in spark.sparkContext.listArchives):
        return bundle.name
    folder = private_dir(code_folder(home))
    packed = code.pack(bundle, folder)
    if connect:
        spark.addArtifacts(f"{packed.path}#{bundle.name}", archive=True)
        shipped.add(bundle.name)
    else:
        spark.sparkContext.addArchive(f"{packed.path}#{bundle.name}")
    log.info("shipped the workflow's code to the executors: %d files from %s (sha256 %s)",
             len(bundle.files), bundle.base_dir, bundle.digest[:16])
    return bundle.name


def with_code(spark: SparkSession, wf: Workflow, spec: RunSpec) -> RunSpec:
    """`spec` naming the shipped code of its run (the submitted workflow's: a recovery round's
    workflow is a part of it); unchanged in local mode."""
    if is_local(spark):
        return spec
    original = Workflow.from_task_json(spec.original_json) if spec.original_json else wf
    return dataclasses.replace(spec, code=ship(spark, original))
