"""Liveness apart from safety (docs/architecture.md "Liveness").

The run's drain (testbed/drain.py, or the simulator) writes `drain.json`: whether every
message a correct host sent was final-delivered at every correct host before the drain's cap.
Agreement and validity prove something only about a quiescent run. When the run was not
quiescent, their counts are messages still in flight: they move to the `liveness` section
(`unproven`) and the checks report 0, judged false. Total order, integrity, FIFO and causal
order stay safety checks, judged on what was delivered. A run without a drain record (older
runs, synthetic logs) is judged as before. A run the runner cut short at its wall limit
(`cut_short` in drain.json, testbed/drain.py) keeps it in the section: its verdict is not ok.

A stall the protocol's claims excuse (`stalled-as-claimed`) excuses missing progress, not
disagreement: the run is over, so a message some correct host delivered and another correct
host did not is one it never will. `judge_disagreement` judges agreement again on such a
run; it fails the run unless a documented hazard voids agreement. A partition still on at the
end leaves it unjudged: no message crosses it, so it shows a cut, not a host that never will.
Validity's findings among a restarted process's own messages are progress the drain does
not wait for: `excuse_restarted` un-judges them where the claims promise no progress.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NEEDS_QUIESCENCE = ("agreement", "validity")


def liveness_section(drain: Mapping[str, Any] | None, checks: dict[str, Any]) -> dict[str, Any]:
    """The summary's `liveness` section; un-judges agreement and validity in `checks` (in
    place) when the run was not quiescent."""
    if drain is None:
        return {"quiescent": None, "note": "no drain record: agreement and validity judged "
                                           "as if the run were quiescent"}
    section = {k: drain.get(k) for k in ("quiescent", "drain_s", "drain_min_s", "drain_max_s",
                                         "in_flight", "undelivered_per_node")}
    if drain.get("cut_short"):  # the runner stopped the nodes at its wall limit
        section["cut_short"] = str(drain["cut_short"])
    if drain.get("quiescent"):
        return section
    unproven = {}
    for name in NEEDS_QUIESCENCE:
        check = checks.get(name)
        if check is None:
            continue
        unproven[name] = check["violations"]
        check["unproven"] = check["violations"]
        check["violations"] = 0
        check["judged"] = False
        check["note"] = "run not quiescent: missing deliveries are counted under liveness"
    section["unproven"] = unproven
    return section


def judge_disagreement(checks: dict[str, Any], live: dict[str, Any], healed: bool) -> None:
    """On a stall the claims excuse (`live`: the summary's `liveness` section, with
    `promised` false and not cut short) whose partitions all `healed`, judge agreement again
    (in place): its count, moved to `unproven` by `liveness_section`, is the correct hosts'
    disagreement for good; the section gets it as `disagreement`."""
    if live.get("quiescent") is not False or live.get("promised") is not False \
            or live.get("cut_short") or not healed:
        return
    check = checks.get("agreement")
    if check is None or "unproven" not in check:
        return
    check["violations"] = check.pop("unproven")
    check["judged"] = True
    check["note"] = ("stall excused, disagreement not: messages some correct host delivered "
                     "and another never did")
    live["disagreement"] = check["violations"]
    live.get("unproven", {}).pop("agreement", None)


def excuse_restarted(checks: dict[str, Any], live: dict[str, Any]) -> None:
    """Where the protocol claims no progress under the run's faults (`live["promised"]`
    false), un-judge (in place) what validity found among a restarted process's own
    messages (`restarted_senders`): the drain waits for the correct hosts' messages only, so
    those are progress the claims do not promise, even on a quiescent run."""
    check = checks.get("validity")
    n = int((check or {}).get("restarted_senders") or 0)
    if check is None or not n or live.get("promised") is not False \
            or check.get("judged") is False:
        return
    check["violations"] -= n
    check["unproven"] = n
    check["note"] = ("no progress claimed under this run's faults: a restarted process's "
                     "messages not delivered are counted under `unproven`")


def disagreement_reason(summary: dict[str, Any]) -> str:
    """The verdict's reason for an excused stall's disagreement (`liveness.disagreement`)."""
    check = summary.get("checks", {}).get("agreement") or {}
    text = (f"correct hosts disagree: {summary['liveness']['disagreement']} deliveries some "
            "correct host made and another never did (agreement")
    if check.get("claimed", True):
        return text + " claimed: the stall excuses no disagreement)"
    return text + (" not claimed under the hazard below)" if check.get("hazard")
                   else " not claimed)")


def liveness_line(summary: dict[str, Any]) -> str | None:
    """One line for the console and the report when the run was cut short or not
    quiescent."""
    live = summary.get("liveness") or {}
    if live.get("cut_short"):
        return f"cut short: {live['cut_short']} (agreement and validity not judged)"
    if live.get("quiescent") is not False:
        return None
    return (f"not quiescent after {live.get('drain_s', 0):g} s: {live.get('in_flight', 0)} "
            "messages in flight (agreement and validity not judged)")
