"""analysis/qos.py on synthetic delivery logs: the empirical Δ and Γ, the bound per formula,
when a latency above the bound is a violation, refusals, rates and total order with gaps."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from analysis import qos
from analysis.fault_history import fault_history
from analysis.record import read_record
from analysis.verdict import verdict

MS = 1_000_000
T0 = 1_000 * MS


def ev(ev: str, t_ms: float, skew_ms: float = 0.0, **fields: Any) -> dict[str, Any]:
    t = T0 + round(t_ms * MS)
    return {"t": t, "lt": t + round(skew_ms * MS), "ev": ev, **fields}


def two_nodes(recv_at_ms: float, skew_ms: float, dummy_at_ms: float = 5.0) -> qos.Events:
    """h1 sends a data message (tick at 0) and a dummy (tick at 20); h2 receives both and
    h1, h2 deliver the data message at 30 and `recv_at_ms + 2`."""
    return {
        "h1": [ev("send", -1, skew_ms, mid="h1:1"),
               ev("net", 0, skew_ms, kind="data", rseq=1, mid="h1:1"),
               ev("net", 20, skew_ms, kind="dummy", rseq=2),
               ev("reserve", 0, skew_ms, avg=50, burst=1, bytes=144),
               ev("fnl", 30, skew_ms, mid="h1:1", seq=1)],
        "h2": [ev("netrecv", recv_at_ms, member="h1", rseq=1, kind="data"),
               ev("recv", recv_at_ms, mid="h1:1"),
               ev("netrecv", 20 + dummy_at_ms, member="h1", rseq=2, kind="dummy"),
               ev("fnl", recv_at_ms + 2, mid="h1:1", seq=1)],
    }


def test_empirical_delta_covers_dummies_and_gamma_is_twice_the_largest_offset() -> None:
    events = two_nodes(recv_at_ms=10, skew_ms=4, dummy_at_ms=35)
    q = qos.qos_section(events, 4 * MS, "qos-cbr", {"delta": 40, "gamma": 10}, False, True)
    assert q["delta_measured_ms"] == 35.0  # the dummy's transit, not the data message's 10
    assert q["gamma_measured_ms"] == 8.0
    assert q["bound_ms"] == 50.0 and q["max_latency_ms"] == 30.0 and q["slack_ms"] == 20.0
    assert q["assumptions_hold"]


def test_latency_above_the_bound_is_a_violation_only_when_assumptions_hold() -> None:
    late = two_nodes(recv_at_ms=39, skew_ms=0)  # fnl at 41 ms > Δ+Γ = 40 + 0
    q = qos.qos_section(late, 0, "qos-cbr", {"delta": "40ms", "gamma": 0}, False, True)
    assert q["assumptions_hold"] and q["above_bound"] == 1
    assert qos.latency_check(q)["violations"] == 1 and qos.latency_check(q)["judged"]
    slow = two_nodes(recv_at_ms=45, skew_ms=0)  # the network broke Δ: flagged, not judged
    q = qos.qos_section(slow, 0, "qos-cbr", {"delta": 40, "gamma": 0}, False, True)
    assert not q["assumptions_hold"] and "measured Δ 45 ms > declared 40 ms" in \
        q["assumptions_violated"][0]
    check = qos.latency_check(q)
    assert {k: check[k] for k in ("violations", "judged", "bound_ms", "examples")} == {
        "violations": 0, "judged": False, "bound_ms": 40.0, "examples": []}
    assert check["note"].startswith("not judged: the run left the bound's model (measured Δ")


def test_bound_formulas_per_protocol_and_failures() -> None:
    d, g, th, po = 50 * MS, 10 * MS, 20 * MS, 3 * MS
    assert qos.bound_ns("cbr", d, g, th, po, False) == 60 * MS
    assert qos.bound_ns("vbr", d, g, th, po, False) == 80 * MS
    assert qos.bound_ns("vbr", d, g, th, po, True) == 90 * MS
    assert qos.bound_ns("leader", d, g, th, po, False) == 103 * MS
    assert qos.bound_ns("timestamp-leader", d, g, th, po, False) == 120 * MS  # 2Δ+Θ
    assert qos.bound_ns("timestamp-leader", d, g, th, 30 * MS, False) == 130 * MS  # 2Δ+pO
    assert qos.bound_ns("timestamp-leader", 5 * MS, g, th, 0, False) == 30 * MS
    assert qos.bound_kind("qos-cbr") == "cbr" and qos.bound_kind("qos-vbr") == "vbr"
    assert qos.bound_kind("sequencer") == ""


def test_a_refused_reservation_voids_the_assumptions() -> None:
    events = two_nodes(recv_at_ms=10, skew_ms=0)
    # the core's answer and the protocol's own line about it: one refusal
    events["h2"].append(ev("reserve", 1, key="qos-cbr", rate_bps=1e9, granted=False,
                           reason="over capacity"))
    events["h2"].append(ev("refused", 1, key="qos-cbr", rate_bps=1e9, reason="over capacity"))
    q = qos.qos_section(events, 0, "qos-cbr", {}, False, True)
    assert q["refused"] == 1 and not q["assumptions_hold"]


def test_vbr_rates_and_total_order_with_gaps() -> None:
    # 1 s of slots of 20 ms: 50 dummies + 10 data at avg 10/s is 60/s = avg + 1/Θ (Thm 3)
    net = [ev("net", k * 20, kind="dummy", rseq=k + 1) for k in range(51)]
    net += [ev("net", k * 100 + 1, kind="data", rseq=100 + k, mid=f"h1:{k + 1}")
            for k in range(10)]
    net.sort(key=lambda e: e["t"])
    h1 = net + [ev("reserve", 0, avg=10, burst=3, bytes=144)]
    h1 += [ev("send", k * 100, mid=f"h1:{k + 1}") for k in range(10)]
    h2 = [ev("recv", 5, mid="h1:1"), ev("recv", 105, mid="h1:2"), ev("recv", 205, mid="h1:3"),
          ev("late", 206, mid="h1:3"), ev("fnl", 40, mid="h1:1", seq=1)]
    q = qos.qos_section({"h1": h1, "h2": h2}, 0, "qos-vbr",
                        {"delta": 20, "gamma": 5, "theta": 20, "loss_tolerance": 1}, False, True)
    # x > 0: the §7 protocol passes a lost slot at its deadline, so Thm 5's bound (§7.2)
    assert q["bound_ms"] == 50.0 and q["formula"] == "Δ+2Γ+Θ"
    row = q["rate_check"]["per_node"]["h1"]
    assert row["declared"] == 60.0 and row["net"] == 60.0 and row["ok"]
    assert q["gaps"]["violations"] == 1 and q["gaps"]["examples"] == [{"node": "h2",
                                                                      "mid": "h1:2"}]
    h1.extend(ev("net", 1000 + k, kind="data", rseq=200 + k) for k in range(30))  # a burst
    q = qos.qos_section({"h1": h1, "h2": h2}, 0, "qos-vbr", {"theta": 20}, False, True)
    assert q["rate_check"]["violations"] == 1


def paused_receiver(pause_ms: tuple[float, float] | None, sent_ms: float) -> dict[str, Any]:
    """h1's data message leaves at `sent_ms` (its dummy 20 ms later), h2 has both 5 ms
    later and delivers the message 300 ms after it was sent; h2 is paused over
    `pause_ms` (true time, from the fault history) or never. Δ = 20, Γ = 5, Θ = 20 ms:
    Thm 5's bound is 50 ms and the initialization time after waking the same."""
    s = sent_ms
    events: qos.Events = {
        "h1": [ev("send", s, mid="h1:1"), ev("net", s, kind="data", rseq=1, mid="h1:1"),
               ev("net", s + 20, kind="dummy", rseq=2), ev("fnl", s + 30, mid="h1:1", seq=1)],
        "h2": [ev("netrecv", s + 5, member="h1", rseq=1, kind="data"),
               ev("recv", s + 5, mid="h1:1"),
               ev("netrecv", s + 25, member="h1", rseq=2, kind="dummy"),
               ev("fnl", s + 300, mid="h1:1", seq=1)],
    }
    faults = [] if pause_ms is None else [
        {"t": T0 + round(pause_ms[0] * MS), "kind": "pause", "phase": "start",
         "hosts": ["h2"], "fault": 0},
        {"t": T0 + round(pause_ms[1] * MS), "kind": "pause", "phase": "stop",
         "hosts": ["h2"], "fault": 0}]
    history = fault_history(["h1", "h2"], faults)
    q = qos.qos_section(events, 0, "qos-vbr", {"delta": 20, "gamma": 5, "theta": 20},
                        True, True, history.correct,  # Thm 5: failures in the schedule
                        qos.failure_kinds(history), qos.down_spans(history))
    assert q["bound_ms"] == 50.0 and q["assumptions_hold"], q
    return q


def test_thm5_leaves_out_a_paused_receivers_late_deliveries_only() -> None:
    """Thm 5 (004 §6.5) bounds the latency between correct processes; a paused process is
    the model's failed one, correct again Δ+2Γ+Θ after it wakes (§6.3). The same late
    delivery (300 ms against 50) is a violation when the receiver was not down, when it
    paused only after the message's deadline, and when the message was sent after its
    initialization time had passed."""
    # paused at 30 ms, before the deadline (50 ms), woke at 290 ms: excused
    q = paused_receiver((30, 290), sent_ms=0)
    assert q["above_bound"] == 0 and qos.latency_check(q)["violations"] == 0
    assert q["max_latency_ms"] == 30.0  # h1's own delivery, the one Thm 5 covers
    assert q["excused"]["above_bound"] == 1 and q["excused"]["max_latency_ms"] == 300.0
    assert q["excused"]["examples"] == [{"mid": "h1:1", "latency_ms": 300.0}]
    assert qos.qos_line({"qos": q}).endswith(
        "; 1 message(s) late only at a host crashed or paused (up to 300.0 ms): not bounded "
        "by Thm 5")
    # the same log without the pause: a violation
    q = paused_receiver(None, sent_ms=0)
    assert qos.latency_check(q)["violations"] == 1 and "excused" not in q
    # paused only after the deadline (sent 0, deadline 50, paused at 60): no excuse
    q = paused_receiver((60, 290), sent_ms=0)
    assert qos.latency_check(q)["violations"] == 1
    assert q["examples"] == [{"mid": "h1:1", "latency_ms": 300.0}]
    # sent 50 ms after h2 woke (at 10 ms; Δ+2Γ+Θ = 50): h2 is correct again, no excuse
    q = paused_receiver((0, 10), sent_ms=60)
    assert qos.latency_check(q)["violations"] == 1
    # sent 49 ms after it woke: still within its initialization time, excused
    q = paused_receiver((0, 10), sent_ms=59)
    assert qos.latency_check(q)["violations"] == 0 and q["excused"]["above_bound"] == 1


def test_down_spans_are_crashes_until_restart_and_pauses_until_resume() -> None:
    faults = [{"t": 5, "kind": "crash", "phase": "start", "hosts": ["h1"], "fault": 0},
              {"t": 9, "kind": "crash", "phase": "stop", "hosts": ["h1"], "fault": 0},
              {"t": 7, "kind": "pause", "phase": "start", "hosts": ["h2"], "fault": 1},
              {"t": 8, "kind": "partition", "phase": "start", "hosts": ["h1", "h2", "h3"],
               "fault": 2, "params": {"cuts": [["h3", "h1"], ["h1", "h3"]]}}]
    down = qos.down_spans(fault_history(["h1", "h2", "h3"], faults))
    assert down == {"h1": [(5, 9)], "h2": [(7, math.inf)]}  # a cut-off host takes its steps


def test_read_events_from_a_run_directory(tmp_path: Path) -> None:
    for node, evs in two_nodes(recv_at_ms=10, skew_ms=-3).items():
        d = tmp_path / "nodes" / node
        d.mkdir(parents=True)
        # every intact line has its ordinal `i` (analysis/deliverylog.py)
        (d / "events.jsonl").write_text("".join(json.dumps({**e, "i": k}) + "\n"
                                                for k, e in enumerate(evs))
                                        + '{"t": 1, "lt"\n')  # a line cut short
    events, skew = qos.read_events(read_record(tmp_path))
    assert skew == 3 * MS and len(events["h1"]) == 5
    assert qos.delta_measured(events) == 10 * MS


def test_porder_logs_must_agree_across_nodes() -> None:
    same = [ev("porder", 1, hash=7, cycle=0, current=0), ev("porder", 900, hash=9, cycle=3,
                                                             current=4)]
    assert qos.porder_mismatches({"h1": same, "h2": same[:1]}) == 0
    other = [same[0], ev("porder", 900, hash=9, cycle=3, current=5)]
    assert qos.porder_mismatches({"h1": same, "h2": other}) == 1


def _write_run(run_dir: Path, logs: qos.Events) -> None:
    for node, evs in logs.items():
        d = run_dir / "nodes" / node
        d.mkdir(parents=True)
        (d / "events.jsonl").write_text("".join(json.dumps({**e, "i": k}) + "\n"
                                                for k, e in enumerate(evs)))


def test_empirical_delta_pairs_datagrams_within_one_incarnation(tmp_path: Path) -> None:
    """A restarted sender numbers from 1 again and its receivers log its incarnation on each
    `netrecv` (`inc`, left out for 0): read from the logs, each datagram pairs with the `net`
    of the sender's own incarnation, whatever the receiver's incarnation is -- h2 restarted
    before h1 did, and after, so its own incarnation differs from h1's both times."""
    _write_run(tmp_path, {
        "h1": [ev("start", -1, incarnation=0), ev("net", 0, kind="dummy", rseq=1),
               ev("start", 100, incarnation=1), ev("net", 200, kind="dummy", rseq=1),
               ev("net", 300, kind="dummy", rseq=2)],
        "h2": [ev("start", -1, incarnation=0), ev("start", 50, incarnation=1),
               ev("netrecv", 55, member="h1", rseq=1, kind="dummy"),
               ev("netrecv", 215, member="h1", rseq=1, kind="dummy", inc=1),
               ev("start", 250, incarnation=2),
               ev("netrecv", 304, member="h1", rseq=2, kind="dummy", inc=1)],
    })
    events, _ = qos.read_events(read_record(tmp_path))
    assert [e["member_inc"] for e in events["h2"] if e["ev"] == "netrecv"] == [0, 1, 1]
    assert [e["inc"] for e in events["h2"] if e["ev"] == "netrecv"] == [1, 1, 2]
    assert qos.delta_measured(events) == 55 * MS
    # no datagram lost: h2's incarnations each saw a run of h1's rseqs without a hole
    assert qos.path_counts(events) == ({}, {})
    # a hole within one receiver incarnation is a loss
    (tmp_path / "nodes" / "h2" / "events.jsonl").unlink()
    (tmp_path / "nodes" / "h2").rmdir()
    _write_run(tmp_path, {"h2": [ev("start", -1, incarnation=0),
                                 ev("netrecv", 215, member="h1", rseq=1, kind="dummy", inc=1),
                                 ev("netrecv", 310, member="h1", rseq=3, kind="dummy", inc=1)]})
    events, _ = qos.read_events(read_record(tmp_path))
    assert qos.path_counts(events) == ({}, {"h1->h2": 1})


def test_the_report_has_a_qos_section_that_says_whether_the_bound_was_judged() -> None:
    from analysis.report import render_report

    events = two_nodes(recv_at_ms=45, skew_ms=0)
    q = qos.qos_section(events, 0, "qos-cbr", {"delta": 40, "gamma": 0}, False, True)
    bound = {**qos.latency_check(q), "claimed": True}
    html = render_report({"run": "r", "checks": {"latency_bound": bound}, "qos": q})
    assert "<h2>QoS (qos-cbr, 004)</h2>" in html
    assert "only safety judged" in html and "40.0 / 45.0 ms" in html
    # the checks table says why the bound was not judged, and the verdict fails for it
    assert "not judged: the run left the bound&#x27;s model (measured Δ 45 ms" in html
    v = verdict({"checks": {"latency_bound": bound}})
    assert not v["ok"] and v["safety"] == "held"
    assert v["reasons"] == [f"latency_bound: {bound['note']}"]
    # judged, or not claimed: no reason
    assert verdict({"checks": {"latency_bound": {**bound, "judged": True}}})["ok"]
    assert verdict({"checks": {"latency_bound": {**bound, "claimed": False}}})["ok"]
    assert "QoS" not in render_report({"run": "r", "checks": {}})
