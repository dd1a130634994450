"""An experiment under a flood of forged datagrams (docs/benchmarks.md, "Security").

    python -m bench.forged_flood experiments/quickstart.yaml [--transport udp-aead]
        [--rate 4000] [--targets h1,h2] [--out runs]

Runs the experiment (analysis included) with its `transport` overridden, and from the moment
the target nodes serve until the workload ends sends `rate` forged datagrams/s, spread over
the targets: random bytes, truncated headers, lengths that lie, wrong magic or version,
header-valid messages with spoofed member ids and garbage payloads, sealed-looking datagrams
with bad tags; the pool repeats, so replays too. Prints what was sent, what each node counted
(its `stop` event), ev=error and traceback counts, and the run's verdict.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from analysis.record import read_record
from nodes.wire import HEADER, HEADER_SIZE, MAGIC, WIRE_VERSION, MsgType

ROOT = Path(__file__).resolve().parents[1]
RATE = 4000  # forged datagrams per second, spread over the targets


def forged_pool(n: int, members: int, rng: random.Random) -> list[bytes]:
    """Random bytes, truncated and lying headers, wrong magic/version, header-valid messages
    with spoofed senders and garbage payloads, and sealed-looking datagrams with bad tags."""
    pool = []
    for i in range(n):
        kind = i % 6
        fields = [rng.choice(list(MsgType)), rng.randrange(5), rng.randrange(4),
                  rng.randrange(members), rng.randrange(1, 50), rng.randrange(members),
                  rng.randrange(1, 2000), rng.randrange(1, 2000), rng.randrange(0, 100),
                  rng.randrange(100), rng.randrange(2**63), rng.randrange(2)]
        payload = rng.randbytes(rng.choice([0, 6, 12, 7, 100, 1024]))
        header = HEADER.pack(MAGIC, WIRE_VERSION, *fields, len(payload))
        if kind == 0:
            pool.append(rng.randbytes(rng.randrange(1, 200)))
        elif kind == 1:
            pool.append((header + payload)[: rng.randrange(HEADER_SIZE)])
        elif kind == 2:
            pool.append(HEADER.pack(MAGIC, WIRE_VERSION, *fields, len(payload) + 9) + payload)
        elif kind == 3:
            pool.append(b"XX" + (header + payload)[2:] if rng.random() < 0.5
                        else header[:2] + b"\x07" + header[3:] + payload)
        elif kind == 4:
            pool.append(header + payload)
        else:
            pool.append(header + rng.randbytes(8) + payload + rng.randbytes(16))
    return pool


def flood(run_root: Path, proc: subprocess.Popen[str], targets: tuple[str, ...],
          rate: int = RATE) -> dict[str, int]:
    """Send `rate` forged datagrams/s, round robin over `targets`, from the moment they all
    serve (control.json written) until the workload ends; return how many went to each."""
    deadline = time.monotonic() + 60
    addrs: dict[str, tuple[str, int]] = {}
    end = 0
    while time.monotonic() < deadline and proc.poll() is None:
        runs = list(run_root.glob("*/nodes")) if run_root.exists() else []
        if runs and all((runs[0] / h / "control.json").exists() for h in targets):
            cfg = json.loads((runs[0] / targets[0] / "node.json").read_text())
            addrs = {m["name"]: (m["host"], m["port"]) for m in cfg["members"]}
            end = cfg["start_at_ns"] + cfg["duration_ns"]
            members = len(cfg["members"])
            break
        time.sleep(0.05)
    if not addrs:
        raise RuntimeError("the target nodes did not come up")
    pool = forged_pool(3000, members, random.Random(5))
    sent = dict.fromkeys(targets, 0)
    began = time.monotonic()
    i = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        while time.time_ns() < end - 50_000_000:
            due = int((time.monotonic() - began) * rate)
            while i < due:
                host = targets[i % len(targets)]
                s.sendto(pool[i % len(pool)], addrs[host])  # pool entries recur: replays too
                sent[host] += 1
                i += 1
            time.sleep(0.002)
    return sent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment", type=Path)
    ap.add_argument("--transport", default="udp-aead", choices=["udp", "udp-aead", "tls"])
    ap.add_argument("--rate", type=int, default=RATE)
    ap.add_argument("--targets", default="h1,h2")
    ap.add_argument("--out", type=Path, default=None, help="runs folder (default: a temp dir)")
    args = ap.parse_args()
    spec = yaml.safe_load(args.experiment.read_text())
    if isinstance(spec.get("topology"), str):
        spec["topology"] = str((args.experiment.parent / spec["topology"]).resolve())
    spec["transport"] = args.transport
    spec["backend"] = "local"
    with tempfile.TemporaryDirectory() as tmp:
        exp = Path(tmp) / "exp.yaml"
        exp.write_text(yaml.safe_dump(spec))
        out = args.out or Path(tmp) / "runs"
        proc = subprocess.Popen([sys.executable, "-m", "testbed", "run", str(exp), "--out",
                                 str(out)], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        try:
            sent = flood(out, proc, tuple(args.targets.split(",")), args.rate)
            output, _ = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        run = next(p for p in sorted(out.iterdir()) if p.is_dir())
        print(f"transport {args.transport}: sent {sum(sent.values())} forged datagrams "
              f"({args.rate}/s) to {sent}")
        record = read_record(run)
        for host, events in record.events().items():
            stop = events[-1] if events and events[-1]["ev"] == "stop" else {}
            errors = sum(1 for e in events if e["ev"] == "error")
            tracebacks = (record.path / "nodes" / host / "node.log").read_text().count(
                "Traceback")
            fnl = sum(1 for e in events if e["ev"] == "fnl")
            print(f"  {host}: malformed {stop.get('malformed')}, rejected "
                  f"{stop.get('rejected')}, ev=error {errors}, tracebacks {tracebacks}, "
                  f"fnl {fnl}, drops {stop.get('drops')}")
        summary = json.loads((run / "summary.json").read_text()) if (
            run / "summary.json").exists() else {}
        checks = {k: v.get("violations") for k, v in summary.get("checks", {}).items()}
        print(f"  checks: {checks}")
        print(f"  node_errors: {summary.get('node_errors')}, ok: {summary.get('ok')}, "
              f"testbed run exit {proc.returncode}")
        if proc.returncode:
            print("  " + output.strip().replace("\n", "\n  ")[-1500:])


if __name__ == "__main__":
    main()
