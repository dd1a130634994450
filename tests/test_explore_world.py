"""`testbed explore` in world mode (docs/explore.md "Worlds"): a seed draws its topology,
links, workload and parameters as well as its faults; the world is in seeds.parquet and the
reproducer, shrinks with the schedule, and coverage.json lists what was drawn and reached."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

from testbed.explore.case import Base, draw_case, raw_data, spec_data
from testbed.explore.coverage import bucket
from testbed.explore.generators import Model
from testbed.explore.world import FEATURES, MESSAGE_BUDGET, draw_world
from testbed.spec.units import parse_duration
from tests.inproc import ROOT, run_cli

QUICKSTART = ROOT / "experiments" / "quickstart.yaml"


def _spec(tmp: Path, protocol: str, **explore: object) -> Path:
    data = yaml.safe_load(QUICKSTART.read_text())
    data["topology"] = str(ROOT / "topologies" / "two-sites.yaml")
    data["protocol"] = {"name": protocol}
    data["explore"] = {"world": True, "max_faults": 3, **explore}
    path = tmp / f"{protocol}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _base(tmp: Path, protocol: str) -> Base:
    return Base.from_data(raw_data(_spec(tmp, protocol)))


def test_a_seed_names_its_world_within_the_ranges(tmp_path: Path) -> None:
    base = _base(tmp_path, "sequencer")
    hosts, features, arrivals = set(), set(), set()
    for seed in range(120):
        case = draw_case(base, seed)
        assert case == draw_case(base, seed)  # deterministic from the seed
        drawn = dict(case.params)
        topo = drawn["topology"]
        names = [h["name"] for h in topo["hosts"]]
        hosts.add(len(names))
        assert 2 <= len(names) <= 9
        for src, row in topo["matrix"].items():
            assert set(row) == set(names) - {src}
            for entry in row.values():
                assert 0.1 <= float(entry["delay"].removesuffix("ms")) <= 300
        senders = drawn["workload.senders"]
        n_send = len(names) if senders == "all" else len(senders)
        rate = float(drawn["workload.rate"].removesuffix("/s"))
        assert 1 <= rate <= 2000
        size = int(drawn["workload.size"].removesuffix("B"))
        assert 16 <= size <= 65536
        for row in topo["matrix"].values():  # a limited path carries the offered load
            for entry in row.values():
                if "bandwidth" in entry:
                    assert int(entry["bandwidth"].removesuffix("mbit")) * 1e6 >= (
                        rate * size * 8 * n_send)
        assert case.duration_ns is not None and 1e9 <= case.duration_ns <= 30e9
        # The work is bounded (rounding of rate and duration aside).
        assert rate * case.duration_ns / 1e9 * n_send * len(names) <= MESSAGE_BUDGET * 1.1
        for item in case.items:
            if "at" in item:
                assert parse_duration(item["at"]) < case.duration_ns
        timeout = drawn.get("protocol.params.fd_timeout_ms")
        assert timeout is None or 100 <= timeout <= 1000
        features |= set(case.features)
        arrivals.add(drawn["workload.arrival"])
        assert not case.refused
    assert draw_case(base, 1) != draw_case(base, 2)
    assert features == set(FEATURES)  # swarm: every feature on in some seed...
    assert len(hosts) >= 6 and arrivals == {"constant", "poisson", "vbr"}
    # ... and off in others: no seed has them all.
    assert all(len(draw_case(base, s).features) < len(FEATURES) for s in range(40))


def test_the_model_decides_what_a_world_may_hold() -> None:
    """A model of FIFO links without loss or duplication and delays within Δ (004 §2.1)
    gets no loss, duplication, reordering or bandwidth limit in any drawn path."""
    strict = Model(frozenset(), loss=False, reorder=False, duplicate=False, clock=False,
                   clock_beyond=False, delays=False)
    loose = {k for s in range(200) for row in draw_world(s, Model(), None).overrides[0][1][
        "matrix"].values() for e in row.values() for k in e}
    assert {"loss", "duplicate", "bandwidth", "reorder", "jitter"} <= loose
    for seed in range(200):
        topo = dict(draw_world(seed, strict, None).overrides)["topology"]
        for row in topo["matrix"].values():
            for entry in row.values():
                assert not {"loss", "duplicate", "bandwidth"} & set(entry)
                assert entry.get("reorder", False) is False


def test_world_exploration_shrinks_replays_and_covers(tmp_path: Path) -> None:
    """reliable-ack does not claim total order: `--check total_order` in drawn worlds finds
    violations (a real failing condition, not a mock); the drawn world is in the seed's row
    and its reproducer, the shrunk world is smaller than the drawn one, the reproducer
    replays byte-identically, and coverage.json lists what was drawn and reached."""
    spec = _spec(tmp_path, "reliable-ack", features=["hosts", "senders", "rate", "size",
                                                      "delays", "params", "fd_timeout"])
    out = tmp_path / "out"
    r = run_cli("explore", str(spec), "--seeds", "8", "--check", "total_order",
                "--workers", "1", "--shrink", "1", "--out", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    rows = pq.read_table(out / "seeds.parquet").to_pylist()
    assert [row["seed"] for row in rows] == list(range(8))
    for row in rows:
        drawn = json.loads(row["params"])
        assert "topology" in drawn and "workload.rate" in drawn
        assert row["shape"].startswith(f"{len(drawn['topology']['hosts'])}h")
        assert row["duration_s"] >= 1
        assert set(row["features"]) <= set(FEATURES)
    shrunk = next(row for row in rows if row["reproducer"] and row["shrunk_faults"] != "")
    repro = out / shrunk["reproducer"]
    text = repro.read_text()
    data = yaml.safe_load(text)
    drawn = json.loads(shrunk["params"])
    small = data["topology"]
    # Smaller: fewer hosts, a lower rate, smaller messages, a shorter run or fewer
    # parameters than drawn.
    drawn_params = {k for k in drawn if k.startswith("protocol.params.")}
    kept_params = set(data["protocol"].get("params") or {})
    assert (len(small["hosts"]) < len(drawn["topology"]["hosts"])
            or float(data["workload"]["rate"].removesuffix("/s"))
            < float(drawn["workload.rate"].removesuffix("/s"))
            or int(str(data["workload"]["size"]).removesuffix("B"))
            < int(drawn["workload.size"].removesuffix("B"))
            or parse_duration(data["duration"]) < shrunk["duration_s"] * 1e9
            or len(kept_params) < len(drawn_params)), text
    assert "matrix" in small and all(h["name"] in small["matrix"] for h in small["hosts"])
    replay = run_cli("explore", "--replay", str(repro))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "byte-identical" in replay.stdout and "total_order" in replay.stdout
    cov = json.loads((out / "coverage.json").read_text())["reliable-ack"]
    assert cov["seeds"] == 8
    assert set(cov["features"]) == {f for row in rows for f in row["features"]}
    assert cov["fault_kinds"] and cov["topology_shapes"]
    assert "workload.rate" in cov["param_buckets"]
    assert any(k.startswith("TotalOrder.") for k in cov["events"])
    assert "<h2>Coverage</h2>" in (out / "index.html").read_text()


def test_decade_buckets() -> None:
    assert bucket(137) == "100-1000" and bucket("20/s") == "10-100/s"
    assert bucket("0.5ms") == "0.1-1ms" and bucket(["h1"]) is None and bucket("poisson") is None


def test_a_world_drains_the_backlog_of_a_throughput_ceiling(tmp_path: Path) -> None:
    """token-ring orders at most max_per_visit messages per sender and rotation (K3b; a lost
    token copy costs token_retransmit_ms, K4): a world offering more gets a drain that covers
    the backlog at that ceiling beyond 15 s; a protocol without a ceiling keeps 15 s. World
    seed 1045 of token-ring (five hosts, 168.6 msgs/s each, 2.4 s; shrunk: two hosts 300 ms
    and 100 ms apart, 50 msgs/s at most) needed 15.25 s after its run and was called stalled
    at 15 s; with its drain it is quiescent. World seed 2008: one sender of six at 822
    msgs/s, 29.5 % loss, about 70 ordered a second."""
    ring, seq = _base(tmp_path, "token-ring"), _base(tmp_path, "sequencer")
    longer = 0
    for seed in [*range(40), 1045, 2008]:
        drawn = dict(draw_case(ring, seed).params)
        names = [h["name"] for h in drawn["topology"]["hosts"]]
        matrix = drawn["topology"]["matrix"]
        resend = drawn.get("protocol.params.token_retransmit_ms", 50) / 1e3
        rotation = 0.0
        for a, b in zip(names, names[1:] + names[:1], strict=True):
            loss = float(matrix[a][b].get("loss", "0%").removesuffix("%")) / 100
            rotation += (float(matrix[a][b]["delay"].removesuffix("ms")) / 1e3
                         + loss / (1 - loss) * resend)
        per_visit = drawn.get("protocol.params.max_per_visit", 10)
        senders = drawn["workload.senders"]
        n_send = len(names) if senders == "all" else len(senders)
        duration = draw_case(ring, seed).duration_ns / 1e9
        offered = float(drawn["workload.rate"].removesuffix("/s")) * duration * n_send
        backlog_s = offered * rotation / (n_send * per_visit) - duration
        drain = parse_duration(spec_data(ring, draw_case(ring, seed))["drain_max"]) / 1e9
        assert drain >= 15 + backlog_s and drain < 16 + max(0.0, backlog_s), (seed, drain)
        longer += drain > 15
        assert spec_data(seq, draw_case(seq, seed))["drain_max"] == "15s"
    assert longer >= 2
    out = tmp_path / "out"
    r = run_cli("explore", str(_spec(tmp_path, "token-ring")), "--first-seed", "1045",
                "--seeds", "1", "--workers", "1", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no failure" in r.stdout


def drawn_worlds(protocol: str, params: dict[str, object], seeds: int
                 ) -> list[dict[str, Any]]:
    """The overrides of `seeds` drawn worlds of `protocol` with the spec's `params`."""
    from nodes.protocols.catalogue import find
    from testbed.explore.case import model_of
    from testbed.spec.experiment import ExperimentSpec

    entry = find(protocol)
    assert entry is not None
    exp = ExperimentSpec.model_validate({
        "name": "x", "topology": "t.yaml", "duration": "1s",
        "protocol": {"name": protocol, "params": params},
        "workload": {"senders": "all", "rate": "20/s"}})
    return [dict(draw_world(s, model_of(exp), entry.params, FEATURES, params).overrides)
            for s in range(seeds)]


def test_a_reserved_sender_offers_at_most_half_its_reservation() -> None:
    """`leader` and `qos-cbr` reserve `rate` (50/s by default) for each sender, and
    `timestamp-leader` and `qos-vbr` `avg` (50/s) and k = 3 messages per Θ = 20 ms: drawn
    worlds offer at most half of that (of the drawn or the spec's values when they move it),
    at constant intervals, so no datagram is policed away and no sender queues for ever (004 §2.1).
    Without a reservation the same seeds draw rates far above it."""
    from nodes.protocols.qos_common import duration_ns

    def worlds(protocol: str, params: dict[str, object]) -> list[dict[str, object]]:
        return [{**params, **{k.removeprefix("protocol.params."): v for k, v in w.items()}}
                for w in drawn_worlds(protocol, params, 300)]

    def rate(w: dict[str, object]) -> float:
        return float(str(w["workload.rate"]).removesuffix("/s"))

    free = worlds("sequencer", {})
    assert max(map(rate, free)) > 500 and any(w["workload.arrival"] == "vbr" for w in free)
    for protocol in ("leader", "qos-cbr"):
        for w in worlds(protocol, {}):
            assert rate(w) <= max(1, int(float(w.get("rate", 50)) / 2)), w  # type: ignore[arg-type]
            assert w["workload.arrival"] == "constant"
    for protocol in ("timestamp-leader", "qos-vbr"):
        for w in worlds(protocol, {}):
            slot = float(w.get("max_burst", 3)) * 1e9 / duration_ns(w.get("theta", 20))  # type: ignore[arg-type]
            assert rate(w) <= max(1, int(min(float(w.get("avg", 50)), slot) / 2)), w  # type: ignore[arg-type]
    assert max(map(rate, worlds("leader", {"rate": 400}))) > 100


def test_a_bounded_delay_world_keeps_every_path_within_delta() -> None:
    """`qos-vbr`, `qos-cbr`, `leader` and `timestamp-leader` assume every path's delay plus
    jitter within Δ (004 §2.1): their drawn worlds scale the paths into the drawn, the spec's
    or the default Δ. Without that bound the same seeds draw paths far beyond 50 ms."""
    from nodes.protocols.qos_common import duration_ns

    def paths(protocol: str, params: dict[str, object]) -> list[tuple[float, float]]:
        out = []
        for drawn in drawn_worlds(protocol, params, 200):
            delta = duration_ns(drawn.get("protocol.params.delta", params.get("delta", 50)))
            worst = max(duration_ns(e["delay"]) + duration_ns(e.get("jitter", 0))
                        for row in drawn["topology"]["matrix"].values() for e in row.values())
            out.append((worst / 1e6, delta / 1e6))
        return out

    assert max(w for w, _ in paths("sequencer", {})) > 100
    for protocol in ("qos-vbr", "qos-cbr", "leader", "timestamp-leader"):
        drawn = paths(protocol, {})
        assert all(w <= d for w, d in drawn), protocol
        assert any(d != 50 for _, d in drawn), protocol  # Δ itself drawn too
    spec_delta = paths("qos-vbr", {"delta": "20ms"})
    assert all(w <= d for w, d in spec_delta) and any(d == 20 for _, d in spec_delta)
