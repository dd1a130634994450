"""Local backend throughput: sustained final-delivered messages/s at every node, side by side
with a raw asyncio UDP fan-out baseline (same hosts, same sizes, no protocol).

    python -m bench.local_throughput [--protocol NAME] [--hosts 5] [--rate 1000] [--seconds 12]
    python -m bench.local_throughput --sweep [--first-load 1000] [--max-load 128000] [--window K]
                                     [--repeat N]

Every host offers `rate` 1 KiB messages/s (so hosts x rate in total). The figure is the minimum
over nodes of final deliveries per second in the steady window: the protocol run begins with
a 4 s warm-up at 10 msgs/s per host (a loaded machine starts the node processes a second or
more apart, and a late node would spend seconds repairing what it missed), and the window
runs from one second after the warm-up to the workload's end. The baseline is the minimum
over nodes of datagrams received per second from the same fan-out (first second skipped), on
the nodes' event loop (uvloop where importable) with the same bursts as the nodes' workload.
`--window` sets the workload's send window (docs/architecture.md "Flow control and
overload"; default: the spec's).
Prints one comparable line: protocol, baseline, ratio. With `--protocol` other than the
sequencer (any name of the catalogue, nodes/protocols/catalogue.py), the sequencer runs too in
the same invocation, and the protocol's figure is also given as a ratio of the sequencer's.

`--sweep` doubles the total offered load (hosts x rate) from `--first-load` until both the
sequencer and the raw fan-out have passed their peaks, and prints for each side the
peak (highest delivered msgs/s at every node), the knee (highest offered load delivered at
>= 0.9) and, for the sequencer, what it delivers at 2x and 4x its knee (without a knee: the
load of its peak) against its peak, plus the highest peak RSS of any node process (VmHWM,
sampled from /proc while the run lasts), and the same figures as a markdown table, with the
goals' verdicts and the load average. `--repeat N` runs every point N times (protocol and
baseline interleaved) and takes the median: on a shared machine one point moves by 20 % or
more. Each point also gives final deliveries per CPU second of the node processes, the
nodes' efficiency whatever share of the machine they got.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from analysis.record import read_record
from nodes.loop import loop_factory

ROOT = Path(__file__).resolve().parents[1]
SIZE = 1024
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
WARMUP_S = 4  # the protocol runs start at 10 msgs/s per host for this long (see protocol_run)


def protocol_run(hosts: int, rate: int, seconds: int, out: Path,
                 protocol: str = "sequencer", rss: dict[int, int] | None = None,
                 window: int | None = None, stats: dict[str, float] | None = None
                 ) -> dict[str, float]:
    """Final deliveries/s per node; with `rss`, fills it with each node process's peak RSS,
    with `stats` adds "fnl_per_cpu_s": final deliveries per CPU second of the node processes
    over the whole run (what the nodes' work costs, whatever else the machine runs).
    `window`: the workload's send window (None: the spec's default)."""
    cpu: dict[int, float] = {}
    out.mkdir(parents=True, exist_ok=True)
    names = [f"h{i + 1}" for i in range(hosts)]
    topo = {"name": "flat", "hosts": [{"name": n} for n in names],
            "matrix": {a: {b: "0ms" for b in names if b != a} for a in names}}
    # A warm-up at a trickle first: the local backend starts node processes one after the
    # other, a second or more apart on a loaded machine, and a node that starts after the
    # others sent thousands of messages spends seconds repairing them (NACKs) -- start-up,
    # not throughput. The full rate starts once every node is up.
    exp = {"name": "throughput", "topology": topo, "backend": "local",
           "duration": f"{seconds + WARMUP_S}s", "drain": "2s", "drain_max": "5s", "seed": 1,
           "protocol": {"name": protocol,
                        "params": {"sequencer": "h1"} if protocol == "sequencer" else {}},
           "workload": {"rate": "10/s", "size": f"{SIZE}B", "arrival": "constant",
                        "schedule": [{"at": f"{WARMUP_S}s", "rate": f"{rate}/s"}],
                        **({} if window is None else {"window": window})}}
    spec = out / "exp.yaml"
    spec.write_text(json.dumps(exp))
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "run", str(spec), "--out",
                             str(out / "runs"), "--no-analyze"], cwd=ROOT,
                            stdout=subprocess.DEVNULL)
    while proc.poll() is None:
        if rss is not None or stats is not None:
            sample_rss(proc.pid, rss if rss is not None else {}, cpu)
        time.sleep(0.25)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, proc.args)
    run = next((out / "runs").iterdir())
    if stats is not None:
        fnl = sum(len(evs) for evs in read_record(run).events(("fnl",)).values())
        stats["fnl_per_cpu_s"] = fnl / max(sum(cpu.values()), 1e-9)
    return steady_rates(run)


def steady_rates(run: Path) -> dict[str, float]:
    """Final deliveries/s per node at the full rate, while every node's workload runs: from
    one second after the warm-up (or after the last node's first send, if later) to the
    workload's configured end."""
    logs = read_record(run).events(("send", "fnl"))
    cfg = json.loads(next((run / "nodes").glob("*/node.json")).read_text())
    end = cfg["start_at_ns"] + cfg["duration_ns"]
    firsts = [min((e["t"] for e in evs if e["ev"] == "send"), default=end)
              for evs in logs.values()]
    warm = cfg["start_at_ns"] + WARMUP_S * 1_000_000_000
    start = min(max(max(firsts), warm) + 1_000_000_000, end - 1_000_000_000)
    span = (end - start) / 1e9
    return {name: sum(1 for e in evs if e["ev"] == "fnl" and start <= e["t"] < end) / span
            for name, evs in logs.items()}


def sample_rss(root: int, peak: dict[int, int], cpu: dict[int, float] | None = None) -> None:
    """Record VmHWM (kB) of every `python -m nodes` process descending from `root`, and with
    `cpu` its CPU time so far (user + system, s)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
            if b"nodes" not in argv or b"-m" not in argv:
                continue
            for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak[pid] = max(peak.get(pid, 0), int(line.split()[1]))
            if cpu is not None:
                fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
                cpu[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        except OSError:
            continue


async def _baseline_node(me: int, hosts: int, rate: int, seconds: int, start: float) -> int:
    loop = asyncio.get_running_loop()
    received = 0
    window = (start + 1.0, start + seconds)

    class P(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: object) -> None:
            nonlocal received
            if window[0] <= time.time() < window[1]:
                received += 1

    addr = (f"127.88.0.{me + 1}", 7100)
    transport, _ = await loop.create_datagram_endpoint(P, local_addr=addr)
    peers = [(f"127.88.0.{i + 1}", 7100) for i in range(hosts) if i != me]
    payload = b"\x00" * (SIZE + 44)
    await asyncio.sleep(max(0.0, start - time.time()))
    planned = start
    # Like the nodes' workload (nodes/runtime.py `_broadcast`): every fan-out due by now, at
    # most 64 per wake-up, then sleep until the next one is due.
    while (now := time.time()) < start + seconds:
        burst = 0
        while planned <= now and burst < 64:
            for p in peers:
                transport.sendto(payload, p)
            planned += 1.0 / rate
            burst += 1
        await asyncio.sleep(max(0.0, planned - time.time()))
    await asyncio.sleep(0.5)
    transport.close()
    return received


def baseline_run(hosts: int, rate: int, seconds: int) -> dict[str, float]:
    start = time.time() + 3.0  # time for five processes to start on a loaded machine
    procs = [subprocess.Popen([sys.executable, "-m", "bench.local_throughput", "--baseline-node",
                               str(i), "--hosts", str(hosts), "--rate", str(rate),
                               "--seconds", str(seconds), "--start", repr(start)],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
             for i in range(hosts)]
    out = {}
    for i, p in enumerate(procs):
        stdout, _ = p.communicate(timeout=seconds + 30)
        # Fan-out delivers (hosts - 1) x rate datagrams/s to each node; the protocol delivers
        # hosts x rate messages/s (its own included), so scale to the same unit.
        out[f"h{i + 1}"] = int(stdout.strip()) / (seconds - 1) * hosts / (hosts - 1)
    return out


def machine() -> str:
    cpu = platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"load average {os.getloadavg()[0]:.2f}")


def knee(series: dict[int, float]) -> int | None:
    """The highest offered load delivered at >= 0.9 of itself."""
    ok = [load for load, got in series.items() if got >= 0.9 * load]
    return max(ok) if ok else None


def reference(series: dict[int, float]) -> int:
    """The load overload is measured against: the knee, or without one the peak's load."""
    k = knee(series)
    return k if k is not None else _peak_load(series)


def passed_peak(series: dict[int, float]) -> bool:
    """The latest load is beyond the knee and delivered no more than an earlier one."""
    last = max(series)
    return (len(series) > 1 and series[last] < 0.9 * last
            and series[last] <= max(v for k, v in series.items() if k < last))


def sweep(hosts: int, start: int, max_load: int, seconds: int,
          window: int | None = None, repeat: int = 1) -> None:
    """The sweep (module docstring). With `repeat` > 1 every point runs that many times,
    protocol and baseline interleaved, and the median counts (the range is printed too): on
    a shared machine one 12 s point moves by 20 % or more with the other jobs' load."""
    load0 = os.getloadavg()[0]
    print(f"machine: {machine()}")
    print(f"{hosts} hosts, {SIZE} B messages, zero-delay paths, {seconds} s per point, "
          f"median of {repeat}; delivered = minimum over nodes, msgs/s; fnl/CPU-s = final "
          "deliveries per CPU second of the node processes")
    print(f"{'offered':>9} {'sequencer':>20} {'raw':>20} {'ratio':>6} {'fnl/CPU-s':>10} "
          f"{'node RSS max':>13} {'load':>5}")
    proto: dict[int, float] = {}
    raw: dict[int, float] = {}
    rss_mb: dict[int, float] = {}
    per_cpu: dict[int, float] = {}
    load = start
    while load <= max_load:
        # Past its peak and measured at 4x its knee (a protocol that never delivered >= 0.9
        # of the offered load has no knee: then 4x the load of its peak).
        proto_done = bool(proto) and passed_peak(proto) and load > 4 * reference(proto)
        raw_done = bool(raw) and passed_peak(raw)
        if proto_done and raw_done:
            break
        rate = max(1, load // hosts)
        ps: list[float] = []
        bs: list[float] = []
        cs: list[float] = []
        peak: dict[int, int] = {}
        for _ in range(repeat):
            if not proto_done:
                st: dict[str, float] = {}
                with tempfile.TemporaryDirectory() as tmp:
                    ps.append(min(protocol_run(hosts, rate, seconds, Path(tmp), rss=peak,
                                               window=window, stats=st).values()))
                cs.append(st["fnl_per_cpu_s"])
            if not raw_done:
                bs.append(min(baseline_run(hosts, rate, seconds).values()))
        if ps:
            proto[load], per_cpu[load] = statistics.median(ps), statistics.median(cs)
            rss_mb[load] = max(peak.values(), default=0) / 1024
        if bs:
            raw[load] = statistics.median(bs)
        p, b = proto.get(load), raw.get(load)
        print(f"{load:>9,} {_spread(p, ps):>20} {_spread(b, bs):>20} "
              f"{(f'{p / b:.2f}' if p is not None and b else '-'):>6} "
              f"{_fmt(per_cpu.get(load)):>10} "
              f"{(f'{rss_mb[load]:.0f} MB' if load in rss_mb else '-'):>13} "
              f"{os.getloadavg()[0]:>5.1f}", flush=True)
        load *= 2
    for name, series in (("sequencer", proto), ("raw fan-out", raw)):
        k = knee(series)
        print(f"{name}: peak {max(series.values()):,.0f} msgs/s (at {_peak_load(series):,} "
              f"offered), knee {'-' if k is None else f'{k:,}'} msgs/s offered")
    pk, rk = max(proto.values()), max(raw.values())
    print(f"sequencer peak / raw fan-out peak: {pk / rk:.2f} (goal >= 0.8: "
          f"{_verdict(pk / rk >= 0.8)})")
    k = reference(proto)
    what = "knee" if knee(proto) is not None else "peak's offered load (no knee)"
    for mult in (2, 4):
        at = proto.get(mult * k)
        print(f"sequencer at {mult}x its {what} ({mult * k:,}/s offered): "
              + ("not measured" if at is None else
                 f"{at:,.0f} msgs/s = {at / pk:.2f} of its peak (goal >= 0.9: "
                 f"{_verdict(at / pk >= 0.9)})"))
    print(f"max RSS of any node: {max(rss_mb.values(), default=0):.0f} MB "
          f"(lowest load {rss_mb[min(rss_mb)]:.0f} MB, highest {rss_mb[max(rss_mb)]:.0f} MB)")
    print(f"load average: {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    # The same figures as docs/benchmarks.md's "Throughput" table (paste it from here).
    print("\n| offered | sequencer | raw fan-out | sequencer / raw | fnl per node-CPU-s "
          "| node peak RSS |")
    print("|---|---|---|---|---|---|")
    for load in sorted(set(proto) | set(raw)):
        p, b = proto.get(load), raw.get(load)
        print(f"| {load:,}/s | {_per_s(p)} | {_per_s(b)} | "
              f"{f'{p / b:.2f}' if p is not None and b else '-'} | {_fmt(per_cpu.get(load))} | "
              f"{f'{rss_mb[load]:.0f} MB' if load in rss_mb else '-'} |")


def _spread(median: float | None, values: list[float]) -> str:
    """The median, with the range when the point ran more than once."""
    if median is None:
        return "-"
    if len(values) < 2:
        return _fmt(median)
    return f"{_fmt(median)} ({min(values) / 1000:.1f}-{max(values) / 1000:.1f}k)"


def _per_s(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}/s"


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _peak_load(series: dict[int, float]) -> int:
    return max(series, key=lambda load: series[load])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocol", default="sequencer", help="a protocol of the catalogue")
    ap.add_argument("--hosts", type=int, default=5)
    ap.add_argument("--rate", type=int, default=1000, help="messages/s offered per host")
    ap.add_argument("--seconds", type=int, default=12,
                    help="workload length per point (the steady window starts 1 s after the "
                    "last node's first send)")
    ap.add_argument("--window", type=int, default=None,
                    help="the workload's send window (default: the spec's, workload.window)")
    ap.add_argument("--sweep", action="store_true", help="double the offered load (see above)")
    ap.add_argument("--first-load", type=int, default=1000, help="sweep: first total offered load")
    ap.add_argument("--max-load", type=int, default=128_000, help="sweep: stop after this load")
    ap.add_argument("--repeat", type=int, default=1,
                    help="sweep: runs per point, the median counts (a shared machine is noisy)")
    ap.add_argument("--baseline-node", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.baseline_node is not None:
        # The same event loop as the nodes (uvloop where importable), so that the ratio
        # compares the protocol's work, not two event loops.
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            n = runner.run(_baseline_node(args.baseline_node, args.hosts, args.rate,
                                          args.seconds, args.start))
        print(n)
        return
    if args.sweep:
        sweep(args.hosts, args.first_load, args.max_load, args.seconds, args.window,
              max(1, args.repeat))
        return
    name = args.protocol
    with tempfile.TemporaryDirectory() as tmp:
        proto = protocol_run(args.hosts, args.rate, args.seconds, Path(tmp) / "p", name,
                             window=args.window)
    seq: dict[str, float] = {}
    if name != "sequencer":
        with tempfile.TemporaryDirectory() as tmp:
            seq = protocol_run(args.hosts, args.rate, args.seconds, Path(tmp) / "s",
                               window=args.window)
    base = baseline_run(args.hosts, args.rate, args.seconds)
    offered = args.hosts * args.rate
    print(f"offered {offered} msgs/s ({args.hosts} hosts x {args.rate}/s, {SIZE} B)")
    for h in sorted(proto):
        extra = f"   sequencer {seq[h]:8.0f} msgs/s" if seq else ""
        print(f"  {h}: {name} {proto[h]:8.0f} msgs/s{extra}   raw fan-out {base[h]:8.0f} msgs/s")
    p, b = min(proto.values()), min(base.values())
    line = (f"min over nodes: {name} {p:.0f} msgs/s, raw UDP fan-out {b:.0f} msgs/s, "
            f"ratio {p / b:.2f}" if b else f"min over nodes: {name} {p:.0f} msgs/s")
    if seq:
        s = min(seq.values())
        rel = f"{p / s:.2f}" if s else "n/a (the sequencer delivered nothing)"
        line += f"; sequencer {s:.0f} msgs/s (ratio {s / b:.2f}), {name}/sequencer {rel}"
    print(line)


if __name__ == "__main__":
    main()
