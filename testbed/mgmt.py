"""Client for a node's management endpoint (Jolokia over HTTP, bearer token).

Every call is one POST to ``<base>/jolokia`` and returns the Jolokia ``value``; any
failure (unreachable node, wrong token, unknown MBean, read-only attribute, bad argument)
becomes a ``MgmtError`` whose message is one sentence a user can act on. The ``testbed
mgmt HOST read|write|exec|list|search`` commands are thin wrappers around this class.
"""

from __future__ import annotations

import builtins
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

_HINTS = {
    400: "check the argument count and types with `list`",
    403: "that attribute is read-only",
    404: "use `search` or `list` to see what the node exposes",
}


class MgmtError(Exception):
    """A management request failed; ``status`` is the Jolokia or HTTP status if known."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _strip_java_prefix(error: str) -> str:
    # Jolokia errors read "java.lang.SecurityException : attribute ... is read-only".
    _, sep, rest = error.partition(" : ")
    return rest if sep else error


class MgmtClient:
    """Talk to one node's management server, e.g. ``MgmtClient("http://10.0.0.1:8778", tok)``."""

    def __init__(self, base_url: str, token: str, timeout_s: float = 5.0,
                 cafile: str | Path | None = None,
                 client_cert: str | Path | None = None) -> None:
        base = base_url.rstrip("/")
        self.base_url = base[: -len("/jolokia")] if base.endswith("/jolokia") else base
        self.jolokia_url = f"{self.base_url}/jolokia"
        self.token = token
        self.timeout_s = timeout_s
        # HTTPS: verify the node against the run's CA (testbed/certs.py), never skip it.
        self.ssl_context = ssl.create_default_context(cafile=str(cafile)) if cafile else None
        if self.ssl_context is not None and client_cert is not None:
            # Mutual TLS: the certificate and its key (same name, .key) from the run's CA.
            cert = Path(client_cert)
            self.ssl_context.load_cert_chain(cert, cert.with_suffix(".key"))

    # ---- requests -----------------------------------------------------------------------

    def read(
        self, mbean: str, attribute: str | list[str] | None = None, path: str | None = None
    ) -> Any:
        """One attribute's value, a dict of several (list or None = all), or a pattern read."""
        request: dict[str, Any] = {"type": "read", "mbean": mbean}
        if attribute is not None:
            request["attribute"] = attribute
        if path:
            request["path"] = path
        return self.request(request)

    def write(self, mbean: str, attribute: str, value: Any, path: str | None = None) -> Any:
        """Set an attribute; returns its previous value."""
        request: dict[str, Any] = {
            "type": "write",
            "mbean": mbean,
            "attribute": attribute,
            "value": value,
        }
        if path:
            request["path"] = path
        return self.request(request)

    def exec(self, mbean: str, operation: str, *arguments: Any) -> Any:
        """Invoke an operation; returns its result (None for void operations)."""
        return self.request(
            {"type": "exec", "mbean": mbean, "operation": operation, "arguments": list(arguments)}
        )

    def list(self, path: str | None = None) -> Any:
        """MBean metadata: domains, MBeans, attributes (type, rw) and operations (args)."""
        request: dict[str, Any] = {"type": "list"}
        if path:
            request["path"] = path
        return self.request(request)

    def search(self, pattern: str = "*:*") -> builtins.list[str]:
        """Canonical names of the MBeans matching an ObjectName pattern."""
        result: builtins.list[str] = self.request({"type": "search", "mbean": pattern})
        return result

    def version(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request({"type": "version"})
        return result

    def metrics(self) -> str:
        """The Prometheus text exposition at ``/metrics``."""
        return self._http("GET", f"{self.base_url}/metrics", None).decode("utf-8")

    def request(self, request: dict[str, Any]) -> Any:
        """Send one Jolokia request object; return its value or raise MgmtError."""
        return self._value(self._post(request))

    def bulk(self, requests: builtins.list[dict[str, Any]]) -> builtins.list[Any]:
        """Send several requests in one POST; values in order, MgmtError on the first failure."""
        answers = self._post(requests)
        if not isinstance(answers, list) or len(answers) != len(requests):
            raise MgmtError(f"{self.jolokia_url} answered a bulk request with something else")
        return [self._value(a) for a in answers]

    # ---- plumbing -----------------------------------------------------------------------

    def _value(self, answer: Any) -> Any:
        if not isinstance(answer, dict) or "status" not in answer:
            raise MgmtError(f"{self.jolokia_url} did not answer with a Jolokia response")
        status = answer["status"]
        if status != 200:
            error = _strip_java_prefix(str(answer.get("error", "unknown error"))).rstrip(".")
            hint = _HINTS.get(status)
            raise MgmtError(f"{error}{f' ({hint})' if hint else ''}.", status)
        return answer.get("value")

    def _post(self, payload: Any) -> Any:
        body = self._http("POST", self.jolokia_url, json.dumps(payload).encode("utf-8"))
        try:
            return json.loads(body)
        except json.JSONDecodeError:
            raise MgmtError(
                f"{self.jolokia_url} answered with something that is not JSON."
            ) from None

    def _http(self, method: str, url: str, body: bytes | None) -> bytes:
        headers = {"Authorization": f"Bearer {self.token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=body, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s,
                                        context=self.ssl_context) as response:
                data: bytes = response.read()
                return data
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                raise MgmtError(
                    f"{url} rejected the token; pass the run's management token.", 401
                ) from None
            try:
                detail = json.loads(exc.read()).get("error", exc.reason)
            except (ValueError, AttributeError):
                detail = exc.reason
            raise MgmtError(f"{url} answered HTTP {exc.code}: {detail}.", exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, ssl.SSLError):
                trust = "the run's CA" if self.ssl_context is not None else "the system CAs"
                raise MgmtError(
                    f"{url}: TLS failed ({getattr(reason, 'reason', None) or reason}); the "
                    f"node's certificate must verify against {trust}."
                ) from None
            raise MgmtError(
                f"cannot reach {url} ({reason}); check that the node runs and the address is its "
                "control address."
            ) from None
