"""The certificate utility (`testbed certs`): a CA per run and one certificate per node.

GORDA D3.5 section 4.4 sets up keys and certificates "using a certificate management utility"
(Java's keytool there); this is ours, with the `cryptography` package. Key algorithms:
ECDSA P-256 (the default) and RSA-2048. DSA is refused: TLS 1.3 has no DSA signature scheme
and OpenSSL 3's default security level rejects it for TLS 1.2 as well.

Layout, in the run directory::

    certs/ca.pem          the run's CA certificate (what clients verify against)
    certs/ca.key          its private key (mode 0600; needed only to issue more)
    certs/<host>.pem      the node's certificate: CN and DNS SAN = host name, IP SANs = the
                          addresses it serves management on
    certs/<host>.key      the node's private key (mode 0600)

Certificates are valid from an hour ago (clock offsets) for 30 days: a run's lifetime.

`testbed serve` on a non-loopback address uses the same utility for its own CA and
certificate (`serve_names`): the certificate names every name a browser or curl on the network
may use to reach the bind address, so verification against the CA succeeds from the
machine's address or its host name, not only from the loopback.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import re
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ALGORITHMS = ("ecdsa-p256", "rsa-2048")
VALID_DAYS = 30
WILDCARDS = ("0.0.0.0", "::", "")  # binds that listen on every address of the machine
LOOPBACK = ("localhost", "127.0.0.1", "::1")
# A DNS name a certificate can carry (RFC 5280 dNSName: ASCII labels, a leading `*.` wildcard).
_DNS_NAME = re.compile(r"^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
                       r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?$")


class CertError(ValueError):
    """A certificate request that cannot be honoured (e.g. an unsupported algorithm)."""


@dataclass(frozen=True)
class NodeCert:
    host: str
    cert_pem: str
    key_pem: str
    cert_path: Path
    key_path: Path


def check_algorithm(algorithm: str) -> str:
    if algorithm == "dsa" or algorithm.startswith("dsa-"):
        raise CertError("DSA keys cannot be used: TLS 1.3 has no DSA signature scheme and "
                        "OpenSSL 3 refuses them at its default security level; use "
                        "ecdsa-p256 or rsa-2048")
    if algorithm not in ALGORITHMS:
        raise CertError(f"unknown key algorithm {algorithm!r}; use one of "
                        f"{', '.join(ALGORITHMS)}")
    return algorithm


def _new_key(algorithm: str) -> ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey:
    if check_algorithm(algorithm) == "rsa-2048":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, private: bool) -> None:
    if private:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "testbed"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(directory: Path, run_id: str, algorithm: str = "ecdsa-p256"
            ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey]:
    """A fresh CA in `directory` (ca.pem, ca.key)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = _new_key(algorithm)
    now = dt.datetime.now(dt.UTC)
    name = _name(f"testbed run {run_id} CA")
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    _write(directory / "ca.key", _key_pem(key), private=True)
    _write(directory / "ca.pem", cert.public_bytes(serialization.Encoding.PEM), private=False)
    return cert, key


def issue(directory: Path, host: str, addresses: list[str], ca_cert: x509.Certificate,
          ca_key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey,
          algorithm: str = "ecdsa-p256") -> NodeCert:
    """A certificate for `host`, valid as server and client (mutual TLS), signed by the CA."""
    key = _new_key(algorithm)
    now = dt.datetime.now(dt.UTC)
    sans: list[x509.GeneralName] = [x509.DNSName(host)]
    for a in addresses:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(a)))
        except ValueError:
            sans.append(x509.DNSName(a))
    cert = (x509.CertificateBuilder().subject_name(_name(host))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = _key_pem(key)
    cert_path, key_path = directory / f"{host}.pem", directory / f"{host}.key"
    _write(cert_path, cert_pem, private=False)
    _write(key_path, key_pem, private=True)
    return NodeCert(host, cert_pem.decode(), key_pem.decode(), cert_path, key_path)


def make_run_certs(run_path: Path, run_id: str, hosts: dict[str, list[str]],
                   algorithm: str = "ecdsa-p256") -> dict[str, NodeCert]:
    """The run's CA and one certificate per host (name -> addresses it serves on), in
    `run_path/certs/`. A CA already there is kept, so certificates issued later still verify
    against what clients trust."""
    directory = run_path / "certs"
    check_algorithm(algorithm)
    if (directory / "ca.pem").exists() and (directory / "ca.key").exists():
        ca_cert = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
        loaded = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise CertError(f"{directory / 'ca.key'} is not an ECDSA or RSA key")
        ca_key = loaded
    else:
        ca_cert, ca_key = make_ca(directory, run_id, algorithm)
    return {h: issue(directory, h, addrs, ca_cert, ca_key, algorithm)
            for h, addrs in hosts.items()}


def machine_addresses() -> list[str]:
    """The addresses of this machine's interfaces, loopback included, link-local ones left
    out (a URL needs their zone): `ip -json address`. CertError when it cannot be listed."""
    try:
        out = subprocess.run(["ip", "-json", "address", "show"], capture_output=True,
                             text=True, check=True, timeout=10).stdout
        links = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise CertError(f"cannot list this machine's addresses (ip -json address: {exc}); "
                        "bind a single address with --host") from None
    return [a["local"] for link in links for a in link.get("addr_info", [])
            if a.get("local") and a.get("scope") != "link"]


def check_name(name: str) -> str:
    """`name` as a certificate can carry it: an IP address or a DNS name; CertError
    otherwise."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    if len(name) > 253 or not _DNS_NAME.match(name):
        raise CertError(f"{name!r} is neither an IP address nor a DNS name (ASCII letters, "
                        "digits and hyphens, dot-separated)")
    return name.rstrip(".")


def serve_names(host: str, extra: Sequence[str] = ()) -> list[str]:
    """What the certificate of a server bound to `host` names, once each: every address of
    the machine it listens on for a wildcard bind (0.0.0.0: the IPv4 ones; ::), else `host`
    itself; the machine's host name and fully qualified name; the loopback names; and
    `extra` (`--tls-name`)."""
    names = [check_name(n) for n in extra]
    if host in WILDCARDS:  # 0.0.0.0 listens on IPv4 only, :: (dual-stack) on both
        bound = [a for a in machine_addresses() if host != "0.0.0.0" or ":" not in a]
    else:
        bound = [host]
    found = [*bound, socket.gethostname(), socket.getfqdn(), *LOOPBACK, *names]
    return list(dict.fromkeys(n for n in found if n))
