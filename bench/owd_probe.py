"""One-way delay probe, run inside emulated hosts: `send` emits UDP datagrams carrying their
send time (true time, ns) at a fixed rate; `recv` writes one line per datagram received:
`seq send_ns recv_ns`. Both ends share the machine's clock, so recv - send is the one-way delay.
Used by tests/test_shaping.py and bench/shaper_fidelity.py."""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import time

FMT = struct.Struct("!Iq")


def send(dst: str, port: int, rate: float, count: int, size: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    pad = b"\0" * max(0, size - FMT.size)
    gap = 1e9 / rate
    t0 = time.monotonic_ns()
    for i in range(count):
        due = t0 + int(i * gap)
        while (now := time.monotonic_ns()) < due:
            if due - now > 300_000:
                time.sleep((due - now - 200_000) / 1e9)
        s.sendto(FMT.pack(i, time.time_ns()) + pad, (dst, port))


def recv(bind: str, port: int, count: int, idle_s: float, out: str) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind((bind, port))
    s.settimeout(idle_s)
    lines: list[str] = []
    print("ready", flush=True)
    try:
        while len(lines) < count:
            data = s.recv(65536)
            t = time.time_ns()
            seq, sent = FMT.unpack_from(data)
            lines.append(f"{seq} {sent} {t}")
    except TimeoutError:
        pass
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["send", "recv"])
    p.add_argument("--addr", required=True)
    p.add_argument("--port", type=int, default=9000)
    p.add_argument("--rate", type=float, default=100)
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--size", type=int, default=200)
    p.add_argument("--idle", type=float, default=2.0)
    p.add_argument("--out", default="-")
    p.add_argument("--rt", type=int, default=0, help="SCHED_FIFO priority (root); 0 = normal")
    a = p.parse_args()
    if a.rt:
        # The probe measures the shaper; a probe that waits for the CPU measures the machine.
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(a.rt))
    if a.mode == "send":
        send(a.addr, a.port, a.rate, a.count, a.size)
    else:
        recv(a.addr, a.port, a.count, a.idle, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
