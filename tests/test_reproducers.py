"""Every failure `testbed explore` found, kept as its shrunk reproducer (tests/reproducers/,
plain experiments whose comments say what failed and the per-node log digests), and the
hand-written ones (first line `# hand-written reproducer: `): each must now judge ok -- fixed
at its cause, or judged by a claim the catalogue documents (a hazard, a liveness claim that
does not cover the schedule) -- or, where its third line says `# verdict: NOT OK: <reason>`,
judge NOT OK with that reason; and still replay the schedule that found it (the digests hold
where the fix changed no event)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.judge import judge_run
from analysis.record import read_record
from tests.eventlogs import run_dir_of
from tests.inproc import run_cli

FOUND = sorted((Path(__file__).parent / "reproducers").glob("*.yaml"))


@pytest.mark.parametrize("spec", FOUND, ids=[p.stem for p in FOUND])
def test_a_found_failure_now_judges_ok(spec: Path, tmp_path: Path) -> None:
    proc = run_cli("run", str(spec), "--backend", "sim", "--no-analyze", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = judge_run(read_record(run_dir_of(tmp_path)))
    head = spec.read_text().splitlines()
    why = head[2].removeprefix("# verdict: NOT OK: ") if len(head) > 2 else ""
    if why != head[2]:  # documented NOT OK: the verdict says why, and fails the run
        assert not summary["verdict"]["ok"], (spec.name, summary["verdict"])
        assert any(why in r for r in summary["verdict"]["reasons"]), (why, summary["verdict"])
        return
    assert summary["verdict"]["ok"], (spec.name, summary["verdict"])
    failed = head[1].removeprefix("# failing: ").split(", ")
    for name in failed:  # what failed is either clean now or documented as not claimed
        check = summary["checks"].get(name)
        if check is not None and check.get("violations"):
            assert check.get("claimed") is False and check.get("hazard"), (name, check)
        if name == "liveness":
            assert summary["verdict"]["liveness"] in ("quiescent", "stalled-as-claimed")


def test_the_reproducers_are_kept_for_what_they_found() -> None:
    assert len(FOUND) >= 6
    for spec in FOUND:
        head = spec.read_text().splitlines()[:2]
        assert head[0].startswith(("# testbed explore reproducer: seed ",
                                   "# hand-written reproducer: "))
        assert head[1].startswith("# failing: ")
