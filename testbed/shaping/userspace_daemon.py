"""`python -m testbed.shaping.userspace_daemon --config X`: the userspace delay line.

Runs inside one host's namespace. An iptables OUTPUT rule hands every data-plane packet to
NFQUEUE; this daemon reads the first 20 bytes (the IP header: nothing else is copied), looks
up the destination's lane, and either drops the packet (loss) or holds its verdict until
`now + delay + jitter (+ serialisation at the lane's rate)`, netem's semantics: jitter may
reorder, rate queues behind the previous packet, `limit` bounds the delay line.

Timing (PLATFORM.md: a thread + heap design had a 2 ms p99 at 2,000 packets/s): one thread
does everything, so no GIL hand-offs sit between a deadline and its verdict. It sleeps in
select() until ~200 us before the next deadline with the timer slack cut to 1 us, then spins
on a zero-timeout select, so packets keep arriving while it waits; the garbage collector is
off (the daemon holds a fixed set of objects; cycles are not made).

Control socket (a Unix stream socket; one JSON request per connection, one JSON reply):
  {"op": "ping"}  {"op": "stats"}  {"op": "set", "dst": IP, "path": {delay_ns, ...}}
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import heapq
import json
import os
import random
import select
import signal
import socket
import sys
import time
from itertools import count
from typing import Any

SPIN_NS = 100_000
EARLY_NS = 10_000  # release this close to the deadline: a verdict takes about as long
PR_SET_TIMERSLACK = 29
QUEUE_MAXLEN = 100_000


class Lane:
    """One destination: netem's delay/jitter/loss/rate/limit, with its own seeded RNG."""

    __slots__ = ("delay", "jitter", "dist", "loss", "rate", "limit", "free_at", "queued",
                 "rng", "passed", "lost", "overflow")

    def __init__(self, spec: dict[str, Any], rng: random.Random):
        self.rng = rng
        self.free_at = 0
        self.queued = self.passed = self.lost = self.overflow = 0
        self.set(spec)

    def set(self, spec: dict[str, Any]) -> None:
        self.delay = int(spec.get("delay_ns", 0))
        self.jitter = int(spec.get("jitter_ns", 0))
        self.dist = spec.get("distribution", "normal")
        self.loss = float(spec.get("loss", 0.0))
        self.rate = int(spec.get("rate_bps") or 0)
        self.limit = int(spec.get("limit", 1000))

    def offset(self) -> float:
        """A zero-mean, unit-spread draw in the configured distribution."""
        r = self.rng
        if self.dist == "uniform":
            return r.uniform(-1.0, 1.0)
        if self.dist == "normal":
            return r.gauss(0.0, 1.0)
        # pareto(alpha 3) standardised; paretonormal mixes it with a normal as iproute2's
        # paretonormal table does (a quarter normal, three quarters pareto).
        p = (r.paretovariate(3.0) - 1.5) / 0.8660254
        return p if self.dist == "pareto" else 0.25 * r.gauss(0.0, 1.0) + 0.75 * p

    def schedule(self, now: int, size: int) -> int:
        """Release time in ns, or -1 when the packet is dropped."""
        if self.loss and self.rng.random() < self.loss:
            self.lost += 1
            return -1
        if self.queued >= self.limit:
            self.overflow += 1
            return -1
        at = now + self.delay
        if self.jitter:
            at = max(now, at + round(self.jitter * self.offset()))
        if self.rate:
            start = max(now, self.free_at)
            self.free_at = start + size * 8_000_000_000 // self.rate
            at += self.free_at - now
        self.queued += 1
        self.passed += 1
        return at


class Daemon:
    def __init__(self, cfg: dict[str, Any]):
        self.cfg = cfg
        seed = cfg.get("seed", 1)
        self.lanes = {socket.inet_aton(ip): Lane(spec, random.Random(f"{seed}:{ip}"))
                      for ip, spec in cfg["classes"].items()}
        self.heap: list[tuple[int, int, Any, Lane]] = []
        self.seq = count()
        self.unshaped = 0
        self.stop = False

    def on_packet(self, pkt: Any) -> None:
        hdr = pkt.get_payload()
        lane = self.lanes.get(hdr[16:20])
        if lane is None:
            self.unshaped += 1
            pkt.accept()
            return
        at = lane.schedule(time.monotonic_ns(), (hdr[2] << 8) | hdr[3])
        if at < 0:
            pkt.drop()
            return
        heapq.heappush(self.heap, (at, next(self.seq), pkt, lane))

    def release(self, now: int) -> None:
        heap, pop = self.heap, heapq.heappop
        while heap and heap[0][0] <= now + EARLY_NS:
            _, _, pkt, lane = pop(heap)
            pkt.accept()
            lane.queued -= 1

    def control(self, conn: socket.socket) -> None:
        conn.settimeout(1.0)
        try:
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            reply = self.handle(json.loads(data or b"{}"))
        except (OSError, ValueError, KeyError) as exc:
            reply = {"ok": False, "error": str(exc)}
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps(reply).encode() + b"\n")
        conn.close()

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "ping":
            return {"ok": True, "pid": os.getpid()}
        if op == "stats":
            return {"ok": True, "queued": len(self.heap), "unshaped": self.unshaped,
                    "lanes": {socket.inet_ntoa(k): {"passed": v.passed, "lost": v.lost,
                                                    "overflow": v.overflow, "delay_ns": v.delay,
                                                    "jitter_ns": v.jitter, "loss": v.loss}
                              for k, v in self.lanes.items()}}
        if op == "set":
            key = socket.inet_aton(req["dst"])
            if key not in self.lanes:
                return {"ok": False, "error": f"no lane for {req['dst']}"}
            self.lanes[key].set(req["path"])
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def run(self, nfq: Any, ctl: socket.socket) -> None:
        fd = nfq.get_fd()
        rlist = [fd, ctl]
        mono, sel = time.monotonic_ns, select.select
        while not self.stop:
            now = mono()
            self.release(now)
            if self.heap:
                wait = self.heap[0][0] - now
                timeout = (wait - SPIN_NS) / 1e9 if wait > SPIN_NS else 0.0
                timeout = min(timeout, 0.2)
            else:
                timeout = 0.2
            ready, _, _ = sel(rlist, [], [], timeout)
            if ready:
                if fd in ready:
                    nfq.run(block=False)
                if ctl in ready:
                    try:
                        conn, _ = ctl.accept()
                    except BlockingIOError:
                        continue
                    self.control(conn)
        # Hand back what is still held rather than leaving verdicts pending at unbind.
        self.release(1 << 62)


def main(argv: list[str] | None = None) -> int:
    from netfilterqueue import NetfilterQueue

    parser = argparse.ArgumentParser(prog="python -m testbed.shaping.userspace_daemon")
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    with open(args.config) as f:
        cfg = json.load(f)
    # Without this the default 50 us timer slack stays: coarser, still correct.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    # Real-time priority: on a busy machine a normal-priority wakeup can wait for a whole
    # scheduler slice (milliseconds), which is exactly the tail we must not add. The spin before
    # each deadline is short, and the kernel's RT throttling bounds what a bug could take.
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(int(cfg.get("rt_priority", 10))))
    gc.disable()
    daemon = Daemon(cfg)

    def stop(signum: int, frame: Any) -> None:
        daemon.stop = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    nfq = NetfilterQueue()
    nfq.bind(int(cfg["queue"]), daemon.on_packet, max_len=QUEUE_MAXLEN, range=20)
    path = cfg["control"]
    if os.path.exists(path):
        os.unlink(path)
    ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ctl.bind(path)
    ctl.listen(8)
    ctl.setblocking(False)
    print(f"shaping {len(daemon.lanes)} destination(s) on queue {cfg['queue']}", flush=True)
    try:
        daemon.run(nfq, ctl)
    finally:
        nfq.unbind()
        ctl.close()
        if os.path.exists(path):
            os.unlink(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
