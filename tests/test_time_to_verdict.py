"""bench/time_to_verdict.py: its options, its target, and one timed case (the sim quickstart
judged in-process) run end to end."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from bench import time_to_verdict as ttv


def test_options_pick_cases_and_repeats() -> None:
    args = ttv.parse_args([])
    assert args.repeat == 1 and args.cases == [*ttv.CASES, ttv.FLOOR]
    args = ttv.parse_args(["--repeat", "3", "--case", "sim-quickstart", "--case", "floor"])
    assert args.repeat == 3 and args.cases == ["sim-quickstart", "floor"]
    with pytest.raises(SystemExit):
        ttv.parse_args(["--case", "no-such-case"])
    with pytest.raises(SystemExit):
        ttv.parse_args(["--repeat", "0"])


def test_target_is_ten_seconds_or_the_floor_plus_two() -> None:
    assert ttv.target(None) == 10.0
    assert ttv.target(5.0) == 10.0
    assert ttv.target(21.5) == 23.5


def test_one_in_process_sim_case_is_timed_and_leaves_no_runs() -> None:
    before = set(Path(tempfile.gettempdir()).glob("ttv-runs-*"))
    seconds = ttv.run_case("sim-quickstart", "in-process")
    assert 0.1 < seconds < 300
    assert set(Path(tempfile.gettempdir()).glob("ttv-runs-*")) == before


def test_a_failing_command_is_an_error_not_a_figure() -> None:
    with pytest.raises(ttv.CaseFailed, match="exit 1"):
        ttv._timed(["python3", "-c", "raise SystemExit(1)"], verdict=True)
    assert ttv._timed(["python3", "-c", "print('verdict: NOT OK'); raise SystemExit(1)"],
                      verdict=True) > 0
