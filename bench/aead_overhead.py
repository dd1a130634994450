"""What `transport: udp-aead` (nodes/aead.py) costs against plain UDP, in the same bench run.

    python -m bench.aead_overhead [--hosts 4] [--rates 250,1000,3000] [--seconds 6]

For each offered rate (1 KiB messages/s per host, flat 0 ms topology, local backend, the
sequencer protocol) the same experiment runs over `udp` and then over `udp-aead`. Printed per
rate and transport: the minimum over nodes of final deliveries per second in the steady window
(first second skipped), and fnl latency p50/p99 (send to fnl, all pairs). The last column is
udp-aead's delivered throughput as a fraction of udp's (the target: >= 0.8 at the
sequencer's peak load). Past saturation both collapse and the ratio is noise; so is every
figure on a loaded machine, hence the per-datagram CPU cost printed first.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from analysis.record import read_record

ROOT = Path(__file__).resolve().parents[1]
SIZE = 1024


def one_run(hosts: int, rate: int, seconds: int, transport: str, out: Path
            ) -> tuple[float, float, float]:
    names = [f"h{i + 1}" for i in range(hosts)]
    topo = {"name": "flat", "hosts": [{"name": n} for n in names],
            "matrix": {a: {b: "0ms" for b in names if b != a} for a in names}}
    exp = {"name": f"aead-{transport}", "topology": topo, "backend": "local",
           "duration": f"{seconds}s", "drain": "2s", "seed": 1, "transport": transport,
           "protocol": {"name": "sequencer", "params": {"sequencer": "h1"}},
           "workload": {"rate": f"{rate}/s", "size": f"{SIZE}B", "arrival": "constant"}}
    spec = out / f"{transport}-{rate}.yaml"
    spec.write_text(json.dumps(exp))
    runs = out / f"runs-{transport}-{rate}"
    subprocess.run([sys.executable, "-m", "testbed", "run", str(spec), "--out", str(runs),
                    "--no-analyze"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    run = next(runs.iterdir())
    events = read_record(run).events(("send", "fnl"))
    sent = {e["mid"]: e["t"] for evs in events.values() for e in evs if e["ev"] == "send"}
    start = min(sent.values()) + 1_000_000_000
    end = start + (seconds - 1) * 1_000_000_000
    rates, lat = [], []
    for evs in events.values():
        fnl = [e for e in evs if e["ev"] == "fnl" and start <= e["t"] < end]
        rates.append(len(fnl) / (seconds - 1))
        lat += [(e["t"] - sent[e["mid"]]) / 1e6 for e in fnl if e["mid"] in sent]
    lat.sort()

    def q(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")

    return min(rates), q(0.5), q(0.99)


def per_datagram_us(n: int = 20000) -> dict[str, float]:
    """CPU per 1 KiB datagram: seal, open, and (for scale) the plain wire decode."""
    import timeit

    from nodes.aead import Sealer
    from nodes.wire import Header, Message, MsgType, decode, encode

    plain = encode(Message(Header(MsgType.DATA, sender=1, origin=1, mno=1, rseq=1),
                           b"x" * SIZE))
    a, b = Sealer(bytes(32)), Sealer(bytes(32))
    sealed = iter([a.seal(plain) for _ in range(n)])
    return {"seal": timeit.timeit(lambda: a.seal(plain), number=n) / n * 1e6,
            "open": timeit.timeit(lambda: b.open(next(sealed)), number=n) / n * 1e6,
            "decode": timeit.timeit(lambda: decode(plain), number=n) / n * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--rates", default="250,1000,3000", help="messages/s offered per host")
    ap.add_argument("--seconds", type=int, default=6)
    args = ap.parse_args()
    cost = per_datagram_us()
    print(f"per 1 KiB datagram: seal {cost['seal']:.1f} us, open {cost['open']:.1f} us "
          f"(wire decode alone {cost['decode']:.1f} us)")
    print(f"{args.hosts} hosts, {SIZE} B messages, sequencer, local backend, flat 0 ms")
    print(f"{'offered/s':>10} {'transport':>9} {'min fnl/s':>10} {'p50 ms':>8} {'p99 ms':>8}"
          f" {'aead/udp':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for rate in (int(r) for r in args.rates.split(",")):
            plain = one_run(args.hosts, rate, args.seconds, "udp", Path(tmp))
            sealed = one_run(args.hosts, rate, args.seconds, "udp-aead", Path(tmp))
            for name, (tput, p50, p99) in (("udp", plain), ("udp-aead", sealed)):
                ratio = f"{sealed[0] / plain[0]:9.2f}" if name == "udp-aead" else ""
                print(f"{rate * args.hosts:>10} {name:>9} {tput:>10.0f} {p50:>8.2f} "
                      f"{p99:>8.2f} {ratio}")


if __name__ == "__main__":
    main()
