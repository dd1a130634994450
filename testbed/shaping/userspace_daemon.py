"""`python -m testbed.shaping.userspace_daemon --config X`: the userspace delay line.

Runs inside one host's namespace. An iptables OUTPUT rule hands every data-plane packet to
NFQUEUE; this daemon reads the packet, looks up the destination's lane, and either drops it
(loss) or releases it at `now + delay + jitter (+ serialisation at the lane's rate)`, netem's
semantics: jitter may reorder, rate queues behind the previous packet, `limit` bounds the
delay line.

Held packets must not stay charged to their sender. The kernel counts a queued skb against the
sending socket's send buffer until its verdict, so at 150 ms x 5,000 packets/s (750 packets
held, ~1 kB of truesize each, against the default 208 kB buffer) sendto() blocked for up to a
whole delay and those datagrams arrived 2x late (the p99 error equal to the delay itself).
netem avoids this by orphaning every delayed skb (`skb_orphan_partial` in `netem_enqueue`).
The daemon does the userspace equivalent: it copies the packet, drops the original at once
(which frees the sender's buffer) and, at the deadline, sends the copy out of the same device
through an AF_PACKET socket to the neighbour's MAC. That path still crosses the device's qdisc
(the HTB tree's rates and QoS) and packet taps (capture), but not netfilter again. A packet
whose neighbour is not resolved yet (the kernel only resolves ARP for packets it routes), or
that did not fit the copy, takes the old path: its verdict is held and then accepted. The MAC
looked up is the destination's own: every backend's data plane is one L2 segment; a routed
destination would keep the held path (correct, only without this fix).

Timing (docs/platform.md: a thread + heap design had a 2 ms p99 at 2,000 packets/s): one thread
does everything, so no GIL hand-offs sit between a deadline and its verdict. It sleeps in
select() until ~200 us before the next deadline with the timer slack cut to 1 us, then spins
on a zero-timeout select, so packets keep arriving while it waits; the garbage collector is
off (the daemon holds a fixed set of objects; cycles are not made). The spin (`spin_ns` in the
config) is for daemons that have a core each: with more daemons than cores every spin takes
the core another daemon's deadline or a node needs, so the applier turns it off there and the
daemon sleeps until the deadline itself (at real-time priority with 1 us timer slack the
wake-up is tens of microseconds late, against paths of milliseconds). At 30 hosts and 1
message/s each the 30 spinning daemons took more CPU than the 30 nodes. Holding nothing, it
blocks in select() without a timeout (a packet, an ARP reply, a control request or a signal
wakes it): an idle daemon takes no CPU (it woke every 200 ms before: 1-2 % of a core each).
It keeps its real-time priority while idle: a sleeping task's priority costs nothing, and the
packet that wakes it needs the prompt wake-up as much as a deadline does (its delay runs from
when the daemon reads it, so a scheduler slice of waiting would be added to its path).

Control socket (a Unix stream socket; one JSON request per connection, one JSON reply):
  {"op": "ping"}  {"op": "stats"}  {"op": "set", "dst": IP, "path": {delay_ns, ...}}
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import gc
import heapq
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from itertools import count
from typing import Any

from nodes.config import PathConfig
from nodes.linkmodel import LinkModel

PATH_FIELDS = set(PathConfig.__dataclass_fields__)

def read_line(sock: socket.socket) -> bytes:
    """One newline-framed message of the control protocol (client and daemon both use it)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


SPIN_NS = 100_000
EARLY_NS = 10_000  # release this close to the deadline: a verdict takes about as long
PR_SET_TIMERSLACK = 29
QUEUE_MAXLEN = 100_000
RT_PRIORITY = 30
#: Copy whole packets (netfilterqueue caps this at its 4 kB buffer): the copy is what is sent.
COPY_RANGE = 65535
ETH_P_IP = 0x0800
ETH_P_ARP = 0x0806
ARPOP_REQUEST, ARPOP_REPLY = 1, 2
ARP_HEADER = struct.Struct("!HHBBH6s4s6s4s")
SIOCGIFADDR, SIOCGIFHWADDR = 0x8915, 0x8927
ARP_TABLE = "/proc/net/arp"
ATF_COM = 0x2  # the entry has a resolved hardware address
NEIGH_REFRESH_NS = 100_000_000
NFQ_STATS = "/proc/net/netfilter/nfnetlink_queue"


class Lane:
    """One destination: netem's model (nodes/linkmodel.py, the same code as the simulator's and
    the local backend's links) with its own seeded RNG, plus the delay line's `limit`.

    The spec is testbed/shaping/userspace.py `lane()`: `rate_bps` is the HTB class's rate
    (serialisation before the delay, as the model's `bandwidth_bps`), `netem_rate_bps` netem's
    own `rate`."""

    __slots__ = ("model", "limit", "queued", "passed", "overflow", "dup_at", "corrupt", "held")

    def __init__(self, spec: dict[str, Any], rng: random.Random):
        self.queued = self.passed = self.overflow = 0
        self.held = 0  # packets of this lane waiting for a verdict (not copied)
        self.dup_at = -1
        self.corrupt = False
        self.model = LinkModel(PathConfig(), rng)
        # A corrupted datagram really goes out with a bit flipped (the receiver's checksum
        # drops it), rather than being dropped here.
        self.model.deliver_corrupted = True
        self.set(spec)

    def set(self, spec: dict[str, Any]) -> None:
        fields = {k: v for k, v in spec.items() if k in PATH_FIELDS}
        fields["bandwidth_bps"] = int(spec.get("rate_bps") or 0) or None
        fields["rate_bps"] = int(spec.get("netem_rate_bps") or 0) or None
        fields.pop("limit", None)
        self.model.path = PathConfig.from_dict(fields)
        self.limit = int(spec.get("limit", 1000))

    @property
    def delay(self) -> int:
        return self.model.path.delay_ns

    @property
    def lost(self) -> int:
        return self.model.lost

    def schedule(self, now: int, size: int) -> int:
        """Release time in ns, or -1 when the packet is dropped. A duplicate's release time is
        left in `dup_at` (-1: none), whether the packet is corrupted in `corrupt`."""
        self.dup_at = -1
        if self.queued >= self.limit:
            self.overflow += 1
            return -1
        model = self.model
        delay = model.transit(now, size)
        if model.dup_ns is not None and self.queued + 1 < self.limit:
            self.dup_at = now + model.dup_ns
            self.queued += 1
        if delay is None:
            return -1
        self.corrupt = model.was_corrupted
        self.queued += 1
        self.passed += 1
        return now + delay


def flip_bit(data: bytes, rng: random.Random) -> bytes:
    """netem's corruption: one random bit of the payload flipped, after the checksums were
    computed. Here anywhere past the IP header and the transport header's first 8 bytes (ports,
    lengths: all of UDP's), so the packet still reaches its receiver, whose UDP or TCP checksum
    then discards it."""
    start = min(len(data) - 1, (data[0] & 0x0F) * 4 + 8)
    i = rng.randrange(start, len(data))
    return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:]


class Neighbours:
    """MAC addresses of the namespace's IPv4 neighbours, for the copies sent by AF_PACKET.

    First the kernel's table (/proc/net/arp; Mininet's static ARP fills it), re-read at most
    every 100 ms and only on a miss, so lookups stay dictionary reads. A destination the kernel
    has not resolved gets our own ARP request, at most every 100 ms per destination: until the
    reply comes (well under a millisecond on a bridge) its packets take the held-verdict path,
    whose skbs count against the sender's buffer, so resolving early keeps that window short."""

    def __init__(self) -> None:
        self.macs: dict[tuple[bytes, str], bytes] = {}
        self.read_at = -NEIGH_REFRESH_NS
        self.asked: dict[tuple[bytes, str], int] = {}
        self.arp = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ARP))
        self.arp.setblocking(False)

    def lookup(self, ip: bytes, dev: str, now: int) -> bytes | None:
        mac = self.macs.get((ip, dev))
        if mac is None and now - self.read_at >= NEIGH_REFRESH_NS:
            self.read_at = now
            self.macs.update(read_arp_table())
            mac = self.macs.get((ip, dev))
        if mac is None and now - self.asked.get((ip, dev), -NEIGH_REFRESH_NS) >= NEIGH_REFRESH_NS:
            self.asked[(ip, dev)] = now
            with contextlib.suppress(OSError):
                self.ask(ip, dev)
        return mac

    def ask(self, ip: bytes, dev: str) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            ifreq = struct.pack("256s", dev.encode())
            own_mac = fcntl.ioctl(s, SIOCGIFHWADDR, ifreq)[18:24]
            own_ip = fcntl.ioctl(s, SIOCGIFADDR, ifreq)[20:24]
        request = ARP_HEADER.pack(1, ETH_P_IP, 6, 4, ARPOP_REQUEST, own_mac, own_ip,
                                  b"\0" * 6, ip)
        self.arp.sendto(request, (dev, ETH_P_ARP, 0, 0, b"\xff" * 6))

    def on_arp(self) -> None:
        """Learn from every ARP reply waiting on the socket."""
        while True:
            try:
                frame, addr = self.arp.recvfrom(128)
            except OSError:
                return
            if len(frame) < ARP_HEADER.size:
                continue
            _, ptype, _, _, op, sha, spa, _, _ = ARP_HEADER.unpack_from(frame)
            if op == ARPOP_REPLY and ptype == ETH_P_IP:
                self.macs[(spa, addr[0])] = sha


def read_arp_table(path: str = ARP_TABLE) -> dict[tuple[bytes, str], bytes]:
    table = {}
    try:
        with open(path) as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return {}
    for row in rows:
        cols = row.split()
        if len(cols) >= 6 and int(cols[2], 16) & ATF_COM:
            table[(socket.inet_aton(cols[0]), cols[5])] = bytes.fromhex(cols[3].replace(":", ""))
    return table


def kernel_queue_stats(queue: int, path: str = NFQ_STATS) -> dict[str, int]:
    """The kernel's side of our queue: packets waiting for a verdict, dropped because the queue
    was full, and dropped because our netlink socket's receive buffer was (ENOBUFS)."""
    try:
        with open(path) as f:
            for row in f:
                cols = [int(c) for c in row.split()]
                if cols and cols[0] == queue:
                    return {"queue_total": cols[2], "queue_dropped": cols[5],
                            "user_dropped": cols[6]}
    except (OSError, ValueError):
        pass
    return {}


def lane_stats(lane: Lane) -> dict[str, Any]:
    m, p = lane.model, lane.model.path
    return {"passed": lane.passed, "lost": m.lost, "overflow": lane.overflow,
            "corrupted": m.corrupted, "duplicated": m.duplicated, "reordered": m.reordered,
            "delay_ns": p.delay_ns, "jitter_ns": p.jitter_ns, "loss": p.loss,
            "gemodel": p.gemodel, "fifo": p.fifo}


class Daemon:
    def __init__(self, cfg: dict[str, Any]):
        self.cfg = cfg
        seed = cfg.get("seed", 1)
        self.lanes = {socket.inet_aton(ip): Lane(spec, random.Random(f"{seed}:{ip}"))
                      for ip, spec in cfg["classes"].items()}
        # (deadline, tie-break, lane, held packet or None, (copy, AF_PACKET address) or None)
        self.heap: list[tuple[int, int, Lane, Any, tuple[bytes, tuple[Any, ...]] | None]] = []
        self.seq = count()
        self.unshaped = self.copied = self.held = self.tx_errors = self.dup_missed = 0
        # How late releases were, seen from the loop: tells the daemon's own tail apart from
        # the kernel's or the receiver's when a measured delay is off.
        self.late_max = self.late_1ms = 0
        self.stop = False
        self.neigh = Neighbours()
        self.tx = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
        self.tx.setblocking(False)
        self.ifnames: dict[int, str] = {}

    def on_packet(self, pkt: Any) -> None:
        data = pkt.get_payload()
        lane = self.lanes.get(data[16:20])
        if lane is None:
            self.unshaped += 1
            pkt.accept()
            return
        size = (data[2] << 8) | data[3]
        now = time.monotonic_ns()
        # nfq.run() drains every waiting packet before returning; after a sender's burst that
        # is hundreds of callbacks, so due releases go out between them, not after them.
        if self.heap and self.heap[0][0] <= now + EARLY_NS:
            self.release(now)
        at = lane.schedule(now, size)
        addr = self.address(pkt.outdev, data[16:20], now) if len(data) == size else None
        if addr is not None and lane.held and lane.model.path.fifo:
            # `reorder: false`: a copy leaves by AF_PACKET, a held packet by its verdict; two
            # ways out of the daemon can swap neighbours released at one instant, so while
            # any packet of a FIFO lane waits for its verdict the next ones wait the same way.
            addr = None
        if lane.dup_at >= 0:
            if addr is None:  # a held verdict cannot be given twice
                lane.queued -= 1
                self.dup_missed += 1
            else:
                heapq.heappush(self.heap, (lane.dup_at, next(self.seq), lane, None,
                                           (data, addr)))
        if at < 0:
            pkt.drop()
            return
        if lane.corrupt:
            data = flip_bit(data, lane.model.rng)
        if addr is None:
            if lane.corrupt:
                pkt.set_payload(data)
            self.held += 1
            lane.held += 1
            heapq.heappush(self.heap, (at, next(self.seq), lane, pkt, None))
            return
        pkt.drop()  # the copy goes out instead; the sender's buffer is free again
        self.copied += 1
        heapq.heappush(self.heap, (at, next(self.seq), lane, None, (data, addr)))

    def address(self, ifindex: int, dst: bytes, now: int) -> tuple[Any, ...] | None:
        """AF_PACKET destination for a copy leaving `ifindex` towards `dst`, if resolved."""
        name = self.ifnames.get(ifindex)
        if name is None:
            try:
                name = self.ifnames[ifindex] = socket.if_indextoname(ifindex)
            except OSError:
                return None
        mac = self.neigh.lookup(dst, name, now)
        return None if mac is None else (name, ETH_P_IP, 0, 0, mac)

    def release(self, now: int) -> None:
        heap, pop, send = self.heap, heapq.heappop, self.tx.sendto
        while heap and heap[0][0] <= now + EARLY_NS:
            at, _, lane, pkt, frame = pop(heap)
            lane.queued -= 1
            if now - at > 1_000_000:
                self.late_1ms += 1
                self.late_max = max(self.late_max, now - at)
            if frame is None:
                lane.held -= 1
                pkt.accept()
                continue
            try:
                send(*frame)
            except OSError:
                # The device's queue is full (or it went away): the qdisc would drop it too.
                self.tx_errors += 1

    def control(self, conn: socket.socket) -> None:
        conn.settimeout(1.0)
        try:
            reply = self.handle(json.loads(read_line(conn) or b"{}"))
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
                    "copied": self.copied, "held": self.held, "tx_errors": self.tx_errors,
                    "late_over_1ms": self.late_1ms, "late_max_ns": self.late_max,
                    "kernel": kernel_queue_stats(int(self.cfg["queue"])),
                    "dup_missed": self.dup_missed,
                    "lanes": {socket.inet_ntoa(k): lane_stats(v) for k, v in self.lanes.items()}}
        if op == "set":
            key = socket.inet_aton(req["dst"])
            if key not in self.lanes:
                return {"ok": False, "error": f"no lane for {req['dst']}"}
            self.lanes[key].set(req["path"])
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def run(self, nfq: Any, ctl: socket.socket, wake: socket.socket) -> None:
        """Until stopped: release what is due, then sleep until the next deadline (less the
        spin) or, holding nothing, until a packet, an ARP reply, a control connection or a
        signal (`wake`, the signal wake-up socket) arrives: an idle daemon takes no CPU."""
        fd = nfq.get_fd()
        arp = self.neigh.arp
        rlist = [fd, ctl, arp, wake]
        mono, sel = time.monotonic_ns, select.select
        spin = int(self.cfg.get("spin_ns", SPIN_NS))
        while not self.stop:
            now = mono()
            self.release(now)
            timeout: float | None = None
            if self.heap:
                wait = self.heap[0][0] - now
                timeout = (wait - spin) / 1e9 if wait > spin else 0.0
            ready, _, _ = sel(rlist, [], [], timeout)
            if ready:
                if fd in ready:
                    nfq.run(block=False)
                if arp in ready:
                    self.neigh.on_arp()
                if wake in ready:
                    with contextlib.suppress(OSError):
                        wake.recv(64)
                if ctl in ready:
                    try:
                        conn, _ = ctl.accept()
                    except BlockingIOError:
                        continue
                    self.control(conn)
        # Hand back what is still held rather than leaving verdicts pending at unbind.
        self.release(1 << 62)


CLONE_NEWNET = 0x40000000


def launch(spec_path: str) -> int:
    """`--launch SPEC`: one daemon per host of SPEC (a JSON list of {host, pid, starttime,
    config, log}), each a fork of this process that joins the namespace of `pid` and runs
    `main`. One interpreter start-up for all hosts: at 100 hosts a start-up each (~0.1 s of
    CPU, more on a loaded machine) was most of the shaping's bring-up. Prints "PID HOST" per
    daemon as it is forked, then exits; the daemons keep the run id of this process's
    environment (teardown finds them by it until they are journaled)."""
    from netfilterqueue import NetfilterQueue  # noqa: F401 - loaded once, shared by the forks

    with open(spec_path) as f:
        spec = json.load(f)
    libc = ctypes.CDLL(None, use_errno=True)
    for entry in spec:
        child = os.fork()
        if child == 0:  # pragma: no cover - the forked daemon; its log tells what happened
            code = 1
            try:
                out = os.open(entry["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.dup2(out, 1)
                os.dup2(out, 2)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.setsid()
                if _start_time(int(entry["pid"])) != entry.get("starttime"):
                    print(f"namespace holder {entry['pid']} is gone", flush=True)
                    os._exit(3)
                fd = os.open(f"/proc/{entry['pid']}/ns/net", os.O_RDONLY)
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    print(f"setns: {os.strerror(ctypes.get_errno())}", flush=True)
                    os._exit(3)
                os.close(fd)
                code = main(["--config", entry["config"]])
            except BaseException:  # noqa: BLE001 - a forked child must never return
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                os._exit(code)
        print(f"{child} {entry['host']}", flush=True)
    return 0


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def main(argv: list[str] | None = None) -> int:
    from netfilterqueue import NetfilterQueue

    parser = argparse.ArgumentParser(prog="python -m testbed.shaping.userspace_daemon")
    parser.add_argument("--config")
    parser.add_argument("--launch", help="fork one daemon per host of this JSON list")
    args = parser.parse_args(argv)
    if args.launch:
        return launch(args.launch)
    if not args.config:
        parser.error("--config or --launch is required")
    with open(args.config) as f:
        cfg = json.load(f)
    # Without this the default 50 us timer slack stays: coarser, still correct.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    # Real-time priority: on a busy machine a normal-priority wakeup can wait for a whole
    # scheduler slice (milliseconds), which is exactly the tail we must not add. The spin before
    # each deadline is short, and the kernel's RT throttling bounds what a bug could take. The
    # priority sits above the probes' (bench/owd_probe.py, 20): a measuring or load-generating
    # process must not be able to delay the delay line it measures.
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_FIFO,
                              os.sched_param(int(cfg.get("rt_priority", RT_PRIORITY))))
    gc.disable()
    daemon = Daemon(cfg)

    def stop(signum: int, frame: Any) -> None:
        daemon.stop = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # A signal writes to `notify`, which wakes the loop's select(): without a timeout, the
    # handler alone would leave it asleep (Python retries an interrupted select).
    wake, notify = socket.socketpair()
    wake.setblocking(False)
    notify.setblocking(False)
    signal.set_wakeup_fd(notify.fileno(), warn_on_full_buffer=False)
    nfq = NetfilterQueue()
    nfq.bind(int(cfg["queue"]), daemon.on_packet, max_len=QUEUE_MAXLEN, range=COPY_RANGE)
    path = cfg["control"]
    if os.path.exists(path):
        os.unlink(path)
    ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ctl.bind(path)
    ctl.listen(8)
    ctl.setblocking(False)
    print(f"shaping {len(daemon.lanes)} destination(s) on queue {cfg['queue']}", flush=True)
    try:
        daemon.run(nfq, ctl, wake)
    finally:
        nfq.unbind()
        ctl.close()
        signal.set_wakeup_fd(-1)
        wake.close()
        notify.close()
        if os.path.exists(path):
            os.unlink(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
