"""Who may read what `testbed serve` shows: on a loopback address the local user, with no
credentials; on any other, the state folder's bearer token or Basic credential over TLS with a
certificate of testbed/certs.py (docs/serve.md)."""

from __future__ import annotations

import base64
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def is_local(host: str) -> bool:
    """A loopback address this server needs no credentials on."""
    return host in LOCAL_HOSTS


def _secret(path: Path, make: str) -> str:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(make)
    return path.read_text().strip()


@dataclass(frozen=True)
class Credentials:
    token: str
    basic: str  # "user:password"

    @classmethod
    def load(cls, state: Path) -> Credentials:
        """The server's bearer token and Basic credential (created on first use, mode 0600,
        like a run's management token: testbed/rundir.py)."""
        return cls(_secret(state / "token", secrets.token_urlsafe(24)),
                   _secret(state / "basic", f"testbed:{secrets.token_urlsafe(18)}"))

    def accepts(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer":
            return hmac.compare_digest(value.strip().encode(), self.token.encode())
        if scheme.lower() == "basic":
            try:
                given = base64.b64decode(value.strip(), validate=True)
            except ValueError:
                return False
            return hmac.compare_digest(given, self.basic.encode())
        cookie = request.cookies.get("testbed_serve", "")
        query = request.query_params.get("token", "")
        return any(hmac.compare_digest(c.encode(), self.token.encode())
                   for c in (cookie, query) if c)


def server_certificate(state: Path, host: str, names: list[str]) -> tuple[Path, Path, Path]:
    """(certificate, key, CA) for serving TLS on `host`, from testbed/certs.py: the state
    folder's CA (kept once made) and a certificate issued again on every start, naming the
    machine's addresses and host name and `names` (`certs.serve_names`)."""
    from testbed.certs import make_run_certs, serve_names

    made = make_run_certs(state, "serve", {"serve": serve_names(host, names)})["serve"]
    return made.cert_path, made.key_path, state / "certs" / "ca.pem"


class AuthMiddleware:
    """Every request needs the credentials (a non-local bind)."""

    def __init__(self, app: ASGIApp, credentials: Credentials):
        self.app = app
        self.credentials = credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if not self.credentials.accepts(request):
            response: Response = Response(
                "authentication required: Authorization: Bearer TOKEN (the token file of "
                "testbed serve's state folder), Basic, or ?token=TOKEN\n", status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="testbed serve"'},
                media_type="text/plain")
            await response(scope, receive, send)
            return
        if request.query_params.get("token"):
            async def send_cookie(message: Any) -> None:
                if message["type"] == "http.response.start":
                    cookie = (f"testbed_serve={self.credentials.token}; HttpOnly; Secure; "
                              "SameSite=Strict; Path=/")
                    message.setdefault("headers", []).append(
                        (b"set-cookie", cookie.encode()))
                await send(message)
            await self.app(scope, receive, send_cookie)
            return
        await self.app(scope, receive, send)

