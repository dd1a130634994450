"""The run's verdict: what the checks, the drain and the protocol's claims add up to.

One function, `finish`, turns a summary whose `checks` are counted into the judged summary:
membership checks (primary runs), Local Order's claim, the QoS bound, liveness from the drain,
and `verdict` / `ok`. The Spark job (analysis/job.py) and the in-process judge call it alike,
so both give the same verdict for the same counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.fault_history import FaultHistory
from analysis.liveness import liveness_section, read_drain
from analysis.membership import membership_section
from analysis.qos import latency_check, qos_for_run


def checks_ok(summary: dict[str, Any]) -> bool:
    """True when every claimed checker in the summary found no violation (a check without
    `claimed`, from an older summary, counts as claimed) and no node caught an exception
    (`node_errors`: an exception in a node is a bug, never a silent limp)."""
    return (all(c.get("violations", 0) == 0 for c in summary.get("checks", {}).values()
                if c.get("claimed", True))
            and not summary.get("node_errors", {}).get("total", 0))


def verdict(summary: dict[str, Any]) -> dict[str, Any]:
    """`{ok, safety, liveness, reasons}` of a judged summary."""
    reasons = [f"{name}: {c.get('violations')} violations"
               for name, c in summary.get("checks", {}).items()
               if c.get("claimed", True) and c.get("violations", 0)]
    errors = summary.get("node_errors", {}).get("total", 0)
    if errors:
        reasons.append(f"node errors: {errors}")
    live = summary.get("liveness") or {}
    liveness = "stalled" if live.get("quiescent") is False else "quiescent"
    ok = not reasons
    return {"ok": ok, "safety": "held" if ok else "violated", "liveness": liveness,
            "reasons": reasons}


def finish(summary: dict[str, Any], run_dir: Path, history: FaultHistory,
           claims: frozenset[str]) -> dict[str, Any]:
    """Complete `summary` (counted checks in `checks`, `local_order` at top level when the
    run opt-delivers) in place: membership, QoS, liveness, verdict and `ok`; return it."""
    membership = membership_section(run_dir)  # primary views (001 4.1) and notifications
    if membership:
        summary["checks"].update(membership["checks"])
        summary["membership"] = membership["membership"]
    if "local_order" in summary:
        summary["checks"]["local_order"] = summary.pop("local_order")
        summary["checks"]["local_order"]["claimed"] = "local_order" in claims
    qos = qos_for_run(run_dir, history, history.correct)
    if qos:
        # 004's bounds (docs/qos.md): a latency above the bound fails the run only when the
        # run met the bound's assumptions; a run with gaps (§7) is held to Def. 2 instead of
        # agreement and validity.
        summary["qos"] = qos
        summary["checks"]["latency_bound"] = {**latency_check(qos), "claimed": True}
        if "gaps" in qos:
            summary["checks"]["gap_liveness"] = {**qos["gaps"], "claimed": True}
            for name in ("agreement", "validity"):
                summary["checks"][name]["claimed"] = False
    summary["liveness"] = liveness_section(read_drain(run_dir), summary["checks"])
    summary["verdict"] = verdict(summary)
    summary["ok"] = summary["verdict"]["ok"]
    return summary
