"""The asyncio node runtime: real UDP, real time, one process per emulated host.

The workload starts at the configured true time, runs for the configured duration, the node
keeps serving for the drain period, then flushes its delivery log and exits. SIGTERM and SIGINT
end it early, log flushed. A duration of 0 keeps it serving until it is told to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from nodes.config import NodeConfig, PathConfig
from nodes.core import NodeCore, Output
from nodes.linkmodel import LinkModel
from nodes.management.mbeans import MBean
from nodes.management.node_mbeans import build_node_registry
from nodes.management.server import ManagementServer
from nodes.workload import intervals, workload_rng


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
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.transport: asyncio.DatagramTransport | None = None
        self.done = asyncio.Event()
        self.send_errors = 0
        self._gaps: Iterator[int] | None = None
        self._next_planned = cfg.start_at_ns

    async def run(self) -> None:
        me = self.addrs[self.cfg.node_id]
        transport, _ = await self.loop.create_datagram_endpoint(
            lambda: _Protocol(self), local_addr=me)
        self.transport = transport
        _grow_buffers(transport)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.done.set)
        server = await self._start_management()
        self._apply(self.core.start(time.time_ns()))
        if self.cfg.workload.send and self.cfg.workload.rate > 0:
            self._gaps = intervals(self.cfg.workload, workload_rng(self.cfg.seed,
                                                                   self.cfg.node_id))
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
        if server is not None:
            await server.stop()
        self.core.stop(time.time_ns())
        transport.close()

    async def _start_management(self) -> ManagementServer | None:
        if self.cfg.control_port is None:
            return None
        registry = build_node_registry(self.core, on_stop=self.done.set)
        registry.register(self._paths_mbean())
        server = ManagementServer(registry, self.cfg.control_host, self.cfg.control_port,
                                  self.cfg.mgmt_token)
        await server.start()
        # The orchestrator learns the port (possibly chosen by the kernel) from this file.
        where = Path(self.cfg.log_path).parent / "control.json"
        where.write_text(json.dumps({"host": self.cfg.control_host, "port": server.port}))
        return server

    # -- events in ----------------------------------------------------------------------------
    def on_datagram(self, data: bytes) -> None:
        self._apply(self.core.receive(data, time.time_ns()))

    def _broadcast(self) -> None:
        t = time.time_ns()
        if self.cfg.duration_ns and t >= self.cfg.start_at_ns + self.cfg.duration_ns:
            return
        self._apply(self.core.broadcast(t))
        assert self._gaps is not None
        # Schedule from the planned time, not from now, so the rate does not sag under load.
        self._next_planned += next(self._gaps)
        self._at_true(max(self._next_planned, t), self._broadcast)

    def _fire(self, key: str) -> None:
        self.timers.pop(key, None)
        self._apply(self.core.timer(key, time.time_ns()))

    # -- actions out --------------------------------------------------------------------------
    def _apply(self, out: Output) -> None:
        for key, delay in out.timers:
            old = self.timers.pop(key, None)
            if old is not None:
                old.cancel()
            if delay <= 0:
                self.timers[key] = self.loop.call_soon(self._fire, key)  # type: ignore[assignment]
            else:
                self.timers[key] = self.loop.call_later(delay / 1e9, self._fire, key)
        blocked = self.core.blocked_out
        for dst, data, _ in out.sends:
            for d in self.others if dst is None else (dst,):
                if d not in blocked:
                    self._send(d, data)

    def _send(self, dst: int, data: bytes) -> None:
        assert self.transport is not None
        c = self.core.counters
        c.datagrams_out += 1
        c.bytes_out += len(data)
        link = self.links.get(dst)
        if link is None:
            self.transport.sendto(data, self.addrs[dst])
            return
        delay = link.transit(time.time_ns(), len(data))
        if delay is None:
            return
        if delay == 0:
            self.transport.sendto(data, self.addrs[dst])
        else:
            self.loop.call_later(delay / 1e9, self.transport.sendto, data, self.addrs[dst])

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
            return {self.core.names[d]: {"delay_ms": m.path.delay_ns / 1e6,
                                         "jitter_ms": m.path.jitter_ns / 1e6,
                                         "loss_pct": m.path.loss * 100}
                    for d, m in self.links.items()}

        return (MBean("testbed:type=Paths", "Per-destination path emulation (inprocess)")
                .attribute("Paths", "dict", current)
                .operation("setPath", set_path, [("peer", "str"), ("delayMs", "float"),
                                                 ("jitterMs", "float"), ("lossPct", "float")],
                           None, "change the path to a peer")
                .operation("reset", reset, [("peer", "str")], None, "restore the planned path"))

    def _at_true(self, true_ns: int, fn: object) -> None:
        self.loop.call_later(max(0.0, (true_ns - time.time_ns()) / 1e9), fn)  # type: ignore


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

    asyncio.run(main())
