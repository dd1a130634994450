"""The node management server: Jolokia over HTTP and Prometheus text, against real clients."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from jolokia import JolokiaClient
from prometheus_client.parser import text_string_to_metric_families

from nodes.management import ManagementServer, MBean, ObjectName
from nodes.management.demo import (
    DemoClock,
    DemoFailureDetector,
    DemoTotalOrder,
    build_demo_registry,
)
from nodes.management.getpath import escape_part, split_path
from nodes.management.mbeans import BadRequest, coerce
from nodes.management.metrics import snake_case
from nodes.management.objectname import MalformedObjectName
from testbed.mgmt import MgmtClient, MgmtError

pytestmark = pytest.mark.timeout(30)

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Node:
    server: ManagementServer
    loop: asyncio.AbstractEventLoop
    clock: DemoClock
    detector: DemoFailureDetector
    seto: DemoTotalOrder

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        return self.http("GET", path, None, AUTH if headers is None else headers)

    def post(self, body: Any, raw: bytes | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else json.dumps(body).encode()
        return self.http("POST", "/jolokia", data, AUTH)

    def http(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=5)
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            is_json = "json" in (response.getheader("Content-Type") or "")
            return response.status, json.loads(data) if is_json else data.decode()
        finally:
            conn.close()


def _extra_beans(registry: Any) -> None:
    registry.register(
        MBean("testbed:type=TotalOrder,protocol=sequencer")
        .attribute("OptDelivered", "int", lambda: 7)
        .attribute("Config", "dict", lambda: {"window": 4})
    )

    def describe(text: str | None) -> dict[str, Any]:
        return {"none": text is None, "text": text}

    def explode() -> None:
        raise RuntimeError("boom")

    registry.register(
        MBean("testbed:type=Path,name=a/b!c")
        .attribute("Label", "str", lambda: "slashed")
        .operation("describe", describe, [("text", "str")], "dict")
        .operation("explode", explode)
    )


@pytest.fixture
def node() -> Iterator[Node]:
    registry, clock, detector, seto = build_demo_registry()
    _extra_beans(registry)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = ManagementServer(registry, "127.0.0.1", 0, TOKEN, max_body_bytes=4096)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(5)
    yield Node(server, loop, clock, detector, seto)
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


# ---- ObjectName and coercion ------------------------------------------------------------


def test_object_name_canonical_form_sorts_keys() -> None:
    name = ObjectName.parse("testbed:type=TotalOrder,protocol=seto")
    assert name.canonical == "testbed:protocol=seto,type=TotalOrder"
    assert name == ObjectName.parse("testbed:protocol=seto,type=TotalOrder")
    assert not name.is_pattern


@pytest.mark.parametrize(
    ("pattern", "selected"),
    [
        ("*:*", True),
        ("testbed:*", True),
        ("testbed:type=TotalOrder,*", True),
        ("testbed:type=TotalOrder", False),  # without ,* the key sets must be equal
        ("test?ed:type=Total*,protocol=s?to", True),
        ("testbed:type=Clock,*", False),
        ("other:*", False),
    ],
)
def test_object_name_patterns_select_like_jmx(pattern: str, selected: bool) -> None:
    name = ObjectName.parse("testbed:type=TotalOrder,protocol=seto")
    assert ObjectName.parse(pattern).matches(name) is selected


@pytest.mark.parametrize("text", ["nodomain", "testbed:", "testbed:type", "d:a=1,a=2", "d:a=x,b="])
def test_malformed_object_names_are_rejected(text: str) -> None:
    with pytest.raises(MalformedObjectName):
        ObjectName.parse(text)


def test_coercion_converts_get_strings_and_rejects_nonsense() -> None:
    assert coerce("42", "int", "x") == 42
    assert coerce("2.5", "float", "x") == 2.5
    assert coerce("TRUE", "bool", "x") is True
    assert coerce("a,b", "list", "x") == ["a", "b"]
    assert coerce('{"k": 1}', "dict", "x") == {"k": 1}
    for value, type_name in [("abc", "int"), (True, "int"), (1.5, "int"), ("yes", "bool")]:
        with pytest.raises(BadRequest):
            coerce(value, type_name, "x")


def test_get_path_escaping_round_trips() -> None:
    assert split_path("read/d:name=a!/b!!c/Attr/") == ["read", "d:name=a/b!c", "Attr"]
    assert split_path(escape_part("x/y!z")) == ["x/y!z"]


@pytest.mark.parametrize(
    ("attribute", "metric"),
    [("OffsetMs", "offset_ms"), ("RTTMillis", "rtt_millis"), ("QoS", "qos"), ("P99Ms", "p99_ms")],
)
def test_metric_names_are_snake_cased(attribute: str, metric: str) -> None:
    assert snake_case(attribute) == metric


# ---- read, write, exec, list, search, version over GET and POST ---------------------------


def test_get_read_single_attribute_returns_jolokia_envelope(node: Node) -> None:
    status, answer = node.get("/jolokia/read/testbed:type=FailureDetector/TimeoutMs")
    assert status == 200
    assert answer["status"] == 200 and answer["value"] == 500
    assert answer["request"] == {
        "type": "read",
        "mbean": "testbed:type=FailureDetector",
        "attribute": "TimeoutMs",
    }
    assert isinstance(answer["timestamp"], int)


def test_read_all_and_listed_attributes(node: Node) -> None:
    _, everything = node.get("/jolokia/read/testbed:type=Clock")
    assert everything["value"] == {"OffsetMs": 0.0, "DriftPpm": 0.0, "Jumps": 0}
    _, two = node.get("/jolokia/read/testbed:type=Clock/OffsetMs,Jumps")
    assert two["value"] == {"OffsetMs": 0.0, "Jumps": 0}
    _, posted = node.post({"type": "read", "mbean": "testbed:type=Clock", "attribute": ["Jumps"]})
    assert posted["value"] == {"Jumps": 0}


def test_pattern_read_keys_values_by_canonical_name_and_paths_skip_levels(node: Node) -> None:
    _, answer = node.post(
        {"type": "read", "mbean": "testbed:type=TotalOrder,*", "attribute": "OptDelivered"}
    )
    assert answer["value"] == {
        "testbed:protocol=seto,type=TotalOrder": {"OptDelivered": 0},
        "testbed:protocol=sequencer,type=TotalOrder": {"OptDelivered": 7},
    }
    _, windows = node.get("/jolokia/read/testbed:type=TotalOrder,*/Config/*/*/window")
    assert windows["value"] == {
        "testbed:protocol=seto,type=TotalOrder": {"Config": 16},
        "testbed:protocol=sequencer,type=TotalOrder": {"Config": 4},
    }


def test_read_inner_path_follows_into_a_map(node: Node) -> None:
    _, answer = node.get("/jolokia/read/testbed:type=TotalOrder,protocol=seto/Config/window")
    assert answer["value"] == 16
    assert answer["request"]["path"] == "window"


def test_write_over_get_coerces_and_returns_the_old_value(node: Node) -> None:
    _, answer = node.get("/jolokia/write/testbed:type=FailureDetector/TimeoutMs/750")
    assert answer["status"] == 200 and answer["value"] == 500
    assert node.detector.timeout_ms == 750 and isinstance(node.detector.timeout_ms, int)
    _, posted = node.post(
        {"type": "write", "mbean": "testbed:type=Clock", "attribute": "DriftPpm", "value": 12.5}
    )
    assert posted["value"] == 0.0 and node.clock.drift_ppm == 12.5


def test_write_with_inner_path_sets_a_nested_value_keeping_its_type(node: Node) -> None:
    _, answer = node.get("/jolokia/write/testbed:type=TotalOrder,protocol=seto/Config/32/window")
    assert answer["value"] == 16
    assert node.seto.config == {"window": 32, "adaptive": True}


def test_exec_over_get_and_post_coerces_arguments(node: Node) -> None:
    _, answer = node.get("/jolokia/exec/testbed:type=Clock/jump/2.5")
    assert answer["status"] == 200 and answer["value"] == 2.5
    _, posted = node.post(
        {
            "type": "exec",
            "mbean": "testbed:type=Clock",
            "operation": "jump(double)",
            "arguments": [-1],
        }
    )
    assert posted["value"] == 1.5 and node.clock.jumps == 2


def test_get_null_and_empty_string_markers(node: Node) -> None:
    mbean = escape_part("testbed:type=Path,name=a/b!c")
    _, null = node.get(f"/jolokia/exec/{mbean}/describe/[null]")
    assert null["value"] == {"none": True, "text": None}
    _, empty = node.get(f"/jolokia/exec/{mbean}/describe/%22%22")
    assert empty["value"] == {"none": False, "text": ""}


def test_escaped_slash_and_bang_in_mbean_names_and_the_p_parameter(node: Node) -> None:
    _, answer = node.get("/jolokia/read/testbed:type=Path,name=a!/b!!c/Label")
    assert answer["value"] == "slashed"
    query = urllib.parse.quote("/read/testbed:type=Path,name=a!/b!!c/Label", safe="")
    _, via_p = node.get(f"/jolokia?p={query}")
    assert via_p["value"] == "slashed"


def test_list_with_path_describes_attributes_and_operations(node: Node) -> None:
    _, whole = node.get("/jolokia/list")
    assert set(whole["value"]["testbed"]) >= {"type=Clock", "protocol=seto,type=TotalOrder"}
    _, clock = node.post({"type": "list", "path": "testbed/type=Clock"})
    assert clock["value"]["attr"]["OffsetMs"] == {
        "type": "double",
        "desc": "Offset from true time, ms",
        "rw": True,
    }
    assert clock["value"]["op"]["jump"]["args"][0]["name"] == "ms"
    _, attr = node.get("/jolokia/list/testbed/type=TotalOrder,protocol=seto/attr/OptDelivered")
    assert attr["value"]["rw"] is False


def test_search_and_version(node: Node) -> None:
    # `?` ends a URL path, so the wildcard travels percent-encoded.
    _, found = node.get("/jolokia/search/testbed:type=T%3FtalOrder,*")
    assert found["value"] == [
        "testbed:protocol=sequencer,type=TotalOrder",
        "testbed:protocol=seto,type=TotalOrder",
    ]
    _, none = node.post({"type": "search", "mbean": "nothing:*"})
    assert none["value"] == []
    _, version = node.get("/jolokia")
    assert version["request"] == {"type": "version"} and version["value"]["protocol"]


def test_bulk_post_answers_each_request_in_order(node: Node) -> None:
    status, answers = node.post(
        [
            {"type": "write", "mbean": "testbed:type=Clock", "attribute": "OffsetMs", "value": 3},
            {"type": "read", "mbean": "testbed:type=Nope", "attribute": "X"},
            {"type": "read", "mbean": "testbed:type=Clock", "attribute": "OffsetMs"},
            "not an object",
        ]
    )
    assert status == 200
    assert [a["status"] for a in answers] == [200, 404, 200, 400]
    assert answers[2]["value"] == 3.0


# ---- Jolokia errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status", "error_type"),
    [
        ("read/testbed:type=Nope/X", 404, "javax.management.InstanceNotFoundException"),
        ("read/testbed:type=Clock/Nope", 404, "javax.management.AttributeNotFoundException"),
        (
            "read/testbed:type=Clock/OffsetMs/deeper",
            404,
            "javax.management.AttributeNotFoundException",
        ),
        ("exec/testbed:type=Clock/nope", 404, "java.lang.NoSuchMethodException"),
        (
            "write/testbed:type=FailureDetector/SuspectedMembers/a",
            403,
            "java.lang.SecurityException",
        ),
        ("exec/testbed:type=Clock/jump", 400, "java.lang.IllegalArgumentException"),
        ("exec/testbed:type=Clock/jump/1/2", 400, "java.lang.IllegalArgumentException"),
        ("exec/testbed:type=Clock/jump/abc", 400, "java.lang.IllegalArgumentException"),
        (
            "write/testbed:type=FailureDetector/TimeoutMs/-5",
            400,
            "java.lang.IllegalArgumentException",
        ),
        ("read/bad-name/X", 400, "javax.management.MalformedObjectNameException"),
        ("frobnicate/x", 400, "java.lang.IllegalArgumentException"),
        ("exec/testbed:type=Path,name=a!/b!!c/explode", 500, "builtins.RuntimeError"),
    ],
)
def test_errors_use_jolokia_status_and_error_type(
    node: Node, path: str, status: int, error_type: str
) -> None:
    http_status, answer = node.get(f"/jolokia/{path}")
    assert http_status == 200  # Jolokia reports per-request errors inside the envelope
    assert answer["status"] == status
    assert answer["error_type"] == error_type
    assert answer["error"].startswith(error_type)


def test_post_type_errors_leave_state_unchanged(node: Node) -> None:
    _, answer = node.post(
        {
            "type": "write",
            "mbean": "testbed:type=FailureDetector",
            "attribute": "TimeoutMs",
            "value": "soon",
        }
    )
    assert answer["status"] == 400 and "TimeoutMs expects int" in answer["error"]
    _, args = node.post(
        {"type": "exec", "mbean": "testbed:type=Clock", "operation": "jump", "arguments": 5}
    )
    assert args["status"] == 400
    assert node.detector.timeout_ms == 500 and node.clock.jumps == 0


# ---- HTTP layer --------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/jolokia/version", "/metrics", "/elsewhere"])
@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}]
)
def test_every_path_wants_the_bearer_token(node: Node, path: str, headers: dict[str, str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", node.server.port, timeout=5)
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    response.read()
    conn.close()
    assert response.status == 401
    assert (response.getheader("WWW-Authenticate") or "").startswith("Bearer")


def test_unknown_path_and_method_are_http_errors(node: Node) -> None:
    assert node.get("/elsewhere")[0] == 404
    status, _ = node.http("DELETE", "/jolokia", None, AUTH)
    assert status == 405


def test_malformed_json_body_is_http_400_with_jolokia_envelope(node: Node) -> None:
    status, answer = node.post(None, raw=b'{"type": "read",')
    assert status == 400
    assert answer["status"] == 400 and "not valid JSON" in answer["error"]
    status, answer = node.post(None, raw=b"42")
    assert status == 400 and answer["status"] == 400


def test_oversize_body_is_refused_and_the_server_keeps_serving(node: Node) -> None:
    big = json.dumps({"type": "version", "pad": "x" * 20_000}).encode()
    status, answer = node.post(None, raw=big)
    assert status == 413 and answer["status"] == 413
    assert node.get("/jolokia/version")[1]["status"] == 200


def test_garbage_request_line_gets_400_and_server_survives(node: Node) -> None:
    with socket.create_connection(("127.0.0.1", node.server.port), timeout=5) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.1 400")
    assert node.get("/jolokia/version")[0] == 200


def test_keep_alive_serves_several_requests_on_one_connection(node: Node) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", node.server.port, timeout=5)
    try:
        conn.request("GET", "/jolokia/exec/testbed:type=Clock/jump/1", headers=AUTH)
        first = conn.getresponse()
        first.read()
        sock = conn.sock
        conn.request("POST", "/jolokia", body=b'{"type":"version"}', headers=AUTH)
        second = conn.getresponse()
        assert json.loads(second.read())["status"] == 200
        assert conn.sock is sock and first.getheader("Connection") == "keep-alive"
    finally:
        conn.close()


def test_stop_closes_idle_keep_alive_connections_and_frees_the_port(node: Node) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", node.server.port, timeout=5)
    conn.request("GET", "/jolokia/version", headers=AUTH)
    conn.getresponse().read()  # the connection now idles in keep-alive
    assert conn.sock is not None
    port = node.server.port
    asyncio.run_coroutine_threadsafe(node.server.stop(), node.loop).result(5)
    try:
        assert conn.sock.recv(16) == b""  # the server closed its end
        with socket.socket() as again:
            again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            again.bind(("127.0.0.1", port))
    finally:
        conn.close()


def test_server_binds_only_the_given_address(node: Node) -> None:
    with pytest.raises(OSError), socket.create_connection(("127.0.0.2", node.server.port), 2):
        pass


# ---- third-party clients and our own ------------------------------------------------------


def test_pypi_jolokia_client_reads_and_executes(node: Node) -> None:
    client = JolokiaClient(f"{node.base}/jolokia")
    client.session.headers["Authorization"] = f"Bearer {TOKEN}"
    read = client.get_attribute(mbean="testbed:type=FailureDetector", attribute="TimeoutMs")
    assert read["status"] == 200 and read["value"] == 500
    done = client.execute(
        mbean="testbed:type=FailureDetector", operation="suspect", arguments=["h3"]
    )
    assert done["value"] is True and node.detector.suspected == ["h3"]
    written = client.set_attribute(
        mbean="testbed:type=FailureDetector", attr_value_pairs=("TimeoutMs", 900)
    )
    assert written["value"] == 500 and node.detector.timeout_ms == 900


def test_prometheus_parser_reads_metrics(node: Node) -> None:
    node.get("/jolokia/exec/testbed:type=Clock/jump/4")
    status, text = node.get("/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["testbed_clock_offset_ms"].samples[0].value == 4.0
    delivered = {
        s.labels["protocol"]: s.value for s in families["testbed_total_order_opt_delivered"].samples
    }
    assert delivered == {"seto": 0.0, "sequencer": 7.0}
    assert "testbed_failure_detector_suspected_members" not in families  # a list, not a number


def test_mgmt_client_round_trip(node: Node) -> None:
    client = MgmtClient(node.base, TOKEN)
    assert client.write("testbed:type=FailureDetector", "TimeoutMs", 600) == 500
    assert client.read("testbed:type=FailureDetector", "TimeoutMs") == 600
    assert client.exec("testbed:type=Clock", "jump", 10) == 10.0
    assert client.search("testbed:type=Clock,*") == ["testbed:type=Clock"]
    assert client.list("testbed/type=Clock/attr/Jumps")["rw"] is False
    assert client.version()["id"] == "testbed"
    assert client.bulk([{"type": "read", "mbean": "testbed:type=Clock", "attribute": "Jumps"}]) == [
        1
    ]
    assert "testbed_clock_jumps 1" in client.metrics()


def test_mgmt_client_errors_are_one_sentence(node: Node) -> None:
    client = MgmtClient(f"{node.base}/jolokia", TOKEN)
    with pytest.raises(MgmtError) as missing:
        client.read("testbed:type=Nope", "X")
    assert missing.value.status == 404 and "testbed:type=Nope" in str(missing.value)
    with pytest.raises(MgmtError) as readonly:
        client.write("testbed:type=FailureDetector", "SuspectedMembers", [])
    assert readonly.value.status == 403 and "read-only" in str(readonly.value)
    with pytest.raises(MgmtError) as denied:
        MgmtClient(node.base, "wrong").version()
    assert denied.value.status == 401 and "token" in str(denied.value)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(MgmtError, match="cannot reach"):
        MgmtClient(f"http://127.0.0.1:{port}", TOKEN, timeout_s=2).version()
