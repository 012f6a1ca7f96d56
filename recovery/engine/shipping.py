"""The workflow's code shipped with the job (model/code.py says which files): zipped under
RECOVERY_HOME/code, added to the SparkContext as an archive that every executor unpacks into
its SparkFiles folder, named by the code's digest. Tasks then import classes and run shell
scripts from that copy (RunSpec.code), never from the driver's folder.

In local mode the executors are this machine's processes: they use the workflow's own folder,
as relative data paths in shell arguments expect; nothing is shipped.
"""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.home import private_dir, state_home
from recovery.model import code
from recovery.model.run import RunSpec
from recovery.model.workflow import Workflow

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def is_local(spark: SparkSession) -> bool:
    """Local mode (the test kit's in-process engine, which has no master, counts as local)."""
    master = getattr(spark.sparkContext, "master", None) or "local"
    return master == "local" or master.startswith("local[")


def ship(spark: SparkSession, wf: Workflow, home: Path | None = None) -> str | None:
    """Ship `wf`'s code to the executors (once per SparkContext and digest); the name tasks find
    it under (RunSpec.code), or None when nothing is shipped (local mode, no code to ship)."""
    bundle = code.bundle(wf)
    if not bundle.files:
        return None
    sc = spark.sparkContext
    if any(Path(a.split("#", 1)[0]).name == f"{bundle.name}.zip" for a in sc.listArchives):
        return bundle.name
    folder = private_dir(Path(home or state_home()) / "code")
    packed = code.pack(bundle, folder)
    sc.addArchive(f"{packed.path}#{bundle.name}")
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
