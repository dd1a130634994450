"""What the host agent (nodes/agent.py) adds to a Maelstrom program, in the same bench run.

    python -m bench.agent_overhead [--latency-ms 5] [--seconds 4] [--clients 16]

1. A node-to-node message through two agents on the local backend: the one-way time from the
   sender's agent reading the program's line to the receiver's agent handing it on
   (`summary.json` `maelstrom.transit_ms`, p50 over both directions of a two-node broadcast
   run), next to the configured delay; the difference is the agents' cost (goal: at most
   0.3 ms at p50).
2. Client operations per second against one echo program: through the agent (its closed-loop
   clients at an offered rate far above what they can do) and, side by side, straight over a
   pipe to the same program with the same number of requests in flight (goal: at least
   5,000/s per node through the agent).
   Side by side, during the same run: the plain baseline, two processes on the same event
   loop as the agents (nodes/loop.py) exchanging one UDP datagram every 10 ms, each held
   back by the same delay with the same timer (`call_at`) before it is sent; what the
   machine's load and the loop's timers add shows there too, and the agent's own cost is
   the difference.
Figures on a loaded machine are noisy: read the agent's cost next to the baseline's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NODES = ROOT / "tests" / "maelstrom_nodes"


def _test(out: Path, *args: str) -> dict[str, object]:
    subprocess.run([sys.executable, "-m", "testbed", "maelstrom", "test", "--settle", "1",
                    "--out", str(out),
                    *args], cwd=ROOT, stdout=subprocess.DEVNULL, check=False)
    run = sorted(p for p in out.iterdir() if p.is_dir())[-1]
    summary: dict[str, object] = json.loads((run / "summary.json").read_text())["maelstrom"]
    return summary


def transit(latency_ms: float, seconds: float, out: Path) -> float:
    m = _test(out, "-w", "broadcast", "--bin", str(NODES / "broadcast.py"), "--node-count",
              "2", "--latency", f"{latency_ms:g}", "--time-limit", f"{seconds:g}", "--rate",
              "100")
    per = m["transit_ms"]
    assert isinstance(per, dict)
    values = sorted(q["p50"] for q in per.values())
    return values[len(values) // 2]


# The baseline's two processes: a datagram carries its send time (the moment the delayed
# send was scheduled, as the agent's `nsend` is logged before its link model holds the
# datagram); the receiver prints each one-way time in ms.
_PLAIN = """
import asyncio, socket, sys, time
from nodes.loop import loop_factory
role, port, delay, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])

class Recv(asyncio.DatagramProtocol):
    def datagram_received(self, data, addr):
        print(round((time.time_ns() - int(data)) / 1e6, 4), flush=True)

async def main():
    loop = asyncio.get_running_loop()
    if role == "recv":
        await loop.create_datagram_endpoint(Recv, local_addr=("127.0.0.1", port))
        await asyncio.sleep(seconds + 1)
        return
    t, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol,
                                               remote_addr=("127.0.0.1", port))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        stamp = str(time.time_ns()).encode()
        loop.call_at(loop.time() + delay / 1e3, t.sendto, stamp)
        await asyncio.sleep(0.01)
    await asyncio.sleep(delay / 1e3 + 0.1)

with asyncio.Runner(loop_factory=loop_factory(tls=False)) as r:
    r.run(main())
"""


def plain_start(latency_ms: float, seconds: float) -> list[subprocess.Popen[str]]:
    """The baseline pair, started now (it runs `seconds` beside whatever runs then)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    args = [str(port), f"{latency_ms:g}", f"{seconds:g}"]
    recv = subprocess.Popen([sys.executable, "-c", _PLAIN, "recv", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    send = subprocess.Popen([sys.executable, "-c", _PLAIN, "send", *args], cwd=ROOT, env=env,
                            text=True)
    return [recv, send]


def plain_p50(procs: list[subprocess.Popen[str]]) -> float:
    recv, send = procs
    send.wait()
    out, _ = recv.communicate()
    values = sorted(float(x) for x in out.split())
    return values[len(values) // 2] if values else float("nan")


def through_agent(seconds: float, clients: int, out: Path) -> float:
    m = _test(out, "-w", "echo", "--bin", str(NODES / "echo.js"), "--node-count", "1",
              "--time-limit", f"{seconds:g}", "--rate", "1000000", "--concurrency",
              str(clients))
    ops = m["ops"]
    assert isinstance(ops, dict)
    return float(ops["ok"]) / seconds


def direct_pipe(seconds: float, clients: int) -> float:
    """The same program over a pipe: init, then `clients` echo requests kept in flight."""
    proc = subprocess.Popen([str(NODES / "echo.js")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, bufsize=0)
    assert proc.stdin is not None and proc.stdout is not None
    out = proc.stdout

    def send(k: int, body: dict[str, object]) -> None:
        assert proc.stdin is not None
        proc.stdin.write((json.dumps({"src": f"c{k}", "dest": "n1", "body": body}) + "\n")
                         .encode())

    send(0, {"type": "init", "msg_id": 1, "node_id": "n1", "node_ids": ["n1"]})
    out.readline()
    for k in range(clients):
        send(k + 1, {"type": "echo", "msg_id": 1, "echo": f"Please echo {k}"})
    done, began = 0, time.monotonic()
    while time.monotonic() - began < seconds:
        reply = json.loads(out.readline())
        done += 1
        k = int(reply["dest"][1:])
        send(k, {"type": "echo", "msg_id": done + 1, "echo": f"Please echo {done}"})
    rate = done / (time.monotonic() - began)
    proc.kill()
    proc.wait()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agent-overhead-") as tmp:
        # the baseline over the whole transit run (the agents' start, then their workload)
        plain = plain_start(args.latency_ms, args.seconds + 4)
        p50 = transit(args.latency_ms, args.seconds, Path(tmp) / "transit")
        base = plain_p50(plain)
        agent = through_agent(args.seconds, args.clients, Path(tmp) / "echo")
    pipe = direct_pipe(args.seconds, args.clients)
    print(f"node to node through two agents: p50 {p50:.3f} ms over {args.latency_ms:g} ms "
          f"configured: +{p50 - args.latency_ms:.3f} ms; plain UDP with the same delay, same "
          f"time: +{base - args.latency_ms:.3f} ms; the agents' own cost "
          f"{p50 - base:+.3f} ms (goal <= 0.3)")
    print(f"echo, {args.clients} clients: {agent:,.0f} ops/s through the agent, "
          f"{pipe:,.0f} ops/s over a direct pipe ({agent / pipe:.2f}x; goal >= 5,000/s)")


if __name__ == "__main__":
    main()
