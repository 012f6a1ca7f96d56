"""`recovery preview RUN`: what the next recovery round would do, found by running it in the
sandbox (jobs/sandbox.py), reported per failed position (how many of its queued tuples would
succeed, how many fail again and why) and per sink (how many records, and a sample)."""
from __future__ import annotations

import html
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import computed_field
from redis import Redis

from recovery.jobs import sandbox
from recovery.jobs.reports import Report, as_text
from recovery.jobs.settle import Progress
from recovery.model.failed import FailedTuple

if TYPE_CHECKING:
    from pyspark.sql import SparkSession  # lazy at run time: pyspark costs seconds to import

#: What a preview cannot promise, said with every preview.
CAVEAT = ("a component that calls out (an HTTP lookup, a database) or draws random numbers may behave "
          "differently when `recover` runs")


class PreviewError(Report):
    """One error of a position's tuples that would fail again: its text, how many, one tuple's values."""
    error: str
    count: int
    sample: Any


class PreviewPosition(Report):
    """A failed position: its queued tuples, how many would succeed, how many fail again."""
    component: str
    task: int
    tuples: int
    would_succeed: int
    would_fail: int
    errors: list[PreviewError]


class PreviewSink(Report):
    """A sink: how many records the round would write to it, and the first of them."""
    component: str
    records: int
    sample: list[Any]


class Preview(Report):
    """What `recover` would do next, as run in the sandbox (`recovery preview --json`)."""
    run_id: str
    code_changed: bool
    dead: bool                        # the dead letters, as if requeued
    round: int                        # the round previewed
    tuples: int                       # tuples previewed (0: nothing was queued)
    positions: list[PreviewPosition]
    sinks: list[PreviewSink]
    caveat: str = CAVEAT

    @computed_field  # type: ignore[prop-decorator]
    @property
    def message(self) -> str | None:
        """What a preview of nothing says (None when something was previewed)."""
        if self.tuples:
            return None
        what = "no dead letters" if self.dead else "nothing queued"
        return f"run {self.run_id} has {what}: there is nothing to preview"

    def _repr_html_(self) -> str:
        return preview_html(self)


def report(result: sandbox.SandboxResult, dead: bool) -> Preview:
    """The preview of a sandboxed round."""
    by_position: dict[tuple[str, int], list[FailedTuple]] = {}
    for tup in result.replayed:
        by_position.setdefault((tup.component, tup.task), []).append(tup)
    positions = []
    for (comp, task), tuples in sorted(by_position.items()):
        errors: dict[str, PreviewError] = {}
        failing = 0
        for tup in tuples:
            again = result.failed_again(tup)
            if not again:
                continue
            failing += 1
            error = again[0].error
            if error in errors:
                errors[error].count += 1
            else:
                sample = as_text(tup.values if tup.values is not None else tup.raw)
                errors[error] = PreviewError(error=error, count=1, sample=sample)
        positions.append(PreviewPosition(component=comp, task=task, tuples=len(tuples),
                                         would_succeed=len(tuples) - failing, would_fail=failing,
                                         errors=sorted(errors.values(), key=lambda e: (-e.count, e.error))))
    sinks = [PreviewSink(component=c.component, records=c.records, sample=c.sample) for c in result.sinks]
    return Preview(run_id=result.run_id, code_changed=result.code_changed, dead=dead, round=result.round,
                   tuples=len(result.replayed), positions=positions, sinks=sinks)


def preview(spark: SparkSession | Callable[[], SparkSession], client: Redis, redis_url: str, run_id: str, *,
            dead: bool = False, component: str | None = None, limit: int | None = None,
            progress: Progress | None = None) -> Preview:
    """Run the next recovery round in the sandbox and report it. `spark` may be a function
    that starts the session: nothing queued needs none."""
    result = sandbox.run_sandboxed(spark, client, redis_url, run_id, dead=dead, component=component, limit=limit,
                                   progress=progress)
    return report(result, dead)


def preview_html(p: Preview) -> str:
    """A preview as HTML tables (a notebook; the web view has its own page): every value escaped."""
    def e(value: Any) -> str:
        return html.escape("" if value is None else str(value))
    title = f"preview of run {e(p.run_id)}, round {e(p.round)}" + (" (dead letters, as if requeued)" if p.dead else "")
    parts = [f'<div class="recovery-preview"><p>{title}</p>']
    if p.code_changed:
        parts.append("<p>The workflow's code changed since the run was submitted: this previews the new code.</p>")
    if p.message:
        parts.append(f"<p>{e(p.message)}</p></div>")
        return "".join(parts)
    parts.append('<table class="positions"><tr><th>component</th><th>task</th><th>tuples</th>'
                 "<th>would succeed</th><th>would fail</th><th>errors</th></tr>")
    for pos in p.positions:
        errors = "<br>".join(f"{e(x.count)} × {e(x.error[:300])} (e.g. {e(x.sample)})" for x in pos.errors)
        parts.append(f"<tr><td>{e(pos.component)}</td><td>{e(pos.task)}</td><td>{e(pos.tuples)}</td>"
                     f"<td>{e(pos.would_succeed)}</td><td>{e(pos.would_fail)}</td><td>{errors}</td></tr>")
    parts.append('</table><table class="sinks"><tr><th>sink</th><th>records</th><th>sample</th></tr>')
    for s in p.sinks:
        sample = "<br>".join(e(r) for r in s.sample)
        parts.append(f"<tr><td>{e(s.component)}</td><td>{e(s.records)}</td><td>{sample}</td></tr>")
    parts.append(f"</table><p>Not promised: {e(p.caveat)}.</p></div>")
    return "".join(parts)
