"""The asyncio node runtime: real UDP, real time, one process per emulated host.

The workload starts at the configured true time, runs for the configured duration, the node
keeps serving for the drain period, then flushes its delivery log and exits. SIGTERM and SIGINT
end it early, log flushed. A duration of 0 keeps it serving until it is told to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import signal
import socket
import ssl
import sys
import tempfile
import time
import traceback
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from nodes.config import NodeConfig, PathConfig
from nodes.core import NodeCore, Output
from nodes.emulation import LAG_PERIOD_S, EmulationProbe
from nodes.linkmodel import LinkModel
from nodes.loop import loop_factory
from nodes.management.mbeans import MBean
from nodes.management.node_mbeans import build_node_registry
from nodes.management.server import ManagementServer
from nodes.wire import MsgType
from nodes.workload import Arrivals, intervals, workload_rng

STOP_DELAY_S = 0.05  # a management `stop` lets its reply leave before the node winds down
BURST_MAX = 64  # messages one workload callback offers at most (a late timer catches up)
REFUSED_LOG_NS = 100_000_000  # `ev=refused` lines: at most one per 100 ms, with a count
REFUSED_TICK_NS = 1_000_000  # a workload whose window is full looks again after this

if TYPE_CHECKING:
    from nodes.aead import Sealer
    from nodes.htb import HtbRealiser
    from nodes.tls_transport import TlsTransport


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, node: NodeRuntime):
        self.node = node

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.node.on_datagram(data)

    def error_received(self, exc: Exception) -> None:
        self.node.send_errors += 1


class NodeRuntime:
    def __init__(self, cfg: NodeConfig):
        self.cfg = cfg
        self.core = NodeCore(cfg, t0_ns=cfg.start_at_ns)
        self.loop = asyncio.get_running_loop()
        self.addrs = {m.id: (m.host, m.port) for m in cfg.members}
        self.others = [m.id for m in cfg.members if m.id != cfg.node_id]
        rng = random.Random(f"{cfg.seed}:{cfg.node_id}:links")
        # The `inprocess` shaping applier: this node delays, drops and paces its own datagrams
        # per destination, with netem semantics (nodes/linkmodel.py).
        self.links = {dst: LinkModel(p, rng) for dst, p in cfg.paths.items()}
        self.fifo_at: dict[int, float] = {}  # FIFO paths: the last release, in loop time
        self.fifo_q: dict[int, deque[bytes]] = {}  # FIFO paths: datagrams waiting, in order
        self.timers: dict[str, asyncio.TimerHandle] = {}
        # The last delay each timer key was armed with: a callback that raised re-arms its
        # timer with it, so that one bug does not silence a periodic task for good.
        self.periods: dict[str, int] = {}
        self.transport: asyncio.DatagramTransport | None = None
        self.done = asyncio.Event()
        self.send_errors = 0
        self.sealer: Sealer | None = None
        if cfg.transport == "udp-aead":
            # Imported here: plain-UDP nodes (the docker image) need no `cryptography`.
            from nodes.aead import Sealer

            self.sealer = Sealer(bytes.fromhex(cfg.transport_key), cfg.incarnation)
        elif cfg.transport not in ("udp", "tls"):
            raise ValueError(f"transport {cfg.transport!r} is not implemented by this node")
        self.tls: TlsTransport | None = None
        self.htb: HtbRealiser | None = None
        if cfg.qos_dev:
            # Reservations become HTB classes in this node's namespace (mininet, docker), which
            # police instead of the in-process token bucket (nodes/htb.py).
            from nodes.htb import HtbRealiser

            self.htb = HtbRealiser(cfg.qos_dev, self.addrs[cfg.node_id][1])
            self.core.reservations.realiser = self.htb
            self.core.reservations.police = False
        self._gaps: Arrivals | None = None
        self._next_planned = cfg.start_at_ns
        # The workload's offered and refused messages (graceful overload, see _broadcast).
        self.offered = 0
        self.refused = 0
        self._refused_logged = 0
        self._refused_at = 0
        self.probe = EmulationProbe()  # what analysis/fidelity.py judges the emulation by
        self._lag_due = 0.0

    async def run(self) -> None:
        me = self.addrs[self.cfg.node_id]
        transport: asyncio.DatagramTransport | None = None
        if self.cfg.transport == "tls":
            from nodes.tls_transport import TlsTransport

            self.tls = TlsTransport(self.cfg, self.on_datagram, self._refused)
            await self.tls.start()
        else:
            transport, _ = await self.loop.create_datagram_endpoint(
                lambda: _Protocol(self), local_addr=me)
            self.transport = transport
            _grow_buffers(transport)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.done.set)
        self.loop.set_exception_handler(self._loop_exception)
        server = await self._start_management()
        self._apply(self.core.start(time.time_ns()))
        self._lag_due = self.loop.time() + LAG_PERIOD_S
        self.loop.call_at(self._lag_due, self._probe_lag)
        if self.cfg.workload.send and self.cfg.workload.rate > 0:
            self._gaps = intervals(self.cfg.workload, workload_rng(self.cfg.seed,
                                                                   self.cfg.node_id))
            self.core.arrivals = self._gaps
            # Rate changes on the workload's schedule (a restarted node catches up at once).
            for at, rates, tell in self.cfg.workload.rate_changes:
                self._at_true(self.cfg.start_at_ns + at,
                              functools.partial(self._rate_change, rates, tell))
            # A restarted node resumes the workload from now, not with a burst of what it
            # missed while it was down.
            self._next_planned = max(self._next_planned, time.time_ns()) + next(self._gaps)
            self._at_true(self._next_planned, self._broadcast)
        if self.cfg.duration_ns > 0:
            # The drain's cap; the orchestrator stops the node earlier, through the management
            # endpoint, once the group is quiescent (nodes/quiescence.py).
            self._at_true(self.cfg.end_ns, self.done.set)
        await self.done.wait()
        for handle in self.timers.values():
            handle.cancel()
        self._log_refused(time.time_ns(), force=True)
        if server is not None:
            await server.stop()
        if self.tls is not None:
            await self.tls.stop()
        t = time.time_ns()
        core = self.core
        lt = core.clock.local(t)
        core.log.write(t, lt, "emulation", **self.probe.fields(core.names, lt - t))
        core.stop(time.time_ns())
        if transport is not None:
            transport.close()
        if self.htb is not None:
            self.htb.close()

    async def _start_management(self) -> ManagementServer | None:
        if self.cfg.control_port is None:
            return None
        # `stop` answers first, then the node winds down (the orchestrator's drain calls it).
        registry = build_node_registry(self.core, on_stop=self._stop_soon, apply=self._apply)
        registry.register(self._paths_mbean())
        tls = _server_tls(self.cfg) if self.cfg.mgmt_tls else None
        server = ManagementServer(registry, self.cfg.control_host, self.cfg.control_port,
                                  self.cfg.mgmt_token, ssl_context=tls,
                                  basic=self.cfg.mgmt_basic)
        await server.start()
        # The orchestrator learns the port (possibly chosen by the kernel) from this file.
        where = Path(self.cfg.log_path).parent / "control.json"
        where.write_text(json.dumps({"host": self.cfg.control_host, "port": server.port,
                                     "scheme": "https" if tls else "http"}))
        return server

    def _stop_soon(self) -> None:
        self.loop.call_later(STOP_DELAY_S, self.done.set)

    # -- events in ----------------------------------------------------------------------------
    # No exception escapes a callback: an unexpected one is a bug, written as `ev=error` in
    # the event log with its traceback on stderr (node.log); the analysis fails the run's
    # verdict with "node errors: N" (analysis/job.py), so the node never limps on silently.
    def on_datagram(self, data: bytes) -> None:
        t = time.time_ns()
        try:
            if self.sealer is not None:
                try:
                    data = self.sealer.open(data)
                except ValueError as exc:  # nodes.aead.SealError
                    core = self.core
                    core.counters.datagrams_in += 1
                    core.counters.bytes_in += len(data)
                    core.counters.rejected += 1
                    core.dropped(t, f"rejected:{getattr(exc, 'reason', 'auth')}", str(exc))
                    return
            c = self.core.counters
            refused = c.malformed + c.rejected
            out = self.core.receive(data, t)
            if c.malformed + c.rejected == refused:  # measured only once the node accepted it
                self.probe.arrived(data, t)
            self._apply(out)
        except Exception as exc:
            self._error(t, "datagram", exc)

    def _broadcast(self) -> None:
        """The workload's callback: offers every message planned up to now (at most
        BURST_MAX, so that receives interleave), then schedules itself for the next one --
        one timer per burst, not per message. Each offer goes to the protocol unless the
        sender already has `workload.window` of its own messages not yet final-delivered:
        then it is refused (counted, `ev=refused`), which is the push-back that keeps an
        overloaded group at its peak instead of collapsing (docs/architecture.md "Flow
        control and overload")."""
        t = time.time_ns()
        cfg = self.cfg
        gaps = self._gaps
        assert gaps is not None
        if cfg.duration_ns and t >= cfg.start_at_ns + cfg.duration_ns:
            # The workload is over. Messages it planned before the end that a node too busy
            # to keep up never got to were offered all the same: they count as refused.
            end = cfg.start_at_ns + cfg.duration_ns
            while self._next_planned < end:
                self._next_planned += next(gaps)
                self.offered += 1
                self.refused += 1
            self._log_refused(t, force=True)
            return
        core = self.core
        window = cfg.workload.window
        me = cfg.node_id
        fnl_from = core.fnl_from
        outs: list[Output] = []
        refused_before = self.refused
        try:
            # The `send` lines of a burst reach the file in one write, before any of its
            # datagrams leaves (the crash-safety contract of NodeCore.broadcast).
            core.durable_sends = False
            n = 0
            while self._next_planned <= t and n < BURST_MAX:
                n += 1
                # Schedule from the planned time, not from now, so the rate does not sag.
                self._next_planned += next(gaps)
                self.offered += 1
                if window and core.sent - fnl_from.get(me, 0) >= window:
                    self.refused += 1
                    continue
                outs.append(core.broadcast(t))
        except Exception as exc:
            self._error(t, "broadcast", exc)
        finally:
            core.durable_sends = True
        try:
            if outs:
                core.log.flush()
            for out in outs:
                self._apply(out)
        except Exception as exc:
            self._error(t, "broadcast", exc)
        self._log_refused(t)
        nxt = self._next_planned
        if refused_before != self.refused:
            # The window is full: what falls due in the next REFUSED_TICK_NS can only be
            # refused too unless final deliveries free the window, so offer it in one burst
            # then instead of waking up for each message (an overloaded node spent a fifth
            # of its time in this callback and its timer under py-spy).
            nxt = max(nxt, t + REFUSED_TICK_NS)
        self._at_true(max(nxt, t), self._broadcast)

    def _log_refused(self, t: int, force: bool = False) -> None:
        """One `ev=refused` line (n: messages refused since the last line) at most every
        REFUSED_LOG_NS, and the rest when the workload ends or the node stops."""
        n = self.refused - self._refused_logged
        if n <= 0 or (not force and t - self._refused_at < REFUSED_LOG_NS):
            return
        core = self.core
        me = self.cfg.node_id
        core.log.write(t, core.clock.local(t), "refused", n=n,
                       outstanding=core.sent - core.fnl_from.get(me, 0),
                       window=self.cfg.workload.window)
        self._refused_logged = self.refused
        self._refused_at = t

    def _rate_change(self, rates: dict[str, float], tell: bool) -> None:
        t = time.time_ns()
        try:
            self._apply(self.core.rate_change(rates, tell, t))
        except Exception as exc:
            self._error(t, "rate change", exc)

    def _probe_lag(self) -> None:
        """The event loop's lag: how late this periodic timer runs (nodes/emulation.py)."""
        now = self.loop.time()
        self.probe.late(round((now - self._lag_due) * 1e9))
        self._lag_due = now + LAG_PERIOD_S
        self.loop.call_at(self._lag_due, self._probe_lag)

    def _fire(self, key: str) -> None:
        self.timers.pop(key, None)
        t = time.time_ns()
        try:
            self._apply(self.core.timer(key, t))
        except Exception as exc:
            self._error(t, f"timer {key}", exc)
            if key not in self.timers and key in self.periods:
                self._arm(key, self.periods[key])

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, object]
                        ) -> None:
        """Anything that still reaches asyncio (a callback outside the guards above) is an
        error of this node too: logged, counted, never just a traceback on stderr."""
        exc = context.get("exception")
        if isinstance(exc, OSError):  # a peer's connection or handshake gone wrong: theirs
            self.core.dropped(time.time_ns(), "io", f"{context.get('message', '')}: {exc}")
        elif isinstance(exc, Exception):
            self._error(time.time_ns(), f"asyncio: {context.get('message', '')}", exc)
        else:
            loop.default_exception_handler(context)

    def _error(self, t: int, where: str, exc: Exception) -> None:
        core = self.core
        core.counters.errors += 1
        print(f"node {self.cfg.name}: exception in {where} (ev=error #{core.counters.errors}):",
              file=sys.stderr)
        traceback.print_exception(exc, file=sys.stderr)
        sys.stderr.flush()
        core.log.write(t, core.clock.local(t), "error", where=where,
                       error=f"{type(exc).__name__}: {exc}"[:500])

    # -- actions out --------------------------------------------------------------------------
    def _apply(self, out: Output) -> None:
        for key, delay in out.timers:
            self._arm(key, delay)
        blocked = self.core.blocked_out
        sealer = self.sealer
        me = self.cfg.node_id
        for dst, data, msg in out.sends:
            if sealer is not None:
                data = sealer.seal(data)  # once for every destination of a multicast
            police = msg.header.type != MsgType.ALIVE  # heartbeats are not the protocol's
            original = EmulationProbe.original(msg.header, me)
            if original:
                self.probe.held(self.core.clock.local(time.time_ns()) - msg.header.ts)
            for d in self.others if dst is None else (dst,):
                if d not in blocked:
                    self._send(d, data, police, original)

    def _arm(self, key: str, delay: int) -> None:
        old = self.timers.pop(key, None)
        if old is not None:
            old.cancel()
        if delay <= 0:
            self.timers[key] = self.loop.call_soon(self._fire, key)  # type: ignore[assignment]
        else:
            self.periods[key] = delay
            self.timers[key] = self.loop.call_later(delay / 1e9, self._fire, key)

    def _refused(self, reason: str, detail: str) -> None:
        """Something the tls transport refused (a handshake, a frame, a spoofed sender)."""
        t = time.time_ns()
        self.core.counters.rejected += 1
        self.core.dropped(t, f"rejected:{reason}", detail)

    def _emit(self, data: bytes, dst: int) -> None:
        if self.tls is not None:
            self.tls.send(dst, data)
            return
        transport = self.transport
        # A send the inprocess shaper delayed can fall due after the node closed its socket
        # while stopping: it is dropped (asyncio's sendto would raise on the closed socket).
        if transport is not None and not transport.is_closing():
            transport.sendto(data, self.addrs[dst])

    def _send(self, dst: int, data: bytes, police: bool = True, original: bool = False
              ) -> None:
        core = self.core
        c = core.counters
        c.datagrams_out += 1
        c.bytes_out += len(data)
        now = time.time_ns()
        # Policing (nodes/reservation.py): the reservation's token bucket holds the datagram
        # back until it conforms, or drops it when the reservation's queue is full.
        bucket = core.reservations.charged() if core.reservations.by_key else None
        at = now
        if self.htb is not None:
            core.reservations.count(len(data))  # the HTB class polices; `Used` still counts
        elif bucket is not None and police:
            departs = bucket.depart(now, len(data))
            if departs is None:
                core.dropped(now, "policed", f"{len(data)}-byte datagram to "
                             f"{core.names[dst]}: the reservation's queue is full")
                return
            at = departs
        if original:  # handed to the network: what the link model drops is configured loss
            self.probe.handed(dst)
        link = self.links.get(dst)
        if link is None:
            if at == now:
                self._emit(data, dst)
            else:
                self.loop.call_later((at - now) / 1e9, self._emit, data, dst)
            return
        hold = at - now  # held back by the reservation, then through the link model
        delay = link.transit(at, len(data))
        if link.dup_ns is not None:
            self._later(link, dst, data, hold + link.dup_ns)
        if delay is not None:
            self._later(link, dst, data, hold + delay)

    def _later(self, link: LinkModel, dst: int, data: bytes, delay: int) -> None:
        """Emit after the model's delay. On a FIFO path each release is scheduled strictly
        after the previous one in the loop's own clock: the model's order (wall-clock ns) must
        not be undone by asyncio's timer heap, which does not keep the order of equal times."""
        if link.path.fifo:
            when = max(self.loop.time() + delay / 1e9, self.fifo_at.get(dst, 0.0) + 1e-6)
            self.fifo_at[dst] = when
            # Each timer releases the lane's oldest datagram, not its own: a loop whose timers
            # have a coarser resolution (uvloop: 1 ms, rounded against its cached time) may
            # fire two close timers out of order, and the lane's order must hold anyway.
            self.fifo_q.setdefault(dst, deque()).append(data)
            self.loop.call_at(when, self._emit_fifo, dst)
        elif delay == 0:
            self._emit(data, dst)
        else:
            self.loop.call_later(delay / 1e9, self._emit, data, dst)

    def _emit_fifo(self, dst: int) -> None:
        self._emit(self.fifo_q[dst].popleft(), dst)

    def _paths_mbean(self) -> MBean:
        """Runtime changes to the inprocess shaper (link faults on the local backend)."""

        def set_path(peer: str, delay_ms: float, jitter_ms: float, loss_pct: float) -> None:
            dst = self.core.id_of(peer)
            old = self.cfg.paths.get(dst, PathConfig())
            new = replace(old, delay_ns=round(delay_ms * 1e6), jitter_ns=round(jitter_ms * 1e6),
                          loss=loss_pct / 100)
            link = self.links.get(dst)
            if link is None:
                self.links[dst] = LinkModel(new, random.Random(f"{self.cfg.seed}:{dst}:fault"))
            else:
                link.path = new
            t = time.time_ns()
            self.core.log.write(t, self.core.clock.local(t), "path", peer=peer,
                                delay_ms=delay_ms, jitter_ms=jitter_ms, loss_pct=loss_pct)

        def reset(peer: str) -> None:
            p = self.cfg.paths.get(self.core.id_of(peer), PathConfig())
            set_path(peer, p.delay_ns / 1e6, p.jitter_ns / 1e6, p.loss * 100)

        def current() -> dict[str, dict[str, float]]:
            # What the link model did so far, next to its parameters (docs/link-model.md).
            return {self.core.names[d]: {"delay_ms": m.path.delay_ns / 1e6,
                                         "jitter_ms": m.path.jitter_ns / 1e6,
                                         "loss_pct": m.path.loss * 100,
                                         "lost": m.lost, "corrupted": m.corrupted,
                                         "duplicated": m.duplicated, "reordered": m.reordered,
                                         "overflow": m.overflow}
                    for d, m in self.links.items()}

        return (MBean("testbed:type=Paths", "Per-destination path emulation (inprocess)")
                .attribute("Paths", "dict", current)
                .operation("setPath", set_path, [("peer", "str"), ("delayMs", "float"),
                                                 ("jitterMs", "float"), ("lossPct", "float")],
                           None, "change the path to a peer")
                .operation("reset", reset, [("peer", "str")], None, "restore the planned path"))

    def _at_true(self, true_ns: int, fn: object) -> None:
        self.loop.call_later(max(0.0, (true_ns - time.time_ns()) / 1e9), fn)  # type: ignore


def _server_tls(cfg: NodeConfig) -> ssl.SSLContext:
    """The management server's TLS context from the node's certificate (testbed/certs.py).
    `ssl` loads keys from files only: they pass through a private temporary directory."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cfg.mgmt_mutual:  # mutual TLS: clients show a certificate from the run's CA
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cadata=cfg.tls_ca)
    with tempfile.TemporaryDirectory(prefix="testbed-tls-") as tmp:  # mode 0700
        cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        cert.write_text(cfg.tls_cert)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(cfg.tls_key)
        ctx.load_cert_chain(cert, key)
    return ctx


def _grow_buffers(transport: asyncio.DatagramTransport, size: int = 8 << 20) -> None:
    """Larger socket buffers absorb bursts; the kernel caps them at rmem_max/wmem_max unless
    we may force them (CAP_NET_ADMIN)."""
    sock = transport.get_extra_info("socket")
    for force, plain in ((33, socket.SO_RCVBUF), (32, socket.SO_SNDBUF)):  # SO_*BUFFORCE
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, size)
        except OSError:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, plain, size)


def run_node(cfg: NodeConfig) -> None:
    async def main() -> None:
        await NodeRuntime(cfg).run()

    factory = loop_factory(tls=cfg.transport == "tls" or cfg.mgmt_tls)
    print(f"node {cfg.name}: event loop {'uvloop' if factory else 'asyncio'}", file=sys.stderr,
          flush=True)
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())
