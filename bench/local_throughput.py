"""Local backend throughput: sustained final-delivered messages/s at every node, side by side
with a raw asyncio UDP fan-out baseline (same hosts, same sizes, no protocol).

    python -m bench.local_throughput [--protocol NAME] [--hosts 5] [--rate 1000] [--seconds 6]

Every host offers `rate` 1 KiB messages/s (so hosts x rate in total). The figure is the minimum
over nodes of final deliveries per second in the steady window (first second skipped); the
baseline is the minimum over nodes of datagrams received per second from the same fan-out.
Prints one comparable line: protocol, baseline, ratio. With `--protocol` other than the
sequencer (any name of the catalogue, nodes/protocols/catalogue.py), the sequencer runs too in
the same invocation, and the protocol's figure is also given as a ratio of the sequencer's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZE = 1024


def protocol_run(hosts: int, rate: int, seconds: int, out: Path,
                 protocol: str = "sequencer") -> dict[str, float]:
    out.mkdir(parents=True, exist_ok=True)
    names = [f"h{i + 1}" for i in range(hosts)]
    topo = {"name": "flat", "hosts": [{"name": n} for n in names],
            "matrix": {a: {b: "0ms" for b in names if b != a} for a in names}}
    exp = {"name": "throughput", "topology": topo, "backend": "local",
           "duration": f"{seconds}s", "drain": "2s", "seed": 1,
           "protocol": {"name": protocol,
                        "params": {"sequencer": "h1"} if protocol == "sequencer" else {}},
           "workload": {"rate": f"{rate}/s", "size": f"{SIZE}B", "arrival": "constant"}}
    spec = out / "exp.yaml"
    spec.write_text(json.dumps(exp))
    subprocess.run([sys.executable, "-m", "testbed", "run", str(spec), "--out", str(out / "runs"),
                    "--no-analyze"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    run = next((out / "runs").iterdir())
    rates = {}
    for log in sorted((run / "nodes").glob("*/events.jsonl")):
        events = [json.loads(line) for line in log.read_text().splitlines()]
        sends = [e["t"] for evs in [events] for e in evs if e["ev"] == "send"]
        start = min(sends) + 1_000_000_000 if sends else events[0]["t"]
        end = start + (seconds - 1) * 1_000_000_000
        n = sum(1 for e in events if e["ev"] == "fnl" and start <= e["t"] < end)
        rates[log.parent.name] = n / (seconds - 1)
    return rates


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
    while time.time() < start + seconds:
        for p in peers:
            transport.sendto(payload, p)
        planned += 1.0 / rate
        await asyncio.sleep(max(0.0, planned - time.time()))
    await asyncio.sleep(0.5)
    transport.close()
    return received


def baseline_run(hosts: int, rate: int, seconds: int) -> dict[str, float]:
    start = time.time() + 1.5
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--protocol", default="sequencer", help="a protocol of the catalogue")
    ap.add_argument("--hosts", type=int, default=5)
    ap.add_argument("--rate", type=int, default=1000, help="messages/s offered per host")
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--baseline-node", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.baseline_node is not None:
        n = asyncio.run(_baseline_node(args.baseline_node, args.hosts, args.rate, args.seconds,
                                       args.start))
        print(n)
        return
    name = args.protocol
    with tempfile.TemporaryDirectory() as tmp:
        proto = protocol_run(args.hosts, args.rate, args.seconds, Path(tmp) / "p", name)
    seq: dict[str, float] = {}
    if name != "sequencer":
        with tempfile.TemporaryDirectory() as tmp:
            seq = protocol_run(args.hosts, args.rate, args.seconds, Path(tmp) / "s")
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
