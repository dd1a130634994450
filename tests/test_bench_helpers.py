"""The decisions the issue-18 benches make: the sweep's knee and stop rule, and the 30-host
five-region topology the simulator bench runs on."""

from __future__ import annotations

from pathlib import Path

from bench.local_throughput import knee, passed_peak
from bench.sim_speed import sim_spec, topology


def test_knee_is_the_highest_load_delivered_at_nine_tenths() -> None:
    series = {1000: 990.0, 2000: 1850.0, 4000: 3500.0, 8000: 7300.0}
    assert knee(series) == 8000
    assert knee({1000: 950.0, 2000: 1700.0, 4000: 3700.0}) == 4000  # a dip below 0.9 first
    assert knee({1000: 500.0}) is None


def test_a_side_has_passed_its_peak_once_delivered_stops_growing_beyond_the_knee() -> None:
    assert not passed_peak({1000: 1000.0})
    assert not passed_peak({1000: 1000.0, 2000: 1990.0})  # still at its offered load
    assert not passed_peak({1000: 1000.0, 2000: 1500.0})  # beyond the knee, still growing
    assert passed_peak({1000: 1000.0, 2000: 1500.0, 4000: 1400.0})
    assert passed_peak({1000: 1000.0, 2000: 20.0})


def test_thirty_hosts_spread_six_per_region_with_the_wan_between_sites(
        tmp_path: Path) -> None:
    topo = topology(30)
    sites = [h.site for h in topo.hosts]
    assert len(topo.hosts) == 30 and all(sites.count(s) == 6 for s in set(sites))
    spec = sim_spec(30, 100.0, 1, tmp_path)
    nodes = {n["name"]: n for n in spec["nodes"]}
    virginia1 = nodes["virginia1"]
    by_name = {m["name"]: m["id"] for m in virginia1["members"]}
    assert virginia1["paths"][str(by_name["tokyo1"])]["delay_ns"] == 74_000_000
    assert virginia1["paths"][str(by_name["virginia2"])]["delay_ns"] == 0
    assert all(n["params"] == {"sequencer": "virginia1"} for n in spec["nodes"])
    assert topology(5).hosts[3].name == "tokyo"  # the file as it is


def test_qos_theta_sweep_point_and_plot() -> None:
    """bench/qos_theta_sweep.py: one Θ on the Thm 2 tight set-up stays under Δ+Γ+Θ with an
    overhead of 1/Θ per process (Thm 3), and the plot is one well-formed SVG with both
    charts."""
    import xml.dom.minidom

    from bench import qos_theta_sweep as sweep

    rows = {t: sweep.one(t, app_rate=10, seconds=2) for t in (10, 40)}
    for t, r in rows.items():
        assert r["bound_ms"] == 50 + t and r["assumptions"]
        assert r["bound_ms"] - 1.5 <= r["max_ms"] <= r["bound_ms"]
        assert abs(r["overhead"] - 1000 / t) < 0.02 * 1000 / t
    assert rows[10]["dummy_share"] > rows[40]["dummy_share"]
    svg = sweep.chart(rows)
    doc = xml.dom.minidom.parseString(svg.encode())
    plots = [e.getAttribute("data-plot") for e in doc.getElementsByTagName("svg")]
    assert plots[1:] == ["qos-theta-latency", "qos-theta-pareto"]
