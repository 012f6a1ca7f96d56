"""`recovery status RUN`: a run's root counts, per-component counters and failed positions."""
from __future__ import annotations

import click

from recovery.cli import common, json_option, redis_option
from recovery.jobs import reports


def register(main: click.Group) -> None:
    @main.command()
    @click.argument("run_id", callback=common.run_id_arg)
    @redis_option
    @json_option
    def status(run_id: str, redis_url: str | None, as_json: bool) -> None:
        """Roots complete / pending / failed / dead, and the failed positions."""
        client, _ = common.client_for(redis_url)
        common.show(reports.run_summary(client, run_id), as_json)
