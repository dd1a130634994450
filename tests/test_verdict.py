"""One verdict a user can trust: a stall fails the run unless the protocol's liveness claim
(nodes/protocols/catalogue.py `Liveness`) promises no progress under the run's faults, and a
protocol with a latency bound runs only inside its model (`Model`) unless the experiment says
`outside_model: true`, when each assumption is measured and the bound judged only if all
held."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from analysis.expect import evaluate
from analysis.record import read_record
from analysis.verdict import Fault, liveness_promise, verdict, verdict_line
from nodes.protocols import catalogue
from tests.eventlogs import run_dir_of
from tests.inproc import run_cli

ROOT = Path(__file__).resolve().parents[1]
HOSTS = ["h1", "h2", "h3", "h4"]


def judged(checks: dict[str, Any], liveness: dict[str, Any], errors: int = 0) -> dict[str, Any]:
    return {"checks": checks, "node_errors": {"total": errors}, "liveness": liveness}


CLEAN = {"total_order": {"violations": 0, "claimed": True},
         "agreement": {"violations": 0, "claimed": True, "judged": False, "unproven": 120},
         "validity": {"violations": 0, "claimed": True, "judged": False, "unproven": 69}}
STALL = {"quiescent": False, "drain_s": 30.0, "in_flight": 189,
         "unproven": {"agreement": 120, "validity": 69}}
# agreement and validity of a run that did not settle: not judged, never a count
UNSETTLED = "run not quiescent: missing deliveries are counted under liveness"
UNJUDGED = {name: "no reason recorded" for name in ("agreement", "validity")}
NOT_JUDGED = "not judged: agreement, validity (no reason recorded)"


def test_a_stall_the_claims_promise_against_fails_with_the_missing_messages() -> None:
    v = verdict(judged(CLEAN, {**STALL, "promised": True, "promise": "no faults"}))
    assert v == {"ok": False, "safety": "held", "liveness": "stalled", "reasons": [
        "stalled: 189 deliveries of correct hosts' messages missing at correct hosts after a "
        "30 s drain (unproven: agreement 120, validity 69); claimed: no faults", NOT_JUDGED],
        "not_judged": UNJUDGED}
    # a summary without a claim (an unknown protocol) is held to progress as well
    assert verdict(judged(CLEAN, STALL))["liveness"] == "stalled"


def test_a_stall_the_claims_excuse_is_ok_and_says_why() -> None:
    why = ("sequencer h1 crashed at 4.0 s: `sequencer` claims no progress without its "
           "sequencer")
    v = verdict(judged(CLEAN, {**STALL, "promised": False, "promise": why}))
    assert v == {"ok": True, "safety": "held", "liveness": "stalled-as-claimed",
                 "reasons": [why, NOT_JUDGED], "not_judged": UNJUDGED}
    summary = judged(CLEAN, {**STALL, "promised": False, "promise": why})
    summary["verdict"] = v
    assert verdict_line(summary) == (f"verdict: ok (safety held, stalled-as-claimed): {why}; "
                                     f"{NOT_JUDGED}")


def test_safety_is_judged_on_claimed_checks_and_node_errors_whatever_the_liveness() -> None:
    quiet = {"quiescent": True, "in_flight": 0}
    assert verdict(judged(CLEAN, quiet)) == {"ok": True, "safety": "held",
                                             "liveness": "quiescent", "reasons": [NOT_JUDGED],
                                             "not_judged": UNJUDGED}
    bad = {**CLEAN, "total_order": {"violations": 3, "claimed": True},
           "causal_order": {"violations": 7, "claimed": False}}
    v = verdict(judged(bad, {**STALL, "promised": False, "promise": "excused"}))
    assert not v["ok"] and v["safety"] == "violated"
    assert v["reasons"][0] == "total_order: 3 violation(s)"
    assert not any("causal_order" in r for r in v["reasons"])
    assert verdict(judged(CLEAN, quiet, errors=2))["reasons"] == ["node errors: 2", NOT_JUDGED]


def test_expect_reads_ok_and_verdict_ok() -> None:
    summary = judged(CLEAN, {**STALL, "promised": True})
    summary["verdict"] = verdict(summary)
    summary["ok"] = summary["verdict"]["ok"]
    results = evaluate(["ok == 1", "verdict.ok == 1", "ok == 0"], summary)
    assert [r.ok for r in results] == [False, False, True]


def crash(host: str, at: float, ended: bool = False) -> Fault:
    return Fault("crash", f"{host} crashed", (host,), at, ended)


def test_the_sequencer_promises_nothing_without_its_sequencer_and_all_else_without() -> None:
    seq = catalogue.get("sequencer")
    ok, why = liveness_promise(seq, {"sequencer": "h2"}, HOSTS, [crash("h2", 4.0)])
    assert not ok and why == ("sequencer h2 crashed at 4.0 s: `sequencer` claims no progress "
                              "without its sequencer")
    # the default sequencer is the first host
    assert not liveness_promise(seq, {}, HOSTS, [crash("h1", 1.0)])[0]
    assert liveness_promise(seq, {}, HOSTS, [crash("h3", 1.0)])[0]
    lossy = Fault("loss", "sites.a.lan: loss 0.05")
    assert liveness_promise(seq, {}, HOSTS, [lossy, crash("h4", 2.0, ended=True)])[0]
    # a partition still on at the end, or a pause never resumed, voids every promise
    cut = Fault("partition", "partition cutting off h4", ("h4",), 3.0, ended=False)
    ok, why = liveness_promise(seq, {}, HOSTS, [cut])
    assert not ok and "never ended" in why
    assert liveness_promise(seq, {}, HOSTS, [Fault("partition", "p", ("h4",), 3.0)])[0]


def test_fifo_promises_no_delivery_of_lost_messages_and_reliable_ones_do() -> None:
    lossy = Fault("loss", "sites.a.lan: loss 0.05")
    ok, why = liveness_promise(catalogue.get("fifo"), {}, HOSTS, [lossy])
    assert not ok and why == "sites.a.lan: loss 0.05: `fifo` claims no progress under datagram loss"
    assert liveness_promise(catalogue.get("reliable-nack"), {}, HOSTS, [lossy])[0]
    # crash-intolerant protocols without membership
    for name in ("psync-total", "lamport", "token-ring", "cbcast", "moving-sequencer"):
        assert not liveness_promise(catalogue.get(name), {}, HOSTS, [crash("h3", 1.0)])[0], name
        assert liveness_promise(catalogue.get(name), {}, HOSTS, [lossy])[0], name


def test_primary_needs_a_majority_and_switching_each_of_its_instances() -> None:
    primary = catalogue.get("primary")
    assert liveness_promise(primary, {}, HOSTS, [crash("h1", 1.0)])[0]
    ok, why = liveness_promise(primary, {}, HOSTS, [crash("h1", 1.0), crash("h2", 2.0)])
    assert not ok and "2 of 4 hosts crashed" in why
    switching = catalogue.get("switching")
    ok, why = liveness_promise(switching, {}, HOSTS, [crash("h1", 1.0)])
    assert not ok and why.startswith("instance seq-a: sequencer h1 crashed at 1.0 s")
    assert liveness_promise(switching, {}, HOSTS, [crash("h3", 1.0)])[0]
    lamport = {"instances": [{"name": "a", "protocol": "sequencer", "params": {}},
                             {"name": "b", "protocol": "lamport"}]}
    ok, why = liveness_promise(switching, lamport, HOSTS, [crash("h3", 1.0)])
    assert not ok and why.startswith("instance b: h3 crashed at 1.0 s: `lamport` claims")


def test_every_bound_has_a_model_and_every_claim_names_known_faults() -> None:
    for e in catalogue.CATALOGUE:
        assert e.liveness.tolerates <= set(catalogue.FAULT_KINDS), e.name
        assert (e.model is not None) == bool(e.bound), e.name
    assert catalogue.get("qos-cbr").model.failures == frozenset()  # type: ignore[union-attr]
    assert "crash" in catalogue.get("qos-vbr").model.failures  # type: ignore[union-attr]


# --- runs on the sim backend, analysed with Spark in this process ---------------------------

TWO_SITES = ROOT / "topologies" / "two-sites.yaml"


def run(tmp_path: Path, name: str, body: str, *args: str) -> tuple[int, str, Path]:
    d = tmp_path / name
    d.mkdir()
    exp = d / "exp.yaml"
    exp.write_text(f"name: {name}\nbackend: sim\nseed: 1\n{body}")
    proc = run_cli("run", str(exp), "--out", str(d / "runs"), *args)
    return proc.returncode, proc.stdout + proc.stderr, d / "runs"


def summary_of(out: Path) -> dict[str, Any]:
    return json.loads((run_dir_of(out) / "summary.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.spark
def test_a_sequencer_without_its_sequencer_stalls_as_claimed(tmp_path: Path, spark: Any) -> None:
    rc, out, runs = run(tmp_path, "seqcrash", f"""topology: {TWO_SITES}
duration: 4s
drain: 0s
drain_max: 2s
protocol: {{name: sequencer, params: {{sequencer: h1}}}}
workload: {{rate: 20/s, size: 200B}}
faults:
  - {{kind: crash, host: h1, at: 2s}}
""")
    s = summary_of(runs)
    assert s["liveness"]["quiescent"] is False and s["liveness"]["in_flight"] > 0
    why = "sequencer h1 crashed at 2.0 s: `sequencer` claims no progress without its sequencer"
    assert s["verdict"] == {"ok": True, "safety": "held", "liveness": "stalled-as-claimed",
                            "reasons": [why, f"not judged: validity ({UNSETTLED})"],
                            "not_judged": {"validity": UNSETTLED}}
    assert s["ok"] is True and rc == 0, out
    assert out.rstrip().splitlines()[-1].startswith("verdict: ok (safety held, "
                                                    "stalled-as-claimed): sequencer h1")


@pytest.mark.spark
def test_a_stall_no_claim_excuses_fails_the_run(tmp_path: Path, spark: Any) -> None:
    """Two sites 200 ms apart and a drain cut at 0.1 s: the messages of the last 0.4 s are
    still in flight, with no fault at all. The claims promise progress: `stalled`, not ok,
    exit 1, and the reason counts what agreement and validity could not prove."""
    topo = tmp_path / "slow.yaml"
    topo.write_text("""name: slow
sites:
  a: {lan: {delay: 1ms}}
  b: {lan: {delay: 1ms}}
wan:
  - {between: [a, b], delay: 200ms}
hosts:
  - {name: h1, site: a}
  - {name: h2, site: a}
  - {name: h3, site: b}
  - {name: h4, site: b}
""")
    rc, out, runs = run(tmp_path, "cut", f"""topology: {topo}
duration: 2s
drain: 0s
drain_max: 100ms
protocol: {{name: sequencer, params: {{sequencer: h1}}}}
workload: {{rate: 40/s, size: 200B}}
expect:
  - checks.total_order.violations == 0
""")
    s = summary_of(runs)
    v = s["verdict"]
    assert v["ok"] is False and s["ok"] is False and v["safety"] == "held"
    assert v["liveness"] == "stalled" and s["liveness"]["promised"] is True
    unproven = s["liveness"]["unproven"]
    missing = s["liveness"]["in_flight"]
    assert missing > 0 and unproven["agreement"] + unproven["validity"] > 0
    assert v["reasons"][0] == (
        f"stalled: {missing} deliveries of correct hosts' messages missing at correct hosts "
        f"after a 0.1 s drain (unproven: agreement {unproven['agreement']}, validity "
        f"{unproven['validity']}); claimed: no faults")
    assert rc == 1, out
    assert out.rstrip().splitlines()[-1].startswith("verdict: NOT OK (safety held, stalled): "
                                                    f"stalled: {missing} deliveries")
    report = (run_dir_of(runs) / "report.html").read_text()
    assert "banner fail" in report and "messages missing at correct hosts" in report


LOSSY = """name: lossy
sites:
  a: {lan: {delay: 1ms, loss: 10%}}
hosts:
  - {name: h1, site: a}
  - {name: h2, site: a}
  - {name: h3, site: a}
"""


@pytest.mark.spark
def test_loss_stalls_fifo_as_claimed_and_reliable_nack_delivers_through_it(
        tmp_path: Path, spark: Any) -> None:
    topo = tmp_path / "lossy.yaml"
    topo.write_text(LOSSY)
    body = """topology: {topo}
duration: 2s
drain: 0s
drain_max: 2s
protocol: {{name: {proto}}}
workload: {{rate: 20/s, size: 200B}}
"""
    rc, out, runs = run(tmp_path, "fifo", body.format(topo=topo, proto="fifo"))
    s = summary_of(runs)
    assert s["liveness"]["quiescent"] is False
    assert s["verdict"]["liveness"] == "stalled-as-claimed" and s["ok"] and rc == 0, out
    assert s["verdict"]["reasons"][0].startswith("sites.a.lan: loss 0.1: `fifo` claims no "
                                                 "progress under datagram loss")
    rc, out, runs = run(tmp_path, "nack", body.format(topo=topo, proto="reliable-nack"))
    s = summary_of(runs)
    assert s["liveness"]["quiescent"] is True and s["liveness"]["promised"] is True
    assert s["verdict"] == {"ok": True, "safety": "held", "liveness": "quiescent",
                            "reasons": []} and rc == 0, out


REORDERING = """name: jittery
sites:
  a: {{lan: {{delay: 10ms, jitter: 8ms, jitter_dist: uniform{fifo}}}}}
hosts:
  - {{name: h1, site: a}}
  - {{name: h2, site: a}}
  - {{name: h3, site: a}}
"""
QOS = """topology: {topo}
duration: 3s
drain: 1s
protocol: {{name: qos-cbr, params: {{delta: 25ms, gamma: 1ms, rate: 100}}}}
workload: {{rate: 50/s, size: 100B}}
"""


def test_qos_cbr_on_reordering_links_is_refused_outside_its_model(tmp_path: Path) -> None:
    topo = tmp_path / "jittery.yaml"
    topo.write_text(REORDERING.format(fifo=""))
    rc, out, runs = run(tmp_path, "refused", QOS.format(topo=topo))
    lines = [x for x in out.splitlines() if x.strip()]
    assert rc == 2, out
    assert len(lines) == 1 and lines[0].startswith(f"{topo}:3: sites.a.lan.reorder: jitter "
                                                   "without `reorder: false` reorders"), out
    assert "qos-cbr assumes FIFO links" in lines[0] and "outside_model: true" in lines[0]
    assert not runs.exists()
    # the same jitter on FIFO links is inside the model
    topo.write_text(REORDERING.format(fifo=", reorder: false"))
    rc, out, _ = run(tmp_path, "fifo-ok", QOS.format(topo=topo), "--dry-run")
    assert rc == 0, out
    # a crash is a failure §4 does not allow: located at the fault
    topo.write_text(REORDERING.format(fifo=", reorder: false"))
    rc, out, runs = run(tmp_path, "crash", QOS.format(topo=topo)
                        + "faults:\n  - {kind: crash, host: h2, at: 1s}\n")
    assert rc == 2 and "faults.0.kind: crash: qos-cbr assumes no such failure" in out, out


@pytest.mark.spark
def test_qos_cbr_outside_its_model_measures_the_assumptions_and_judges_no_bound(
        tmp_path: Path, spark: Any) -> None:
    topo = tmp_path / "jittery.yaml"
    topo.write_text(REORDERING.format(fifo=""))
    rc, out, runs = run(tmp_path, "outside", "outside_model: true\n" + QOS.format(topo=topo))
    s = summary_of(runs)
    q = s["qos"]
    by_name = {a["name"]: a for a in q["assumptions"]}
    assert set(by_name) == {"reorder", "loss", "failures", "clocks", "delays", "reservations"}
    fifo = by_name["reorder"]
    assert fifo["held"] is False and fifo["measured"]["reordered"] > 0
    assert sum(fifo["measured"]["per_path"].values()) == fifo["measured"]["reordered"]
    assert by_name["delays"]["held"] and by_name["failures"]["held"]
    assert q["assumptions_hold"] is False
    assert any("reordered" in w for w in q["assumptions_violated"])
    bound = s["checks"]["latency_bound"]
    assert bound["judged"] is False and bound["violations"] == 0
    assert "reordered" in bound["note"]


def test_a_link_delay_change_reorders_so_fifo_stalls_as_claimed(tmp_path: Path) -> None:
    """Found by `testbed explore` (fifo, seed 2070): a `link` fault raising a path's delay to
    170 ms for 106 ms. When it ends, datagrams sent after it overtake those still in flight,
    which FIFO without reliability drops (002 "FIFO Ordering: Implementation"): the run stalls,
    and the verdict must say the claim does not cover it instead of failing the run."""
    from analysis.judge import judge_run

    body = f"""topology: {ROOT / 'topologies/two-sites.yaml'}
duration: 3s
drain: 1s
drain_max: 5s
protocol: {{name: fifo}}
workload: {{rate: 20/s, size: 512B}}
faults:
  - {{kind: link, between: [h3, h2], at: 999ms, for: 106ms, delay: 170ms}}
"""
    rc, out, runs = run(tmp_path, "fifo-delay", body, "--no-analyze")
    assert rc == 0, out
    s = judge_run(read_record(run_dir_of(runs)))
    assert s["liveness"]["quiescent"] is False
    assert s["verdict"]["liveness"] == "stalled-as-claimed" and s["ok"], s["verdict"]
    assert "link h3-h2 delay change" in s["verdict"]["reasons"][0]
