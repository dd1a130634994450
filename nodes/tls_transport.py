"""The `tls` transport: node traffic over TCP + TLS 1.3 with mutual authentication (GORDA D3.5
section 4.4: "a transport that uses SSL", keys and certificates from the certificate utility,
testbed/certs.py).

Each node listens on its data address (TCP instead of UDP) and opens one connection to every
peer it sends to. Both ends present a certificate from the run's CA and verify the other's:
the client checks that the server's certificate names the peer it dialled, the server maps
the client's certificate (its common name) to a member, and a datagram whose header claims
another sender than the authenticated peer is refused (`rejected:peer`; RELAYED copies, which
keep their origin's header, excepted). Frames are a 4-byte
big-endian length and the unchanged wire datagram, so protocols do not change at all.

Changed semantics (docs/security.md): TCP makes each channel reliable and FIFO, so loss
applied below the node (netem) becomes delay; the protocols' NACK repair just never fires.
Loss the node applies itself (the `inprocess` shaper, above the transport) still drops. A
peer that is down (crashed) is redialled with backoff; what is sent meanwhile waits in a
bounded buffer (`PENDING_BYTES`) and is dropped beyond it, like a full socket buffer.
The stdlib has no DTLS, so there is no TLS over UDP.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import struct
import tempfile
from collections import deque
from collections.abc import Callable
from pathlib import Path

from nodes.config import NodeConfig
from nodes.wire import HEADER_SIZE, Flag

FRAME = struct.Struct("!I")
MAX_FRAME = 1 << 20  # a wire datagram is at most 64 KiB; anything larger is a broken peer
PENDING_BYTES = 8 << 20  # per peer, while its connection is (re)established
HANDSHAKE_S = 10.0
_SENDER = struct.Struct("!H")
RELAYED = int(Flag.RELAYED)


def _no_delay(writer: asyncio.StreamWriter) -> None:
    """Frames are small and latency matters: no Nagle batching."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def contexts(cfg: NodeConfig) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts: TLS 1.3 only, the node's certificate, the run's CA."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # check_hostname and CERT_REQUIRED
    with tempfile.TemporaryDirectory(prefix="testbed-tls-") as tmp:  # mode 0700
        cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        cert.write_text(cfg.tls_cert)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(cfg.tls_key)
        for ctx in (server, client):
            ctx.minimum_version = ssl.TLSVersion.TLSv1_3
            ctx.load_cert_chain(cert, key)
            ctx.load_verify_locations(cadata=cfg.tls_ca)
    server.verify_mode = ssl.CERT_REQUIRED  # mutual authentication
    return server, client


def _common_name(cert: dict[str, object] | None) -> str | None:
    for rdn in (cert or {}).get("subject", ()):  # type: ignore[attr-defined]
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class _Peer:
    """The outgoing connection to one member."""

    def __init__(self, transport: TlsTransport, member: int):
        self.t = transport
        self.member = member
        self.writer: asyncio.StreamWriter | None = None
        self.pending: deque[bytes] = deque()
        self.pending_bytes = 0
        self.task: asyncio.Task[None] | None = None
        self.failures = 0

    def send(self, frame: bytes) -> None:
        w = self.writer
        if w is not None and not w.is_closing():
            if w.transport.get_write_buffer_size() > PENDING_BYTES:
                self.t.dropped += 1
                return
            w.write(frame)
            return
        if self.pending_bytes + len(frame) > PENDING_BYTES:
            self.t.dropped += 1
            return
        self.pending.append(frame)
        self.pending_bytes += len(frame)
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        host, port, name = self.t.addrs[self.member]
        backoff = 0.05
        while not self.t.closing:
            try:
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=self.t.client_ctx, server_hostname=name,
                    ssl_handshake_timeout=HANDSHAKE_S)
            except (OSError, ssl.SSLError, TimeoutError) as exc:
                self.failures += 1
                if isinstance(exc, ssl.SSLError):
                    self.t.report("tls", f"dialling {name}: {exc}")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            _no_delay(writer)
            self.writer = writer
            while self.pending:
                writer.write(self.pending.popleft())
            self.pending_bytes = 0
            # The server never writes; EOF or an error means the peer went away.
            with contextlib.suppress(OSError, ssl.SSLError, asyncio.IncompleteReadError):
                await reader.read()
            self.writer = None
            writer.close()
            return


class TlsTransport:
    def __init__(self, cfg: NodeConfig, deliver: Callable[[bytes], None],
                 report: Callable[[str, str], None]):
        self.cfg = cfg
        self.deliver = deliver
        # (reason, detail): the runtime counts it as `rejected:<reason>` and logs the first few
        self.report = report
        self.server_ctx, self.client_ctx = contexts(cfg)
        self.addrs = {m.id: (m.host, m.port, m.name) for m in cfg.members}
        self.ids = {m.name: m.id for m in cfg.members}
        self.peers: dict[int, _Peer] = {}
        self.server: asyncio.Server | None = None
        self.connections: set[asyncio.Task[None]] = set()
        self.closing = False
        self.refused = 0  # handshakes that failed (e.g. a certificate from another CA)
        self.dropped = 0  # frames dropped because a peer's buffer was full
        self.rejected_peer = 0  # frames whose header sender is not the authenticated peer

    async def start(self) -> None:
        me = self.addrs[self.cfg.node_id]
        self.server = await asyncio.start_server(self._accept, me[0], me[1])

    async def stop(self) -> None:
        self.closing = True
        if self.server is not None:
            self.server.close()
        for p in self.peers.values():
            if p.writer is not None:
                p.writer.close()
            if p.task is not None:
                p.task.cancel()
        for task in list(self.connections):
            task.cancel()

    def send(self, dst: int, data: bytes) -> None:
        peer = self.peers.get(dst)
        if peer is None:
            peer = self.peers[dst] = _Peer(self, dst)
        peer.send(FRAME.pack(len(data)) + data)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        peer = writer.get_extra_info("peername")
        _no_delay(writer)
        try:
            try:
                await writer.start_tls(self.server_ctx, ssl_handshake_timeout=HANDSHAKE_S)
            except (OSError, ssl.SSLError, TimeoutError) as exc:
                self.refused += 1
                self.report("tls", f"handshake from {peer}: {exc}")
                return
            name = _common_name(writer.get_extra_info("peercert"))
            member = self.ids.get(name or "")
            if member is None or member == self.cfg.node_id:
                self.refused += 1
                self.report("tls", f"{peer}: certificate names {name!r}, not a peer")
                return
            await self._frames(reader, member)
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # stop(): asyncio's stream callback would report a re-raised cancel
        finally:
            writer.close()
            self.connections.discard(task)

    async def _frames(self, reader: asyncio.StreamReader, member: int) -> None:
        while True:
            (length,) = FRAME.unpack(await reader.readexactly(FRAME.size))
            if length > MAX_FRAME:
                self.report("frame", f"{self.addrs[member][2]}: frame of {length} bytes")
                return
            data = await reader.readexactly(length)
            # A RELAYED copy (the sequencer answering a FETCH) keeps its origin's header.
            if (len(data) >= HEADER_SIZE and _SENDER.unpack_from(data, 6)[0] != member
                    and not data[5] & RELAYED):
                self.rejected_peer += 1
                self.report("peer", f"{self.addrs[member][2]} sent a datagram as sender "
                                    f"{_SENDER.unpack_from(data, 6)[0]}")
                continue
            self.deliver(data)
