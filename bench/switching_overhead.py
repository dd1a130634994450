"""The cost of the `switching` layer (001 ch. 2), two figures:

1. Throughput of `switching` (mode live, two sequencer instances, no switch happening)
   against plain `sequencer`, same hosts, same offered load, in the same invocation on the
   local backend (target >= 0.9). The figure is the minimum over nodes
   of final deliveries/s in the steady window (first second skipped), as in
   bench/local_throughput.py; offer more than the machine can order to measure capacity.
   On a loaded 2-core machine the local figure scatters widely (the five node processes
   compete with everything else), so the bench also reports a load-independent one:
1b. CPU per message, in process: the same five node cores (nodes/core.py, the code the
   local runtime drives) exchange real encoded datagrams through an event queue, each
   decoded at its receiver as on UDP; the CPU time (process_time) per broadcast message,
   best of `--cpu-rounds`, for sequencer and for switching; the ratio sequencer/switching
   is the throughput ratio a CPU-bound run would reach.
2. Switch duration per mode (live, rabp, stop): the first delivery of the new instance at
   the last node minus the switch request, on the five-region WAN on the simulator, one
   switch every 2 s between sequencers on virginia and frankfurt.

    python -m bench.switching_overhead [--hosts 5] [--rate 300] [--seconds 6] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from analysis.record import read_record
from bench.local_throughput import machine

ROOT = Path(__file__).resolve().parents[1]
SIZE = 1024
MBEAN = "testbed:type=TotalOrder,protocol=switching"


def run(exp: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "exp.yaml"
    spec.write_text(json.dumps(exp))
    subprocess.run([sys.executable, "-m", "testbed", "run", str(spec), "--out",
                    str(out / "runs"), "--no-analyze"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return next((out / "runs").iterdir())


def events_of(run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    return read_record(run_dir).events()


def throughput(protocol: dict[str, Any], hosts: int, rate: int, seconds: int,
               out: Path) -> float:
    names = [f"h{i + 1}" for i in range(hosts)]
    topo = {"name": "flat", "hosts": [{"name": n} for n in names],
            "matrix": {a: {b: "0ms" for b in names if b != a} for a in names}}
    exp = {"name": "sw-overhead", "topology": topo, "backend": "local",
           "duration": f"{seconds}s", "drain": "2s", "drain_max": "5s", "seed": 1,
           "protocol": protocol,
           "workload": {"rate": f"{rate}/s", "size": f"{SIZE}B", "arrival": "constant"}}
    rates = []
    for events in events_of(run(exp, out)).values():
        sends = [e["t"] for e in events if e["ev"] == "send"]
        if not sends:
            raise RuntimeError(f"a node of {protocol['name']} sent nothing: machine overloaded?")
        start = min(sends) + 1_000_000_000
        end = start + (seconds - 1) * 1_000_000_000
        rates.append(sum(1 for e in events if e["ev"] == "fnl" and start <= e["t"] < end)
                     / (seconds - 1))
    return min(rates)


def cpu_per_message(protocol: dict[str, Any], hosts: int, msgs: int, size: int) -> float:
    """Microseconds of CPU per broadcast message (all hosts' work for it), in process."""
    import heapq
    import itertools
    import time

    from nodes.config import SIM_EPOCH_NS, Member, NodeConfig, WorkloadConfig
    from nodes.core import NodeCore

    names = [f"h{i + 1}" for i in range(hosts)]
    members = [Member(i, n, f"198.18.0.{i + 1}", 7000) for i, n in enumerate(names)]
    cores = [NodeCore(NodeConfig(i, n, members, protocol["name"], dict(protocol["params"]),
                                 "", 1, SIM_EPOCH_NS, 0, 0,
                                 workload=WorkloadConfig(True, 0.0, size)), 0)
             for i, n in enumerate(names)]
    heap: list[tuple[int, int, str, int, Any]] = []
    seq = itertools.count()
    armed: list[dict[str, int]] = [{} for _ in cores]

    def push(i: int, out: Any, t: int) -> None:
        for dst, data, _ in out.sends:
            for j in range(hosts) if dst is None else (dst,):
                if j != i:
                    heapq.heappush(heap, (t + 100_000, next(seq), "rx", j, data))
        for key, delay in out.timers:
            token = armed[i][key] = next(seq)
            heapq.heappush(heap, (t + delay, token, "tm", i, key))

    for i, core in enumerate(cores):
        core.durable_sends = False
        push(i, core.start(0), 0)
    gap = 1_000_000_000 // (200 * hosts)  # 200 msgs/s per host, round robin
    for k in range(msgs):
        heapq.heappush(heap, (1_000_000_000 + k * gap, next(seq), "tx", k % hosts, None))
    end = 1_000_000_000 + msgs * gap + 2_000_000_000
    started = None
    while heap:
        t, token, kind, i, data = heapq.heappop(heap)
        if t > end:
            break
        if started is None and t >= 1_000_000_000:
            started = time.process_time()
        if kind == "rx":
            push(i, cores[i].receive(data, t), t)
        elif kind == "tx":
            push(i, cores[i].broadcast(t), t)
        elif armed[i].get(data) == token:
            push(i, cores[i].timer(data, t), t)
    assert started is not None
    spent = time.process_time() - started
    if any(c.counters.fnl != msgs for c in cores):
        raise RuntimeError(f"{protocol['name']}: not every message delivered everywhere")
    return spent / msgs * 1e6


def switch_durations(mode: str, out: Path) -> list[float]:
    """Per switch: first new-instance delivery at the last node minus the request, ms."""
    faults = [{"kind": "mgmt", "at": f"{at}s", "every": "4s", "host": host, "mbean": MBEAN,
               "exec": ["switchTo", to]}
              for at, host, to in ((2, "oregon", "b"), (4, "tokyo", "a"))]
    exp = {"name": f"sw-{mode}", "topology": str(ROOT / "topologies/five-regions.yaml"),
           "backend": "sim", "duration": "21s", "drain": "2s", "seed": 1,
           "protocol": {"name": "switching", "params": {"mode": mode, "instances": [
               {"name": "a", "protocol": "sequencer", "params": {"sequencer": "virginia"}},
               {"name": "b", "protocol": "sequencer", "params": {"sequencer": "frankfurt"}}]}},
           "workload": {"rate": "20/s", "size": "1KiB", "arrival": "poisson"},
           "faults": faults}
    events = events_of(run(exp, out))
    requests = {e["epoch"]: (e["t"], e["to"]) for evs in events.values() for e in evs
                if e["ev"] == "switch" and e.get("phase") == "request"}
    durations = []
    for epoch, (asked, to) in sorted(requests.items()):
        firsts = []
        for evs in events.values():
            start = next(e["t"] for e in evs if e["ev"] == "switch"
                         and e.get("phase") == "start" and e["epoch"] == epoch)
            firsts.append(next(e["t"] for e in evs if e["ev"] == "fnl" and e["t"] >= start
                               and e.get("proto") == f"switching#{to}"))
        durations.append((max(firsts) - asked) / 1e6)
    return durations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.switching_overhead",
                                     description=__doc__)
    parser.add_argument("--hosts", type=int, default=5)
    parser.add_argument("--rate", type=int, default=300, help="per host, messages/s")
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2, help="alternating pairs of runs")
    parser.add_argument("--skip-durations", action="store_true")
    parser.add_argument("--cpu-msgs", type=int, default=4000)
    parser.add_argument("--cpu-rounds", type=int, default=5)
    parser.add_argument("--skip-local", action="store_true")
    args = parser.parse_args(argv)
    print(f"machine: {machine()}")
    plain = {"name": "sequencer", "params": {"sequencer": "h1"}}
    layered = {"name": "switching", "params": {"mode": "live", "instances": [
        {"name": "a", "protocol": "sequencer", "params": {"sequencer": "h1"}},
        {"name": "b", "protocol": "sequencer", "params": {"sequencer": "h2"}}]}}
    spent: dict[str, list[float]] = {"sequencer": [], "switching": []}
    for _ in range(args.cpu_rounds):  # interleaved: a load burst hits both alike
        for name, proto in (("sequencer", plain), ("switching", layered)):
            spent[name].append(cpu_per_message(proto, args.hosts, args.cpu_msgs, SIZE))
    cpu = {name: min(v) for name, v in spent.items()}
    print(f"in process, {args.hosts} hosts, {SIZE} B, no switch: CPU per message sequencer "
          f"{cpu['sequencer']:.0f} us, switching (live) {cpu['switching']:.0f} us, ratio "
          f"{cpu['sequencer'] / cpu['switching']:.2f} (goal >= 0.9)")
    got: dict[str, list[float]] = {"sequencer": [], "switching": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(0 if args.skip_local else args.rounds):
            order = [("sequencer", plain), ("switching", layered)]
            for name, proto in order if r % 2 == 0 else order[::-1]:
                try:
                    got[name].append(throughput(proto, args.hosts, args.rate, args.seconds,
                                                Path(tmp) / f"{name}-{r}"))
                except RuntimeError as exc:  # an overloaded machine; say so and go on
                    print(f"round {r}, {name}: {exc}")
        if got["sequencer"] and got["switching"]:
            seq, sw = statistics.median(got["sequencer"]), statistics.median(got["switching"])
            print(f"local, {args.hosts} hosts x {args.rate}/s offered, {SIZE} B, no switch: "
                  f"sequencer {seq:,.0f} msgs/s, switching (live) {sw:,.0f} msgs/s, "
                  f"ratio {sw / seq:.2f} (goal >= 0.9; runs {got})")
        if not args.skip_durations:
            for mode in ("live", "rabp", "stop"):
                d = switch_durations(mode, Path(tmp) / f"dur-{mode}")
                print(f"five-region WAN (sim), mode {mode}: switch duration (request -> first "
                      f"new-instance delivery at the last node) median "
                      f"{statistics.median(d):.0f} ms, max {max(d):.0f} ms over {len(d)} "
                      "switches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
