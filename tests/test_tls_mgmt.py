"""HTTPS management (docs/security.md): the run's CA and node certificates (testbed/certs.py), nodes
serving /jolokia over TLS, clients that verify against the run's CA and refuse anything else;
and the same end to end in a local run with `management: {tls: true}` and `transport:
udp-aead`, driven through `testbed mgmt`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from nodes.config import Member, NodeConfig
from nodes.management.demo import build_demo_registry
from nodes.management.server import ManagementServer
from nodes.runtime import _server_tls
from testbed.certs import CertError, make_run_certs
from testbed.mgmt import MgmtClient, MgmtError
from testbed.spec.loader import SpecError, load_experiment

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "s3cret"


def _node_cfg(cert: str, key: str) -> NodeConfig:
    return NodeConfig(node_id=0, name="h1", members=[Member(0, "h1", "127.0.0.1", 1)],
                      protocol="sequencer", params={}, log_path="", seed=1, start_at_ns=0,
                      duration_ns=0, drain_ns=0, tls_cert=cert, tls_key=key, mgmt_tls=True)


@pytest.fixture(params=["ecdsa-p256", "rsa-2048"])
def https_node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    certs = make_run_certs(tmp_path, "abc123", {"h1": ["127.0.0.1"]}, request.param)
    registry = build_demo_registry()[0]
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    ctx = _server_tls(_node_cfg(certs["h1"].cert_pem, certs["h1"].key_pem))
    server = ManagementServer(registry, "127.0.0.1", 0, TOKEN, ssl_context=ctx)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(5)
    try:
        yield server.url, tmp_path / "certs" / "ca.pem"
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_certificates_have_the_right_shape_and_private_keys_are_0600(tmp_path: Path) -> None:
    made = make_run_certs(tmp_path, "abc123", {"h1": ["10.0.0.1"], "h2": ["10.0.0.2"]},
                          "rsa-2048")
    ca = x509.load_pem_x509_certificate((tmp_path / "certs" / "ca.pem").read_bytes())
    for host, addr in (("h1", "10.0.0.1"), ("h2", "10.0.0.2")):
        cert = x509.load_pem_x509_certificate(made[host].cert_pem.encode())
        assert cert.issuer == ca.subject
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert host in san.get_values_for_type(x509.DNSName)
        assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == [addr]
        assert isinstance(cert.public_key(), rsa.RSAPublicKey)
        assert cert.public_key().key_size == 2048  # type: ignore[union-attr]
        assert made[host].key_path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "certs" / "ca.key").stat().st_mode & 0o777 == 0o600
    # A second call keeps the CA: the new certificate verifies against the same ca.pem.
    again = make_run_certs(tmp_path, "abc123", {"h3": ["10.0.0.3"]}, "ecdsa-p256")
    cert = x509.load_pem_x509_certificate(again["h3"].cert_pem.encode())
    assert cert.issuer == ca.subject and isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert x509.load_pem_x509_certificate((tmp_path / "certs" / "ca.pem").read_bytes()) == ca


def test_dsa_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(CertError, match="TLS 1.3 has no DSA"):
        make_run_certs(tmp_path, "x", {"h1": ["127.0.0.1"]}, "dsa")
    (tmp_path / "topo.yaml").write_text((ROOT / "topologies" / "two-sites.yaml").read_text())
    (tmp_path / "exp.yaml").write_text(
        "name: e\ntopology: topo.yaml\nduration: 1s\nprotocol: {name: sequencer}\n"
        "workload: {rate: 1/s}\nmanagement: {tls: true, key: dsa}\n")
    with pytest.raises(SpecError) as err:
        load_experiment(tmp_path / "exp.yaml")
    assert str(err.value).startswith(f"{tmp_path / 'exp.yaml'}:6: management.key: DSA keys")


def test_https_node_verifies_against_the_run_ca(https_node: tuple[str, Path]) -> None:
    url, ca = https_node
    assert url.startswith("https://")
    client = MgmtClient(url, TOKEN, cafile=ca)
    assert client.version()["agent"]
    assert client.read("testbed:type=Clock", "OffsetMs") is not None
    with pytest.raises(MgmtError, match="rejected the token"):
        MgmtClient(url, "wrong", cafile=ca).version()


def test_https_node_is_refused_without_or_with_another_ca(https_node: tuple[str, Path],
                                                          tmp_path: Path) -> None:
    url, _ = https_node
    with pytest.raises(MgmtError, match="TLS failed.*system CAs"):
        MgmtClient(url, TOKEN).version()  # the system trust store does not know the run's CA
    other = make_run_certs(tmp_path / "other", "zzz", {"h1": ["127.0.0.1"]})
    assert other
    with pytest.raises(MgmtError, match="TLS failed.*run's CA"):
        MgmtClient(url, TOKEN, cafile=tmp_path / "other" / "certs" / "ca.pem").version()
    with pytest.raises(MgmtError):  # plain HTTP to the HTTPS port gets nothing
        MgmtClient(url.replace("https://", "http://"), TOKEN, timeout_s=2).version()


def test_https_node_refuses_tls_below_1_2(https_node: tuple[str, Path]) -> None:
    """docs/security.md: management TLS is 1.2 at least; a client offering only TLS 1.1
    (its own floor lowered as far as OpenSSL goes) gets no handshake, one offering 1.2 does."""
    url, ca = https_node
    host, port = url.removeprefix("https://").split("/")[0].rsplit(":", 1)

    def handshake(version: ssl.TLSVersion) -> str:
        ctx = ssl.create_default_context(cafile=str(ca))
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
        ctx.minimum_version = ssl.TLSVersion.TLSv1
        ctx.maximum_version = version
        with socket.create_connection((host, int(port)), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname=host) as tls:
            return str(tls.version())

    assert handshake(ssl.TLSVersion.TLSv1_2) == "TLSv1.2"
    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(ssl.TLSVersion.TLSv1_1)


def test_a_stalled_tls_handshake_does_not_block_other_clients(https_node: tuple[str, Path]
                                                             ) -> None:
    url, ca = https_node
    host, port = url.split("//")[1].split("/")[0].split(":")
    idle = [socket.create_connection((host, int(port))) for _ in range(5)]  # never handshake
    try:
        slow = socket.create_connection((host, int(port)))
        slow.sendall(b"\x16\x03\x01")  # half a ClientHello
        assert MgmtClient(url, TOKEN, cafile=ca).version()["agent"]
    finally:
        for s in [*idle, slow]:
            s.close()


@pytest.mark.timing  # a real-time run (failed under load: see the docstring)
def test_local_run_with_https_management_and_udp_aead(tmp_path: Path) -> None:
    """The nodes must still serve while `testbed mgmt` (a fresh interpreter: seconds on a
    loaded machine) talks to them: the run is long (30 s), and the test ends it as the
    orchestrator's drain does, with `testbed:type=Node` `stop` over the run's mutual TLS."""
    (tmp_path / "topo.yaml").write_text((ROOT / "topologies" / "two-sites.yaml").read_text())
    (tmp_path / "exp.yaml").write_text(
        "name: tls\ntopology: topo.yaml\nbackend: local\nduration: 30s\ndrain: 1s\n"
        "transport: udp-aead\nmanagement: {tls: true, mutual: true}\n"
        "protocol: {name: sequencer, params: {sequencer: h1}}\n"
        "workload: {rate: 50/s, size: 1KiB}\n")
    out = tmp_path / "runs"
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "run", str(tmp_path / "exp.yaml"),
                             "--out", str(out), "--no-analyze"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        control = None
        while time.monotonic() < deadline and proc.poll() is None:
            found = list(out.glob("*/nodes/h2/control.json")) if out.exists() else []
            if found:
                control = found[0]
                break
            time.sleep(0.1)
        assert control is not None, "h2 never served management"
        run = control.parents[2]
        assert json.loads(control.read_text())["scheme"] == "https"
        mgmt = subprocess.run([sys.executable, "-m", "testbed", "mgmt", "h2", "read",
                               "testbed:type=Transport", "--run", run.name, "--runs", str(out)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
        assert mgmt.returncode == 0, mgmt.stdout + mgmt.stderr
        transport = json.loads(mgmt.stdout)
        assert transport["Transport"] == "udp-aead" and transport["Rejected"] == 0
        lock = (run / "spec.lock.yaml").read_text()
        assert "key: ecdsa-p256" in lock and "tls: true" in lock
        ctx = ssl.create_default_context()  # without the run's CA: refused
        info = json.loads(control.read_text())
        with pytest.raises(ssl.SSLCertVerificationError), socket.create_connection(
                (info["host"], info["port"]), timeout=5) as raw:
            ctx.wrap_socket(raw, server_hostname=info["host"])
        from testbed.rundir import RunDir

        rundir = RunDir.open(run)
        for host in ("h1", "h2", "h3", "h4"):
            # A node may close the connection as it stops (testbed/drain.py does the same);
            # one that missed it ends at the 30 s workload's end anyway.
            with contextlib.suppress(MgmtError, OSError):
                rundir.mgmt_client(host).exec("testbed:type=Node", "stop")
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output
    for host in ("h1", "h2", "h3", "h4"):
        assert "Traceback" not in (run / "nodes" / host / "node.log").read_text()


def test_testbed_certs_issues_for_every_node_of_a_run(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "20260101T000000Z-x-abc123"
    for i, host in enumerate(("h1", "h2")):
        (run / "nodes" / host).mkdir(parents=True)
        cfg = _node_cfg("", "")
        cfg = NodeConfig(**{**cfg.__dict__, "name": host, "control_host": f"127.0.0.{i + 1}"})
        cfg.write(run / "nodes" / host / "node.json")
    (run / "journal.jsonl").write_text("")
    done = subprocess.run([sys.executable, "-m", "testbed", "certs", str(run), "--key",
                           "rsa-2048"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "250"})
    assert done.returncode == 0, done.stdout + done.stderr
    for host, addr in (("h1", "127.0.0.1"), ("h2", "127.0.0.2")):
        cert = x509.load_pem_x509_certificate((run / "certs" / f"{host}.pem").read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == [addr]
    bad = subprocess.run([sys.executable, "-m", "testbed", "certs", str(run), "--key", "dsa"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "DSA keys cannot be used" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_mutual_tls_wants_a_client_certificate_from_the_run_ca(tmp_path: Path) -> None:
    certs = make_run_certs(tmp_path, "abc123", {"h1": ["127.0.0.1"], "orchestrator": []})
    ca_pem = (tmp_path / "certs" / "ca.pem").read_text()
    cfg = _node_cfg(certs["h1"].cert_pem, certs["h1"].key_pem)
    cfg = NodeConfig(**{**cfg.__dict__, "tls_ca": ca_pem, "mgmt_mutual": True})
    make_run_certs(tmp_path / "other", "zzz", {"orchestrator": []})
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = ManagementServer(build_demo_registry()[0], "127.0.0.1", 0, TOKEN,
                              ssl_context=_server_tls(cfg))
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(5)
    try:
        ca = tmp_path / "certs" / "ca.pem"
        ok = MgmtClient(server.url, TOKEN, cafile=ca, client_cert=certs["orchestrator"].cert_path)
        assert ok.version()["agent"]
        with pytest.raises(MgmtError):  # no client certificate
            MgmtClient(server.url, TOKEN, cafile=ca).version()
        with pytest.raises(MgmtError):  # a client certificate from another CA
            MgmtClient(server.url, TOKEN, cafile=ca,
                       client_cert=tmp_path / "other" / "certs" / "orchestrator.pem").version()
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


@pytest.mark.parametrize("backend,transport,message", [
    ("sim", "udp-aead", "needs real sockets"), ("sim", "tls", "needs real sockets"),
    ("docker", "udp-aead", "node image has no `cryptography`")])
def test_transports_a_backend_cannot_carry_are_refused(tmp_path: Path, backend: str,
                                                       transport: str, message: str) -> None:
    (tmp_path / "topo.yaml").write_text((ROOT / "topologies" / "two-sites.yaml").read_text())
    (tmp_path / "exp.yaml").write_text(
        f"name: e\ntopology: topo.yaml\nbackend: {backend}\nduration: 1s\n"
        f"protocol: {{name: sequencer}}\nworkload: {{rate: 1/s}}\ntransport: {transport}\n")
    with pytest.raises(SpecError) as err:
        load_experiment(tmp_path / "exp.yaml")
    assert str(err.value).startswith(f"{tmp_path / 'exp.yaml'}:7: transport: ")
    assert message in str(err.value)


@pytest.mark.parametrize("protocol", ["leader", "timestamp-leader"])
def test_a_protocol_with_a_latency_bound_is_refused_over_tls(tmp_path: Path,
                                                            protocol: str) -> None:
    """docs/security.md: over `tls` loss becomes delay, so no 004 bound can hold."""
    (tmp_path / "topo.yaml").write_text((ROOT / "topologies" / "two-sites.yaml").read_text())
    (tmp_path / "exp.yaml").write_text(
        f"name: e\ntopology: topo.yaml\nbackend: local\nduration: 1s\n"
        f"protocol: {{name: {protocol}}}\nworkload: {{rate: 1/s}}\ntransport: tls\n")
    with pytest.raises(SpecError) as err:
        load_experiment(tmp_path / "exp.yaml")
    assert str(err.value) == (f"{tmp_path / 'exp.yaml'}:7: transport: {protocol} promises a "
                              "latency bound, which transport tls (TCP: loss becomes delay) "
                              "cannot keep; use udp or udp-aead")
    (tmp_path / "exp.yaml").write_text(
        (tmp_path / "exp.yaml").read_text().replace("transport: tls", "transport: udp-aead"))
    load_experiment(tmp_path / "exp.yaml")


def test_up_over_tls_with_https_management_and_the_fault_cli(tmp_path: Path) -> None:
    """`testbed up --transport tls --mgmt-tls`, then the fault CLI and `testbed mgmt`, both
    verifying the nodes against the run's CA; a crashed and restarted node rejoins."""
    from testbed.rundir import RunDir

    out = str(tmp_path / "runs")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "testbed", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "COLUMNS": "200"})

    up = cli("up", "topologies/two-sites.yaml", "--transport", "tls", "--mgmt-tls",
             "--out", out)
    assert up.returncode == 0, up.stdout + up.stderr
    run = RunDir.open(next(p for p in Path(out).iterdir() if p.is_dir()))
    try:
        assert run.control_url("h2").startswith("https://")
        jump = cli("fault", "clock", "h2", "--jump", "50ms", "--runs", out)
        assert jump.returncode == 0, jump.stderr
        assert cli("fault", "crash", "h4", "--runs", out).returncode == 0
        restart = cli("fault", "restart", "h4", "--runs", out)
        assert restart.returncode == 0, restart.stderr
        time.sleep(1.0)
        read = cli("mgmt", "h4", "read", "testbed:type=Transport", "--runs", out)
        assert read.returncode == 0, read.stderr
        transport = json.loads(read.stdout)
        assert transport["Transport"] == "tls" and transport["Rejected"] == 0
        assert transport["DatagramsReceived"] > 0  # the peers redialled the new h4
        clock = json.loads(cli("mgmt", "h2", "read", "testbed:type=Clock", "OffsetMs",
                               "--runs", out).stdout)
        assert clock == 50.0
    finally:
        assert cli("teardown", run.run_id, "--runs", out).returncode == 0
