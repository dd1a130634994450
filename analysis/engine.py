"""Judging a run record with an engine: `judge(record, engine)`, the one way every surface
(the runner, `testbed analyze`, the nightly through the runner) gets a run's verdict.

The engine is the Spark job (analysis/job.py `analyze`: the checks and the measurements, on a
cluster with `master`) or the in-process judge (analysis/judge.py `judge_run`: the checks, the
liveness and the verdict, no JVM). A Maelstrom program's run is judged in-process with either
(docs/maelstrom.md). Both end in analysis/verdict.py `finish`: one verdict. `prepare` starts
what the engine needs while the run runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from analysis.judge import judge_run
from analysis.record import RunRecord


def prepare(engine: str, run: str, events: int, master: str | None = None) -> None:
    """Start, in the background, what `judge` of the run named `run` with `engine` will need,
    its logs about `events` long: Spark's session, in local mode warmed up by a rehearsal of
    the analysis (analysis/warmup.py); nothing in-process."""
    if engine != "spark":
        return
    from analysis.warmup import warm_up

    def start() -> Any:
        from analysis.job import analysis_app
        from analysis.session import new_session

        return new_session(master, analysis_app(run), events)

    def rehearse() -> None:
        from analysis.job import rehearse

        rehearse()

    warm_up(start, rehearse if master is None or master.startswith("local") else None)


def judge(record: RunRecord, engine: str = "in-process", expect: Sequence[str] = (),
          master: str | None = None) -> dict[str, Any]:
    """The judged summary of the run with `engine` (analysis/judge.py `ENGINES`), its `expect`
    lines judged into the verdict. Spark writes `parquet/events/` and summary.json; in-process
    writes nothing."""
    if engine == "spark" and not record.is_maelstrom:
        from analysis.job import analyze

        return analyze(record, master=master, expect=expect)
    return judge_run(record, expect)
