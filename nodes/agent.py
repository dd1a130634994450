"""The host agent: runs a user's node program that speaks Maelstrom's protocol on one emulated
host (docs/maelstrom.md). `python -m nodes --config node.json` starts it instead of a protocol
node when the config has a `maelstrom` section, so every backend starts it the way it starts
nodes.

The agent
- spawns the program (stderr to the host's node.log; it dies with the agent: a `kill` fault
  SIGKILLs both, the restart starts a fresh program with a fresh `init`),
- sends `init` (`node_id`, `node_ids`: n0..n(N-1) or the names given) and, for broadcast
  workloads, `topology`,
- carries node-to-node messages over the data plane: UDP datagrams from the host's data
  address, a message larger than one datagram in fragments (nodes/maelstrom.py), shaped by
  the in-process link model where the backend asks for it and cut by partitions,
- acts as the workload's clients c1, c2, ... placed on this host, and logs every client
  operation (`ev=op`: invoke, ok, fail, info with their values) and every node-to-node message
  (`ev=nsend` / `ev=nrecv`) to events.jsonl,
- on the first node's host, keeps Maelstrom's services (nodes/maelstrom_services.py): every
  agent sends a request to `lin-kv`, `seq-kv`, `lww-kv` or `lin-tso` over the data plane to
  that host, whose agent answers the same way,
- counts and logs (`ev=malformed`) every line of the program that is not a JSON object with a
  `dest` and a `body`, or longer than 1 MiB, and (`ev=unknown-dest`) every message to a
  destination that does not exist, answering a request with error 1 (node-not-found);
  nothing the program writes or the network delivers raises out of a callback.
The management endpoint serves `testbed:type=Node` (`Progress`, `stop`, for the drain),
`testbed:type=Network` (`block`, `heal`: partitions on the local backend) and
`testbed:type=Agent` (counters; `pause` and `resume` the program)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import random
import signal
import sys
import time
import traceback
from collections import Counter, deque
from pathlib import Path
from typing import Any

from nodes.config import NodeConfig
from nodes.eventlog import EventLog
from nodes.linkmodel import LinkModel
from nodes.loop import loop_factory
from nodes.maelstrom import (
    CLIENT_TIMEOUT_NS,
    CONTROL_CLIENT,
    FINAL_POLL_S,
    KEY_COUNT,
    MAX_LINE,
    MAX_TXN_LENGTH,
    MAX_WRITES_PER_KEY,
    TXN_KEY_COUNT,
    TXN_WRITES,
    Generator,
    Op,
    Reassembly,
    completion,
    fragments,
    idempotent,
    node_names,
)
from nodes.maelstrom_services import SERVICES, Services
from nodes.management.mbeans import MBean, MBeanRegistry
from nodes.management.server import ManagementServer
from nodes.runtime import _grow_buffers

READ_CHUNK = 1 << 16
INIT_TIMEOUT_S = 10.0
MALFORMED_LOGGED = 1000  # lines logged in full; beyond, only counted
STDIN_HIGH_WATER = 64 << 20  # bytes queued to a program that does not read: then dropped
FRAGMENT_BURST = 64  # datagrams of one message sent back to back
STDERR_TAIL = 20  # the program's last stderr lines `testbed:type=Agent` shows
MAX_STDERR_LINE = 1000
SERVICE_NAMES = tuple(f'"{n}"'.encode() for n in SERVICES)  # a cheap test before parsing
FINAL_PAUSE_S = 0.2  # between a client's final reads (kafka's polls; Maelstrom's stagger)
HELD_MAX = 10_000  # node messages kept for a program that has not answered init yet
# libfaketime (Debian's `libfaketime`), preloaded into the program for the clock nemesis.
FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                 "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                 "/usr/lib/faketime/libfaketime.so.1", "/usr/local/lib/faketime/libfaketime.so.1")


def libfaketime() -> str | None:
    """Where libfaketime is on this host (None: not installed)."""
    return next((p for p in FAKETIME_LIBS if os.path.exists(p)), None)


def faketime_offset(ms: float) -> str:
    """libfaketime's relative offset (`FAKETIME_TIMESTAMP_FILE`) for a skew of `ms`."""
    return f"{'+' if ms >= 0 else '-'}{abs(ms) / 1000:.3f}s"


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the agent dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, agent: Agent):
        self.agent = agent

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.agent.on_datagram(data, addr)

    def error_received(self, exc: Exception) -> None:
        self.agent.counters["send_errors"] += 1


class Agent:
    def __init__(self, cfg: NodeConfig):
        self.cfg = cfg
        m = cfg.maelstrom
        self.argv: list[str] = [str(a) for a in m["program"]]
        self.workload: str = str(m["workload"])
        self.clients: list[str] = [str(c) for c in m.get("clients", [])]
        self.rate = float(m.get("rate", 0.0))  # this host's operations per second
        self.topology: dict[str, list[str]] | None = m.get("topology")
        self.settle_ns = int(m.get("settle_ns", cfg.drain_ns))
        self.loop = asyncio.get_running_loop()
        given = [str(x) for x in m.get("names") or node_names(len(cfg.members))]
        self.names = {mem.id: given[k] for k, mem in enumerate(sorted(
            cfg.members, key=lambda mem: mem.id))}
        self.me = self.names[cfg.node_id]
        # Maelstrom's services live in the agent of the first node (docs/maelstrom.md): a
        # request crosses the emulated network to that host and its reply comes back.
        self.service_host = self.names[min(self.names)]
        self.services = Services(f"{cfg.seed}:services") if self.me == self.service_host \
            else None
        self.service_in: Counter[str] = Counter()
        self.ids = {v: k for k, v in self.names.items()}
        self.addrs = {self.names[mem.id]: (mem.host, mem.port) for mem in cfg.members}
        self.by_addr = {a: n for n, a in self.addrs.items()}
        rng = random.Random(f"{cfg.seed}:{cfg.node_id}:links")
        self.links = {self.names[d]: LinkModel(p, rng) for d, p in cfg.paths.items()}
        self.fifo_at: dict[str, float] = {}
        self.log = EventLog(Path(cfg.log_path), cfg.name, "maelstrom", buffer_lines=256)
        self.counters: Counter[str] = Counter()
        self.in_types: Counter[str] = Counter()
        self.out_types: Counter[str] = Counter()
        self.blocked_out: set[str] = set()
        self.blocked_in: set[str] = set()
        self.reassembly = Reassembly()
        self.number = 0
        self.transport: asyncio.DatagramTransport | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.waiting: dict[tuple[str, int], asyncio.Future[dict[str, Any]]] = {}
        self.msg_ids: Counter[str] = Counter()
        self.done = asyncio.Event()
        self.finished = False  # final reads answered (or given up): the drain may stop us
        # Node-to-node messages that arrive before the program answered `init` wait here
        # (a program must know its name before it hears from its peers).
        self.initialised = False
        self.held: list[tuple[str, bytes]] = []
        self.paused = False
        self.down = False  # killed by the kill nemesis, not started again yet
        self.expected_exit: asyncio.subprocess.Process | None = None
        self.reader: asyncio.Task[None] | None = None
        self.stderr_reader: asyncio.Task[None] | None = None
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self._stderr_partial = b""
        self.restarting: asyncio.Task[None] | None = None
        # The clock nemesis: the program's wall clock through libfaketime, its offset in a
        # file the preloaded library reads at every call (monotonic clocks are not skewed).
        self.clock = bool(m.get("clock"))
        self.faketime = libfaketime() if self.clock else None
        self.skew_ms = 0.0
        self.skew_file = Path(cfg.log_path).parent / "faketime.rc"
        host_index = cfg.node_id
        self.gen = Generator(self.workload, host_index, len(cfg.members), cfg.incarnation,
                             random.Random(f"{cfg.seed}:{cfg.node_id}:{cfg.incarnation}:ops"),
                             key_count=int(m.get("key_count") or (
                                 TXN_KEY_COUNT if self.workload in TXN_WRITES
                                 else KEY_COUNT)),
                             max_writes_per_key=int(m.get("max_writes_per_key")
                                                    or MAX_WRITES_PER_KEY),
                             max_txn_length=int(m.get("max_txn_length") or MAX_TXN_LENGTH))

    # -- lifecycle ----------------------------------------------------------------------------
    def now(self) -> int:
        return time.time_ns()

    def event(self, ev: str, durable: bool = True, **fields: Any) -> None:
        """One events.jsonl line. Durable lines reach the file at once: the clients live in
        the agent, and a `kill` SIGKILLs it, so their history must survive that (Maelstrom's
        clients never die). Node-message lines (statistics) wait for the next durable line
        or a full buffer."""
        t = self.now()
        self.log.write(t, t, ev, **fields)
        if durable:
            self.log.flush()

    async def run(self) -> None:
        self.transport, _ = await self.loop.create_datagram_endpoint(
            lambda: _Datagrams(self), local_addr=self.addrs[self.me])
        _grow_buffers(self.transport)  # a fragmented message arrives as one burst
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.done.set)
        self.loop.set_exception_handler(self._loop_exception)
        server = await self._start_management()
        self.event("start", incarnation=self.cfg.incarnation, node_id=self.me, program=self.argv,
                   workload=self.workload, clients=self.clients,
                   **self._clock_fields())
        tasks: list[asyncio.Task[Any]] = []
        if await self._spawn():
            tasks.append(asyncio.create_task(self._drive()))
        if self.cfg.duration_ns > 0:
            self.loop.call_later(max(0.0, (self.cfg.end_ns - self.now()) / 1e9), self.done.set)
        await self.done.wait()
        tasks += [t for t in (self.reader, self.stderr_reader, self.restarting)
                  if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._stop_program()
        self.event("stop", counters=dict(self.counters), msgs_in=dict(self.in_types),
                   msgs_out=dict(self.out_types), services=dict(self.service_in))
        self.log.close()
        if server is not None:
            await server.stop()
        if self.transport is not None:
            self.transport.close()

    async def _spawn(self) -> bool:
        """Start the program and the reader of its output; False when it cannot start."""
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, preexec_fn=_die_with_parent, env=self._env())
        except OSError as exc:
            self.counters["spawn_errors"] += 1
            self.event("program-exit", code=None, error=f"{type(exc).__name__}: {exc}"[:300])
            print(f"agent {self.me}: cannot start {self.argv}: {exc}", file=sys.stderr)
            return False
        self.reader = asyncio.create_task(self._read_program(self.proc))
        self.stderr_reader = asyncio.create_task(self._read_stderr(self.proc))
        return True

    def _clock_fields(self) -> dict[str, Any]:
        """For the `start` line of a run with clock faults: where libfaketime is (or None)."""
        return {"faketime": self.faketime} if self.clock else {}

    def _env(self) -> dict[str, str] | None:
        """The program's environment: this one, with libfaketime preloaded when the run has
        clock faults (the offset file is written before the program starts)."""
        if self.faketime is None:
            return None
        self.skew_file.write_text(faketime_offset(self.skew_ms) + "\n")
        env = dict(os.environ)
        env["LD_PRELOAD"] = " ".join(x for x in (self.faketime, env.get("LD_PRELOAD")) if x)
        env.update(FAKETIME_TIMESTAMP_FILE=str(self.skew_file), FAKETIME_NO_CACHE="1",
                   DONT_FAKE_MONOTONIC="1")
        return env

    def skew(self, offset_ms: float) -> str:
        """The clock nemesis: the program's wall clock runs `offset_ms` off from now on (0:
        back to true time). Through libfaketime, so a program that reads the time without
        libc (Go's runtime) is not skewed."""
        if self.faketime is None:
            self.event("clock", offset_ms=offset_ms, faked=False,
                       why="no clock faults in the run" if not self.clock
                       else "libfaketime is not installed")
            return "not skewed: libfaketime " + ("not preloaded" if not self.clock
                                                 else "not installed")
        self.skew_ms = float(offset_ms)
        tmp = self.skew_file.with_suffix(".tmp")
        tmp.write_text(faketime_offset(self.skew_ms) + "\n")
        tmp.replace(self.skew_file)  # the library never reads half a line
        self.counters["skews"] += 1
        self.event("clock", offset_ms=self.skew_ms, faked=True)
        return f"skewed {faketime_offset(self.skew_ms)}"

    async def _read_stderr(self, proc: asyncio.subprocess.Process) -> None:
        """The program's stderr into node.log, its last lines kept for `testbed:type=Agent`
        `StderrTail`."""
        assert proc.stderr is not None
        out = sys.stderr.buffer
        while True:
            chunk = await proc.stderr.read(READ_CHUNK)
            if not chunk:
                return
            out.write(chunk)
            out.flush()
            lines = (self._stderr_partial + chunk).split(b"\n")
            self._stderr_partial = lines.pop()[-MAX_STDERR_LINE:]
            for line in lines:
                self.stderr_tail.append(line[:MAX_STDERR_LINE].decode("utf-8", "replace"))

    # -- the kill nemesis: the program dies and comes back, the clients live on -------------
    def kill_program(self) -> str:
        """SIGKILL the program; it stays down until `start_program`. Requests in flight
        complete as `info` (error 13, crash), peers' messages to it are dropped."""
        proc = self.proc
        if proc is None or proc.returncode is not None or self.down:
            return "not running"
        self.down = True
        self.expected_exit = proc
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        self.paused = False
        for (client, _), fut in list(self.waiting.items()):
            if client != CONTROL_CLIENT and not fut.done():
                fut.set_result({"type": "error", "code": 13, "text": "node killed"})
        self.counters["kills"] += 1
        self.event("kill")
        return "killed"

    def start_program(self) -> str:
        """Start the killed program again, with a fresh `init` (and `topology`)."""
        if not self.down or self.restarting is not None:
            return "not down"
        self.restarting = asyncio.create_task(self._restart())
        return "starting"

    async def _restart(self) -> None:
        try:
            self.initialised = False
            if await self._spawn():
                self.down = False
                self.counters["restarts"] += 1
                self.event("restart")
                await self._handshake()
        except Exception as exc:
            self._error("restart", exc)
        finally:
            self.restarting = None

    async def _stop_program(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        if self.paused:  # a stopped program would not see SIGTERM
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 1.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    async def _drive(self) -> None:
        """init, topology, the clients until the workload's end, the final read."""
        try:
            await self._handshake()
            start, end = self._window()
            await asyncio.sleep(max(0.0, (start - self.now()) / 1e9))
            if self.clients and self.rate > 0 and self.now() >= end:
                # Up only after the workload's end and its cap (a machine loaded far beyond
                # its cores): its clients made no operation, which the checker must not take
                # for valid.
                self.event("late", by_ms=round((self.now() - self.cfg.start_at_ns) / 1e6, 1))
            if self.clients and self.rate > 0:
                per_client = len(self.clients) / self.rate
                await asyncio.gather(*(self._client(c, end, per_client) for c in self.clients))
            await asyncio.sleep(max(0.0, (end + self.settle_ns - self.now()) / 1e9))
            # every client reads once more (Maelstrom: each thread), kafka's until caught up
            await asyncio.gather(*(self._final(c) for c in (self.clients or [CONTROL_CLIENT])))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._error("drive", exc)
        self.finished = True

    def _window(self) -> tuple[int, int]:
        """When this node's clients start and stop. As in Maelstrom, the workload's time
        begins once the node is initialised: a node up after the planned start (a loaded
        machine) still gets its `duration` of operations, within the node's cap less the
        settle and the final reads."""
        planned = self.cfg.start_at_ns
        start = max(planned, self.now())
        if start > planned:
            self.event("shifted", by_ms=round((start - planned) / 1e6, 1))
        latest = self.cfg.end_ns - self.settle_ns - int(FINAL_POLL_S * 1e9)
        end = max(planned + self.cfg.duration_ns, min(start + self.cfg.duration_ns, latest))
        return start, end

    async def _final(self, client: str) -> None:
        """The client's final reads: as many as the generator gives, within FINAL_POLL_S."""
        deadline = self.now() + int(FINAL_POLL_S * 1e9)
        op = self.gen.final(client)
        while op is not None:
            await self._operation(client, op, final=True)
            if self.now() >= deadline:
                return
            op = self.gen.final(client)
            if op is not None:
                await asyncio.sleep(FINAL_PAUSE_S)

    async def _handshake(self) -> None:
        names = [self.names[i] for i in sorted(self.names)]
        body = {"type": "init", "node_id": self.me, "node_ids": names}
        reply = await self._request(CONTROL_CLIENT, body, INIT_TIMEOUT_S)
        ok = reply is not None and reply.get("type") == "init_ok"
        why: dict[str, Any] = {} if ok else {"reply": str(reply)[:200]}
        self.event("init", ok=ok, node_ids=names, **why)
        self.initialised = True
        held, self.held = self.held, []
        for src, line in held:
            self._deliver(src, line)
        if self.topology is not None:
            reply = await self._request(CONTROL_CLIENT, {"type": "topology",
                                                         "topology": self.topology},
                                        INIT_TIMEOUT_S)
            self.event("topology", ok=reply is not None and reply.get("type") == "topology_ok",
                       neighbours=self.topology.get(self.me, []))

    async def _client(self, client: str, end: int, period_s: float) -> None:
        rng = random.Random(f"{self.cfg.seed}:{client}:{self.cfg.incarnation}")
        await asyncio.sleep(rng.uniform(0, period_s))  # stagger the clients
        while self.now() < end:
            began = self.now()
            await self._operation(client, self.gen.next(client))
            spent = (self.now() - began) / 1e9
            await asyncio.sleep(max(0.0, rng.expovariate(1 / period_s) - spent))

    async def _operation(self, client: str, op: Op, final: bool = False) -> None:
        extra: dict[str, Any] = {"final": True} if final else {}
        self.event("op", client=client, type="invoke", f=op.f, value=op.value, **extra)
        self.counters["ops"] += 1
        reply = await self._request(client, dict(op.body), CLIENT_TIMEOUT_NS / 1e9)
        if reply is None:
            kind, value, note = ("fail" if idempotent(op) else "info"), op.value, "timeout"
        else:
            kind, value, note = completion(op, reply, self.workload)
        self.gen.observe(client, op, kind, value)
        self.counters[f"ops_{kind}"] += 1
        more: dict[str, Any] = {"error": note} if note else {}
        self.event("op", client=client, type=kind, f=op.f, value=value, **more, **extra)

    async def _request(self, client: str, body: dict[str, Any],
                       timeout_s: float) -> dict[str, Any] | None:
        if self.down and client != CONTROL_CLIENT:
            return {"type": "error", "code": 13, "text": "node down"}  # info, at once
        self.msg_ids[client] += 1
        msg_id = self.msg_ids[client]
        body["msg_id"] = msg_id
        fut: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self.waiting[(client, msg_id)] = fut
        self._to_program({"src": client, "dest": self.me, "body": body})
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return None
        finally:
            self.waiting.pop((client, msg_id), None)

    # -- the program's output -----------------------------------------------------------------
    async def _read_program(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        buf = bytearray()
        skipping = False  # inside a line already found too long
        while True:
            chunk = await proc.stdout.read(READ_CHUNK)
            if not chunk:
                break
            buf += chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    if len(buf) > MAX_LINE:
                        if not skipping:
                            self._malformed("line over 1 MiB", bytes(buf[:200]))
                        skipping = True
                        buf.clear()
                    break
                line = bytes(buf[:nl])
                del buf[:nl + 1]
                if skipping:
                    skipping = False
                    continue
                if len(line) > MAX_LINE:
                    self._malformed("line over 1 MiB", line[:200])
                    continue
                try:
                    self._from_program(line)
                except Exception as exc:
                    self._error("program output", exc)
        code = await proc.wait()
        if proc is self.expected_exit:  # the kill nemesis: not the program's crash
            self.event("killed", code=code)
            return
        self.counters["program_exits"] += 1
        self.event("program-exit", code=code)
        print(f"agent {self.me}: program exited with {code}", file=sys.stderr, flush=True)

    def _malformed(self, reason: str, line: bytes) -> None:
        self.counters["malformed"] += 1
        if self.counters["malformed"] <= MALFORMED_LOGGED:
            self.event("malformed", reason=reason, line=line[:200].decode("utf-8", "replace"))

    def _from_program(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            msg = json.loads(line)
        except ValueError:
            self._malformed("not JSON", line)
            return
        if not isinstance(msg, dict):
            self._malformed("not a JSON object", line)
            return
        dest, body = msg.get("dest"), msg.get("body")
        if not isinstance(dest, str):
            self._malformed("no dest", line)
            return
        if not isinstance(body, dict):
            self._malformed("no body", line)
            return
        if dest in self.addrs:
            self._send_node(dest, msg, line)
            return
        if dest in SERVICES:  # across the network to the service host, like a node message
            self._send_node(dest, msg, line, via=self.service_host)
            return
        if dest == CONTROL_CLIENT or dest in self.clients:
            reply_to = body.get("in_reply_to")
            fut = self.waiting.get((dest, reply_to)) if isinstance(reply_to, int) else None
            if fut is None or fut.done():
                self.counters["stray_replies"] += 1
                return
            fut.set_result(body)
            return
        self._unknown_dest(dest, body)

    def _unknown_dest(self, dest: str, body: dict[str, Any]) -> None:
        """A message to a node, service or client that does not exist: counted, logged, and
        a request answered with error 1 (node-not-found), as Maelstrom's network does."""
        self.counters["unknown_dest"] += 1
        msg_id = _int(body.get("msg_id"))
        if self.counters["unknown_dest"] <= MALFORMED_LOGGED:
            self.event("unknown-dest", dest=dest[:100], type=str(body.get("type"))[:64],
                       msg_id=msg_id)
        if msg_id is not None and body.get("type") != "error":
            self._to_program({"src": dest, "dest": self.me, "body": {
                "type": "error", "in_reply_to": msg_id, "code": 1,
                "text": f"node {dest[:100]} does not exist"}})

    def _to_program(self, msg: dict[str, Any] | bytes) -> None:
        proc = self.proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            self.counters["to_dead_program"] += 1
            return
        data = msg if isinstance(msg, bytes) else json.dumps(msg).encode()
        transport = proc.stdin.transport
        if transport.is_closing():
            self.counters["to_dead_program"] += 1
            return
        if transport.get_write_buffer_size() > STDIN_HIGH_WATER:  # type: ignore[attr-defined]
            self.counters["stdin_overflow"] += 1
            return
        proc.stdin.write(data + b"\n")

    # -- node to node -------------------------------------------------------------------------
    def _send_node(self, dest: str, msg: dict[str, Any], line: bytes,
                   via: str | None = None) -> None:
        """Send to node `dest` over the data plane, through host `via` when `dest` is a
        service that host keeps."""
        body = msg["body"]
        mtype = str(body.get("type"))[:64]
        self.out_types[mtype] += 1
        self.event("nsend", durable=False, src=self.me, dest=dest, type=mtype,
                   msg_id=_int(body.get("msg_id")), in_reply_to=_int(body.get("in_reply_to")),
                   size=len(line))
        if msg.get("src") != self.me:
            # The agent stamps the true sender: a program cannot speak for another node.
            msg = {**msg, "src": self.me}
            line = json.dumps(msg).encode()
        self._transmit(via or dest, line)

    def _transmit(self, host: str, line: bytes) -> None:
        """A message's line to the agent of `host` as datagrams (to ourselves at once)."""
        if host == self.me:
            self._arrived(self.me, line)
            return
        if host in self.blocked_out:
            self.counters["blocked_out"] += 1
            return
        self.number += 1
        frags = fragments(self.number, line)
        for k in range(0, len(frags), FRAGMENT_BURST):
            # A large message leaves in bursts a millisecond apart, so that it does not
            # overflow the receiver's socket buffer at once.
            burst = frags[k:k + FRAGMENT_BURST]
            if k == 0:
                self._send_burst(host, burst)
            else:
                self.loop.call_later(k // FRAGMENT_BURST * 1e-3, self._send_burst, host, burst)

    def _send_burst(self, dest: str, frags: list[bytes]) -> None:
        if dest in self.blocked_out:  # a partition that began while the message left
            self.counters["blocked_out"] += 1
            return
        for frag in frags:
            self._send_datagram(dest, frag)

    def _send_datagram(self, dest: str, data: bytes) -> None:
        link = self.links.get(dest)
        if link is None:
            self._emit(dest, data)
            return
        delay = link.transit(self.now(), len(data))
        if link.dup_ns is not None:
            self._later(link, dest, data, link.dup_ns)
        if delay is not None:
            self._later(link, dest, data, delay)

    def _later(self, link: LinkModel, dest: str, data: bytes, delay_ns: int) -> None:
        when = self.loop.time() + delay_ns / 1e9
        if link.path.fifo:
            when = max(when, self.fifo_at.get(dest, 0.0) + 1e-6)
            self.fifo_at[dest] = when
        if delay_ns <= 0 and not link.path.fifo:
            self._emit(dest, data)
        else:
            self.loop.call_at(when, self._emit, dest, data)

    def _emit(self, dest: str, data: bytes) -> None:
        t = self.transport
        if t is not None and not t.is_closing():
            t.sendto(data, self.addrs[dest])

    def on_datagram(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            src = self.by_addr.get((addr[0], addr[1]))
            if src is None:
                self.counters["unknown_source"] += 1
                return
            if src in self.blocked_in:
                self.counters["blocked_in"] += 1
                return
            try:
                line = self.reassembly.add(src, data, self.now())
            except ValueError:
                self.counters["bad_datagrams"] += 1
                return
            if line is not None:
                self._arrived(src, line)
        except Exception as exc:
            self._error("datagram", exc)

    def _arrived(self, src: str, line: bytes) -> None:
        """A whole message from host `src`: a request to a service this agent keeps is
        served; anything else goes to the program (held until it answered `init`)."""
        if self.services is not None and any(n in line for n in SERVICE_NAMES):
            try:
                msg = json.loads(line)
                dest = msg["dest"]
            except (ValueError, KeyError, TypeError):
                dest = None
            if isinstance(dest, str) and dest in SERVICES:
                self._serve(src, dest, msg, len(line))
                return
        if self.initialised:
            self._deliver(src, line)
        elif len(self.held) < HELD_MAX:
            self.held.append((src, line))
        else:
            self.counters["dropped_before_init"] += 1

    def _serve(self, src: str, service: str, msg: dict[str, Any], size: int) -> None:
        """One service request from node `src` (the sending agent stamped `src`); the reply
        goes back over the data plane like any node message."""
        assert self.services is not None
        body = msg.get("body")
        if not isinstance(body, dict):
            self.counters["bad_messages"] += 1
            return
        mtype = str(body.get("type"))[:64]
        self.service_in[f"{service} {mtype}"] += 1
        self.event("nrecv", durable=False, src=src, dest=service, type=mtype,
                   msg_id=_int(body.get("msg_id")), in_reply_to=_int(body.get("in_reply_to")),
                   size=size)
        if _int(body.get("in_reply_to")) is not None or mtype == "error":
            return  # a reply to a service: services make no requests
        reply = self.services.handle(service, src, body)
        out = {"src": service, "dest": src, "body": reply}
        line = json.dumps(out).encode()
        rtype = str(reply["type"])
        self.service_in[f"{service} {rtype}"] += 1
        self.event("nsend", durable=False, src=service, dest=src, type=rtype, msg_id=None,
                   in_reply_to=_int(reply.get("in_reply_to")), size=len(line))
        self._transmit(src, line)

    def _deliver(self, src: str, line: bytes) -> None:
        try:
            msg = json.loads(line)
            body = msg["body"]
            mtype = str(body.get("type"))[:64]
        except (ValueError, KeyError, TypeError, AttributeError):
            self.counters["bad_messages"] += 1
            return
        if msg.get("src") in SERVICES:  # a service's reply, by way of the service host
            src = str(msg["src"])
        self.in_types[mtype] += 1
        self.event("nrecv", durable=False, src=src, dest=self.me, type=mtype,
                   msg_id=_int(body.get("msg_id")), in_reply_to=_int(body.get("in_reply_to")),
                   size=len(line))
        self._to_program(line)

    # -- management ---------------------------------------------------------------------------
    async def _start_management(self) -> ManagementServer | None:
        cfg = self.cfg
        if cfg.control_port is None:
            return None
        registry = MBeanRegistry()
        hosts = [m.name for m in cfg.members]
        registry.register(
            MBean("testbed:type=Node", "A host agent running a Maelstrom node program")
            .attribute("Name", "str", lambda: cfg.name)
            .attribute("Id", "int", lambda: cfg.node_id)
            .attribute("Protocol", "str", lambda: "maelstrom")
            # The drain waits for every agent's final read: until then one own message is
            # "in flight" (nodes/quiescence.py counts sent against delivered).
            .attribute("Progress", "dict", lambda: {
                "sent": 1, "delivered": {h: 1 for h in hosts} if self.finished else {}})
            .operation("stop", lambda: self.loop.call_later(0.05, self.done.set), [], None,
                       "end the agent and its program now (log flushed)"))

        def block(to: list[str], from_: list[str]) -> list[str]:
            self.blocked_out |= {self._node_of(h) for h in to}
            self.blocked_in |= {self._node_of(h) for h in from_}
            self.event("net", blocked_to=sorted(self.blocked_out),
                       blocked_from=sorted(self.blocked_in))
            return sorted(self.blocked_out | self.blocked_in)

        def heal() -> None:
            self.blocked_out.clear()
            self.blocked_in.clear()
            self.event("net", blocked_to=[], blocked_from=[])

        registry.register(
            MBean("testbed:type=Network", "Agent-side data-plane filters (partitions)")
            .attribute("BlockedTo", "list", lambda: sorted(self.blocked_out))
            .attribute("BlockedFrom", "list", lambda: sorted(self.blocked_in))
            .operation("block", block, [("to", "list"), ("from", "list")], "list",
                       "drop messages to and from these hosts")
            .operation("heal", heal, [], None, "remove every filter"))
        registry.register(
            MBean("testbed:type=FailureDetector", "none: the program has its own")
            .attribute("SuspectedMembers", "list", lambda: []))
        registry.register(
            MBean("testbed:type=Agent", "The host agent of a Maelstrom node program")
            .attribute("Counters", "dict", lambda: dict(self.counters))
            .attribute("MessagesIn", "dict", lambda: dict(self.in_types))
            .attribute("MessagesOut", "dict", lambda: dict(self.out_types))
            .attribute("Incarnation", "int", lambda: cfg.incarnation)
            .attribute("Paused", "bool", lambda: self.paused)
            .attribute("StderrTail", "list", lambda: list(self.stderr_tail),
                       description="the program's last stderr lines")
            .operation("pause", lambda: self._signal(signal.SIGSTOP), [], "str",
                       "SIGSTOP the program (the agent keeps its clients and the network)")
            .operation("resume", lambda: self._signal(signal.SIGCONT), [], "str",
                       "SIGCONT the program")
            .operation("kill", self.kill_program, [], "str",
                       "SIGKILL the program; it stays down until `start`")
            .operation("start", self.start_program, [], "str",
                       "start the killed program again with a fresh init")
            .attribute("ClockSkewMs", "float", lambda: self.skew_ms)
            .operation("skew", self.skew, [("offsetMs", "float")], "str",
                       "run the program's wall clock offsetMs off (libfaketime; 0: true time)"))
        server = ManagementServer(registry, cfg.control_host, cfg.control_port, cfg.mgmt_token,
                                  basic=cfg.mgmt_basic)
        await server.start()
        where = Path(cfg.log_path).parent / "control.json"
        where.write_text(json.dumps({"host": cfg.control_host, "port": server.port,
                                     "scheme": "http"}))
        return server

    def _signal(self, sig: signal.Signals) -> str:
        """Pause or resume the program (the `pause` nemesis): its clients keep running in
        the agent and see their requests time out, as Maelstrom's do."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return "no program"
        os.kill(proc.pid, sig)
        self.paused = sig == signal.SIGSTOP
        self.counters["pauses" if self.paused else "resumes"] += 1
        self.event("pause" if self.paused else "resume")
        return "paused" if self.paused else "running"

    def _node_of(self, host: str) -> str:
        """A testbed host name (the topology's) to its Maelstrom node name."""
        for m in self.cfg.members:
            if m.name == host:
                return self.names[m.id]
        return host

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError):  # a pipe to a program that died: the program's doing
            self.counters["io_errors"] += 1
        elif isinstance(exc, Exception):
            self._error(f"asyncio: {context.get('message', '')}", exc)
        else:
            loop.default_exception_handler(context)

    def _error(self, where: str, exc: Exception) -> None:
        self.counters["errors"] += 1
        print(f"agent {self.me}: exception in {where}:", file=sys.stderr)
        traceback.print_exception(exc, file=sys.stderr)
        sys.stderr.flush()
        self.event("error", where=where, error=f"{type(exc).__name__}: {exc}"[:500])


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def run_agent(cfg: NodeConfig) -> None:
    async def main() -> None:
        await Agent(cfg).run()

    factory = loop_factory(tls=False)
    print(f"agent {cfg.name}: program {cfg.maelstrom.get('program')}, event loop "
          f"{'uvloop' if factory else 'asyncio'}", file=sys.stderr, flush=True)
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())
