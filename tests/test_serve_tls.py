"""`testbed serve` on a non-loopback bind: its certificate (testbed/certs.py `serve_names`)
names the machine's addresses, its host name and `--tls-name` names, so curl verifies it
against the state folder's CA from the machine's own address and by name (docs/security.md,
"testbed serve"). Only this machine's addresses are contacted; on a machine without a
non-loopback address the test makes one in a network namespace of its own (198.18.0.0/15)
and runs the server and curl there.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from tests.procs import stop_process

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
TLS_NAME = "testbed.example.org"
CURL_CONNECT_FAILED, CURL_TIMEOUT, CURL_BAD_CERT = 7, 28, 60

pytestmark = pytest.mark.skipif(shutil.which("curl") is None or shutil.which("ip") is None,
                                reason="needs curl and ip (apt-get install curl iproute2)")


def global_addresses(prefix: list[str]) -> list[str]:
    """The non-loopback, non-link-local addresses seen by `ip` run under `prefix`."""
    out = subprocess.run([*prefix, "ip", "-json", "address", "show"], capture_output=True,
                         text=True, check=True).stdout
    return [a["local"] for link in json.loads(out) for a in link.get("addr_info", [])
            if a.get("scope") == "global"]


@pytest.fixture
def where() -> Iterator[tuple[list[str], list[str]]]:
    """(command prefix, addresses): the machine's own non-loopback addresses, or, if it has
    none, one made on a veth pair in a namespace this fixture owns and removes."""
    found = global_addresses([])
    if found:
        yield [], found
        return
    if os.geteuid() != 0:
        pytest.fail("no non-loopback address here, and making one needs root")
    ns = f"tbtls{os.getpid()}"
    address = f"198.18.{os.getpid() % 250 + 1}.1"
    run = [["ip", "netns", "add", ns],
           ["ip", "-n", ns, "link", "set", "lo", "up"],
           ["ip", "-n", ns, "link", "add", "tls0", "type", "veth", "peer", "name", "tls1"],
           ["ip", "-n", ns, "address", "add", f"{address}/32", "dev", "tls0"],
           ["ip", "-n", ns, "link", "set", "tls1", "up"],
           ["ip", "-n", ns, "link", "set", "tls0", "up"]]
    try:
        for cmd in run:
            subprocess.run(cmd, check=True, capture_output=True)
        yield ["ip", "netns", "exec", ns], [address]
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def curl(prefix: list[str], ca: Path, token: str, url: str, *extra: str
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, "curl", "-sS", "--max-time", "5", "--cacert", str(ca),
                           "-H", f"Authorization: Bearer {token}", "-o", "/dev/null",
                           "-w", "%{http_code}", *extra, url],
                          capture_output=True, text=True, timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_curl_verifies_the_certificate_from_the_machine_address_and_names(
        tmp_path: Path, where: tuple[list[str], list[str]]) -> None:
    prefix, found = where
    ipv4 = [a for a in found if ":" not in a]
    bind, addresses = ("0.0.0.0", ipv4) if ipv4 else ("::", found)
    runs, state = tmp_path / "runs", tmp_path / "state"
    runs.mkdir()
    port = free_port()
    proc = subprocess.Popen(
        [*prefix, sys.executable, "-m", "testbed", "serve", "--runs", str(runs), "--state",
         str(state), "--host", bind, "--port", str(port), "--tls-name", TLS_NAME],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
    ca = state / "certs" / "ca.pem"
    try:
        first = f"https://{url_host(addresses[0])}:{port}/api/runs"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            token = (state / "token").read_text().strip() if (state / "token").exists() else ""
            if token and ca.exists():
                got = curl(prefix, ca, token, first)
                if got.returncode not in (CURL_CONNECT_FAILED, CURL_TIMEOUT):
                    break
            assert time.monotonic() < deadline, "testbed serve did not start listening"
            time.sleep(0.2)
        names = x509.load_pem_x509_certificate((state / "certs" / "serve.pem").read_bytes()
                                               ).extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value
        hostname = subprocess.run([*prefix, "hostname"], capture_output=True, text=True,
                                  check=True).stdout.strip()
        assert {hostname, TLS_NAME} <= set(names.get_values_for_type(x509.DNSName))
        ips = set(names.get_values_for_type(x509.IPAddress))
        assert {ipaddress.ip_address(a) for a in addresses} <= ips
        # From each of the machine's own addresses, and by the host name and --tls-name
        # (resolved to the first address): verified, and the token accepted.
        for address in addresses:
            got = curl(prefix, ca, token, f"https://{url_host(address)}:{port}/api/runs")
            assert (got.returncode, got.stdout) == (0, "200"), (address, got.stderr)
        for name in (hostname, TLS_NAME):
            got = curl(prefix, ca, token, f"https://{name}:{port}/api/runs", "--resolve",
                       f"{name}:{port}:{addresses[0]}")
            assert (got.returncode, got.stdout) == (0, "200"), (name, got.stderr)
        # A name the certificate does not carry fails verification: the checks are real.
        got = curl(prefix, ca, token, f"https://unnamed.invalid:{port}/api/runs", "--resolve",
                   f"unnamed.invalid:{port}:{addresses[0]}")
        assert got.returncode == CURL_BAD_CERT, got.stderr
    finally:
        stop_process(proc)


@pytest.mark.parametrize(("args", "message"), [
    (["--tls-name", "a b"], "--tls-name: 'a b' is neither an IP address nor a DNS name"),
    (["--host", "127.0.0.1", "--tls-name", "x.example"],
     "--tls-name: only with a non-loopback --host"),
])
def test_bad_tls_names_are_one_line_errors(tmp_path: Path, args: list[str],
                                           message: str) -> None:
    runs, state = tmp_path / "runs", tmp_path / "state"
    runs.mkdir()
    host = [] if "--host" in args else ["--host", "0.0.0.0"]
    proc = subprocess.run([sys.executable, "-m", "testbed", "serve", "--runs", str(runs),
                           "--state", str(state), "--port", str(free_port()), *host, *args],
                          cwd=ROOT, capture_output=True, text=True, env=ENV, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(f"error: {message}"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not state.exists()  # nothing half-created
