"""The Jolokia protocol as third-party clients speak it (docs/faults.md): the `jolokia` package from
PyPI (Python) and jolokia.js from npm (JavaScript, the Jolokia project's own client) each run a
scripted session against a management server -- version, list with a path, search, read of
one / several / all attributes over GET and POST, a pattern read, a path read, write, exec
with arguments, a bulk request with one failing entry, bearer and HTTP Basic authentication,
and a refused request without credentials -- plus processing parameters and CORS."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from jolokia import JolokiaClient

from nodes.management import ManagementServer, MBean
from nodes.management.mbeans import MBeanRegistry

pytestmark = pytest.mark.timeout(120)
CLIENTS = Path(__file__).resolve().parent / "clients"
TOKEN = "tok-123"
USER, PASSWORD = "testbed", "pw-456"


class Demo:
    def __init__(self) -> None:
        self.count = 1

    def registry(self) -> MBeanRegistry:
        def set_count(v: int) -> None:
            self.count = v

        def fail() -> int:
            raise RuntimeError("this getter always fails")

        reg = MBeanRegistry()
        reg.register(MBean("testbed:type=Demo", "demo")
                     .attribute("Count", "int", lambda: self.count, set_count)
                     .attribute("Name", "str", lambda: "demo")
                     .attribute("Tree", "dict", lambda: {"a": {"b": 1, "c": [1, 2, 3]}})
                     .operation("add", lambda a, b: a + b, [("a", "int"), ("b", "int")], "int"))
        reg.register(MBean("testbed:type=Other,name=x", "another")
                     .attribute("Count", "int", lambda: 42)
                     .attribute("Broken", "int", fail))
        return reg


@pytest.fixture
def server() -> Iterator[tuple[str, Demo]]:
    demo = Demo()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    srv = ManagementServer(demo.registry(), "127.0.0.1", 0, TOKEN, basic=f"{USER}:{PASSWORD}")
    asyncio.run_coroutine_threadsafe(srv.start(), loop).result(5)
    try:
        yield srv.url, demo
    finally:
        asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_python_jolokia_package_session(server: tuple[str, Demo]) -> None:
    url, demo = server
    basic = JolokiaClient(url, USER, PASSWORD)  # the package's own Basic support
    bearer = JolokiaClient(url)
    bearer.session.headers["Authorization"] = f"Bearer {TOKEN}"
    assert basic.version()["value"]["protocol"]
    listed = bearer.list("testbed/type=Demo/op")
    assert listed["value"]["add"]["args"][0]["name"] == "a"
    assert bearer.search(mbean="testbed:*")["value"] == ["testbed:name=x,type=Other",
                                                         "testbed:type=Demo"]
    assert bearer.get_attribute(mbean="testbed:type=Demo", attribute="Count")["value"] == 1
    several = bearer.get_attribute(mbean="testbed:type=Demo", attribute=["Count", "Name"])
    assert [r["value"] for r in several] == [1, "demo"]
    everything = bearer.session.get(f"{url}/read/testbed:type=Demo").json()  # GET form
    assert set(everything["value"]) == {"Count", "Name", "Tree"}
    pattern = basic.get_attribute(mbean="testbed:type=*,*", attribute="Count")["value"]
    assert pattern == {"testbed:type=Demo": {"Count": 1}, "testbed:name=x,type=Other":
                       {"Count": 42}}
    path = bearer.get_attribute(mbean="testbed:type=Demo", attribute="Tree", path="a/c/1")
    assert path["value"] == 2
    assert bearer.set_attribute(mbean="testbed:type=Demo",
                                attr_value_pairs=("Count", 5))["value"] == 1
    assert demo.count == 5
    assert bearer.execute(mbean="testbed:type=Demo", operation="add",
                          arguments=[20, 22])["value"] == 42
    bulk = bearer.session.post(url, json=[
        {"type": "read", "mbean": "testbed:type=Demo", "attribute": "Count"},
        {"type": "read", "mbean": "testbed:type=Nope", "attribute": "Count"}]).json()
    assert [r["status"] for r in bulk] == [200, 404]
    assert "InstanceNotFoundException" in bulk[1]["error_type"]
    refused = JolokiaClient(url).version()
    assert refused["status"] == 401 and "value" not in refused
    wrong = JolokiaClient(url, USER, "nope").version()
    assert wrong["status"] == 401


@pytest.fixture(scope="module")
def jolokia_js() -> Path:
    """jolokia.js from npm, installed from tests/clients/package-lock.json on first use."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs node and npm for the jolokia.js client test")
        pytest.skip("needs node and npm")
    if not (CLIENTS / "node_modules" / "jolokia.js").is_dir():
        done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=CLIENTS,
                              capture_output=True, text=True, timeout=300)
        if done.returncode:
            if os.environ.get("CI") == "true":
                pytest.fail(f"npm ci failed: {done.stderr[-2000:]}")
            pytest.skip(f"cannot install jolokia.js: {done.stderr[-300:]}")
    return CLIENTS / "jolokia_session.mjs"


def test_jolokia_js_session(server: tuple[str, Demo], jolokia_js: Path) -> None:
    url, demo = server
    done = subprocess.run(["node", str(jolokia_js), url, TOKEN, USER, PASSWORD],
                          capture_output=True, text=True, timeout=60, cwd=CLIENTS)
    assert done.returncode == 0, done.stderr
    r: dict[str, Any] = json.loads(done.stdout)
    assert r["version"]["value"]["protocol"] and r["version"]["status"] == 200
    assert set(r["list"]["value"]) == {"Count", "Name", "Tree"}
    assert r["search"]["value"] == ["testbed:type=Demo"]
    assert r["readOneGet"]["value"] == r["readOnePost"]["value"] == 1
    assert r["readSeveral"]["value"] == {"Count": 1, "Name": "demo"}
    assert r["readAllGet"]["value"] == r["readAllPost"]["value"]
    assert r["readAllGet"]["value"]["Tree"] == {"a": {"b": 1, "c": [1, 2, 3]}}
    assert r["pattern"]["value"] == {"testbed:type=Demo": {"Count": 1}}  # type=* only
    assert r["pathGet"]["value"] == 1
    assert r["write"]["value"] == 1 and r["afterWrite"]["value"] == 7 and demo.count == 7
    assert r["execGet"]["value"] == 5 and r["execPost"]["value"] == 9
    assert [x["status"] for x in r["bulk"]] == [200, 404, 200] and r["bulk"][2]["value"] == 2
    assert r["maxDepth"]["value"] == {"a": "{'b': 1, 'c': [1, 2, 3]}"}
    assert r["basic"]["value"] == 7
    assert "value" not in json.dumps(r["refused"]) or r["refused"].get("status") == 401


# -- processing parameters, error envelopes, CORS ----------------------------------------------
def _post(url: str, body: Any, **params: str) -> Any:
    return requests.post(url, json=body, params=params,
                         headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)


def test_processing_parameters(server: tuple[str, Demo]) -> None:
    url, _ = server
    tree = {"type": "read", "mbean": "testbed:type=Demo", "attribute": "Tree"}
    assert _post(url, tree, maxCollectionSize="1").json()["value"] == {"a": {"b": 1}}
    assert _post(url, {**tree, "config": {"maxDepth": 2, "maxCollectionSize": 2}}
                 ).json()["value"] == {"a": {"b": 1, "c": "[1, 2, 3]"}}
    assert _post(url, tree, maxObjects="3").json()["value"] == {
        "a": {"b": 1, "c": "[Object limit exceeded]"}}
    broken = {"type": "read", "mbean": "testbed:name=x,type=Other"}
    failed = _post(url, broken).json()
    assert failed["status"] == 500 and "stacktrace" not in failed
    tolerant = _post(url, broken, ignoreErrors="true").json()
    assert tolerant["value"]["Count"] == 42 and "always fails" in tolerant["value"]["Broken"]
    traced = _post(url, {**broken, "attribute": "Broken"}, includeStackTrace="true").json()
    assert "Traceback" in traced["stacktrace"] and "always fails" in traced["stacktrace"]
    search = {"type": "search", "mbean": "testbed:*"}
    assert "testbed:type=Other,name=x" in _post(url, search, canonicalNaming="false"
                                                ).json()["value"]
    plain = _post(url, {"type": "version"}, mimeType="text/plain")
    assert plain.headers["Content-Type"].startswith("text/plain") and plain.json()["value"]


def test_cors_preflight_and_origin_without_ambient_credentials(server: tuple[str, Demo]
                                                               ) -> None:
    url, _ = server
    host, port = url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.request("OPTIONS", "/jolokia", headers={
        "Origin": "http://console.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    pre = conn.getresponse()
    pre.read()
    assert pre.status == 200
    assert pre.getheader("Access-Control-Allow-Origin") == "http://console.example"
    assert "POST" in (pre.getheader("Access-Control-Allow-Methods") or "")
    assert "authorization" in (pre.getheader("Access-Control-Allow-Headers") or "")
    conn.request("GET", "/jolokia/version", headers={
        "Origin": "http://console.example", "Authorization": f"Bearer {TOKEN}"})
    got = conn.getresponse()
    assert got.status == 200 and json.loads(got.read())["value"]
    assert got.getheader("Access-Control-Allow-Origin") == "http://console.example"
    assert got.getheader("Access-Control-Allow-Credentials") is None
    conn.request("GET", "/jolokia/version", headers={"Origin": "http://evil.example"})
    denied = conn.getresponse()
    body = denied.read()
    assert denied.status == 401 and b"value" not in body
    basic = base64.b64encode(f"{USER}:wrong".encode()).decode()
    conn.request("GET", "/metrics", headers={"Authorization": f"Basic {basic}"})
    wrong = conn.getresponse()
    wrong.read()
    assert wrong.status == 401
    challenges = wrong.headers.get_all("WWW-Authenticate") or []
    assert any(c.startswith("Basic") for c in challenges)
    conn.close()


def test_a_slow_or_oversized_request_does_not_stall_the_server(server: tuple[str, Demo]
                                                               ) -> None:
    import socket

    url, _ = server
    host, port = url.split("//")[1].split("/")[0].split(":")
    slow = [socket.create_connection((host, int(port))) for _ in range(5)]
    for s in slow:
        s.sendall(b"GET /jolokia/version HTTP/1.1\r\nHost: x\r\n")  # and never the end
    big = socket.create_connection((host, int(port)))
    big.sendall(b"POST /jolokia HTTP/1.1\r\nContent-Length: 99999999\r\n"
                b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\n")
    try:
        answer = requests.get(f"{url}/version", headers={"Authorization": f"Bearer {TOKEN}"},
                              timeout=5)
        assert answer.status_code == 200 and answer.json()["value"]["protocol"]
        assert big.recv(64).startswith(b"HTTP/1.1 413")
    finally:
        for s in [*slow, big]:
            s.close()
