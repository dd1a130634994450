"""The management HTTP server: Jolokia at ``/jolokia`` and Prometheus text at ``/metrics``.

Standard library only (nodes/ runs on bare hosts): asyncio streams and a small HTTP/1.1
reader with keep-alive and Content-Length bodies. It runs inside the node's event loop,
so getters, setters and operations run on the same thread as the protocol and need no
locks. It binds only to the address it is given, the node's control address
(docs/architecture.md decision 4), and every path wants ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

from nodes.management.jolokia import Jolokia
from nodes.management.mbeans import MBeanRegistry
from nodes.management.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from nodes.management.metrics import render_metrics

log = logging.getLogger(__name__)

JSON_CONTENT_TYPE = "application/json; charset=utf-8"
MAX_HEAD_BYTES = 16 * 1024
_REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    505: "HTTP Version Not Supported",
}


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Request:
    method: str
    target: str
    version: str
    headers: dict[str, str]

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in connection
        return "close" not in connection


@dataclass
class _Response:
    status: int
    body: bytes
    content_type: str = JSON_CONTENT_TYPE
    extra_headers: tuple[tuple[str, str], ...] = ()


def _json_default(value: Any) -> Any:
    # Getters may hand back sets, tuples' cousins or enums; JSON gets their plain form.
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)


def _json(payload: Any) -> bytes:
    return json.dumps(payload, default=_json_default).encode("utf-8")


class ManagementServer:
    """Serve ``registry`` over Jolokia/HTTP on ``host:port``; port 0 picks a free port."""

    def __init__(
        self,
        registry: MBeanRegistry,
        host: str,
        port: int,
        token: str,
        max_body_bytes: int = 1 << 20,
        idle_timeout_s: float = 30.0,
        agent_id: str = "testbed",
    ) -> None:
        if not token:
            raise ValueError("the management server needs a non-empty bearer token")
        self.registry = registry
        self.host = host
        self.port = port
        self.max_body_bytes = max_body_bytes
        self.idle_timeout_s = idle_timeout_s
        self.jolokia = Jolokia(registry, agent_id=agent_id)
        self._expected = f"Bearer {token}".encode()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._stopping = False

    async def start(self) -> None:
        self._stopping = False
        self._server = await asyncio.start_server(
            self._serve_connection, self.host, self.port, limit=MAX_HEAD_BYTES
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("management server on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._server is None:
            return
        self._stopping = True
        self._server.close()
        while self._connections:
            tasks = list(self._connections)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/jolokia"

    # ---- connection handling ------------------------------------------------------------

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while not self._stopping and await self._serve_one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            try:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
            finally:
                self._connections.discard(task)

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection should close."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_timeout_s)
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                await self._send(writer, self._error(400, "the request head was cut off"), False)
            return False
        except asyncio.LimitOverrunError:
            await self._send(writer, self._error(431, "the request head is too large"), False)
            return False
        try:
            request = _parse_head(head)
        except _HttpError as exc:
            await self._send(writer, self._error(exc.status, str(exc)), False)
            return False
        try:
            body = await self._read_body(request, reader, writer)
        except _HttpError as exc:
            await self._send(writer, self._error(exc.status, str(exc)), False)
            if exc.status == 413:
                await self._drain(reader, request.headers)
            return False
        try:
            response = self._dispatch(request, body)
        except Exception:  # the server must outlive any bug in a handler
            log.exception("management request %s %s failed", request.method, request.target)
            response = self._error(500, "internal error in the management server")
        keep_alive = request.keep_alive
        await self._send(writer, response, keep_alive)
        return keep_alive

    async def _read_body(
        self, request: _Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bytes:
        if "chunked" in request.headers.get("transfer-encoding", "").lower():
            raise _HttpError(411, "send the body with a Content-Length, not chunked")
        raw_length = request.headers.get("content-length", "0").strip()
        if not raw_length.isdigit():
            raise _HttpError(400, f"bad Content-Length {raw_length!r}")
        length = int(raw_length)
        if length > self.max_body_bytes:
            raise _HttpError(413, f"the body is {length} bytes; the limit is {self.max_body_bytes}")
        if length and request.headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return await asyncio.wait_for(reader.readexactly(length), self.idle_timeout_s)

    async def _drain(self, reader: asyncio.StreamReader, headers: dict[str, str]) -> None:
        """Swallow a refused body (bounded) so the client reads our 413 instead of a reset."""
        remaining = min(int(headers.get("content-length", "0") or 0), 64 * self.max_body_bytes)
        with contextlib.suppress(Exception):
            while remaining > 0:
                chunk = await asyncio.wait_for(reader.read(min(remaining, 65536)), 2.0)
                if not chunk:
                    break
                remaining -= len(chunk)

    # ---- routing ------------------------------------------------------------------------

    def _dispatch(self, request: _Request, body: bytes) -> _Response:
        supplied = request.headers.get("authorization", "").strip().encode()
        if not hmac.compare_digest(supplied, self._expected):
            return self._error(
                401,
                "missing or wrong bearer token",
                (("WWW-Authenticate", 'Bearer realm="testbed"'),),
            )
        path, _, query = request.target.partition("?")
        if path == "/metrics":
            if request.method != "GET":
                return self._error(405, "use GET for /metrics", (("Allow", "GET"),))
            return _Response(200, render_metrics(self.registry).encode(), METRICS_CONTENT_TYPE)
        if path == "/jolokia" or path.startswith("/jolokia/"):
            if request.method == "POST":
                status, payload = self.jolokia.handle_post(body)
                return _Response(status, _json(payload))
            if request.method == "GET":
                # `?p=/read/...` is Jolokia's alternative to a path, for names URLs mangle.
                alternative = parse_qs(query).get("p")
                get_path = alternative[0] if alternative else unquote(path[len("/jolokia") :])
                return _Response(200, _json(self.jolokia.handle_get_path(get_path)))
            return self._error(405, "use GET or POST for /jolokia", (("Allow", "GET, POST"),))
        return self._error(404, f"no such path {path!r}; use /jolokia or /metrics")

    def _error(
        self, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()
    ) -> _Response:
        payload = {"error_type": "http", "error": message, "status": status}
        return _Response(status, _json(payload), JSON_CONTENT_TYPE, headers)

    async def _send(self, writer: asyncio.StreamWriter, response: _Response, keep: bool) -> None:
        lines = [
            f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Error')}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(response.body)}",
            f"Connection: {'keep-alive' if keep else 'close'}",
            "Cache-Control: no-cache",
            *(f"{k}: {v}" for k, v in response.extra_headers),
        ]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body)
        await writer.drain()


def _parse_head(head: bytes) -> _Request:
    try:
        text = head.decode("latin-1")
        request_line, *header_lines = text.split("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError:
        raise _HttpError(400, "malformed request line") from None
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise _HttpError(505, f"{version} is not supported; use HTTP/1.1")
    headers: dict[str, str] = {}
    for line in header_lines:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise _HttpError(400, f"malformed header line {line[:40]!r}")
        key = name.lower()
        if key == "content-length" and key in headers and headers[key] != value.strip():
            raise _HttpError(400, "conflicting Content-Length headers")
        headers[key] = value.strip()
    return _Request(method, target, version, headers)
