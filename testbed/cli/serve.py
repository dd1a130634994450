"""`testbed serve`: the runs, nightly trend reports and explorations under some folders in the
browser (testbed/serve/, docs/serve.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from testbed.cli.common import console, fail
from testbed.rundir import DEFAULT_RUNS


def serve(
    runs: Annotated[list[Path] | None, typer.Option(
        "--runs", help="a folder of runs, nightlies or explorations (repeatable)")] = None,
    port: Annotated[int, typer.Option(help="TCP port")] = 8080,
    host: Annotated[str, typer.Option(
        help="address to bind; any but 127.0.0.1/localhost/::1 needs the token and TLS",
        metavar="ADDRESS")]
    = "127.0.0.1",
    state: Annotated[Path, typer.Option(
        help="where the token, Basic credential and TLS certificates are kept")]
    = Path(".testbed-serve"),
    tls_name: Annotated[list[str] | None, typer.Option(
        "--tls-name", metavar="NAME",
        help="a further host name or address the TLS certificate names, besides the "
             "machine's addresses and host name (repeatable; non-loopback --host only)")]
    = None,
) -> None:
    """Browse every run (sortable, filterable table; reports; comparisons), nightly trend
    report and exploration under the folders. Read-only.

    Example: [bold]testbed serve --runs runs --port 8080[/]

    On the network: [bold]testbed serve --host 0.0.0.0 --tls-name testbed.example.org[/]
    (verify with the state folder's certs/ca.pem)
    """
    import uvicorn

    from testbed.certs import CertError, check_name
    from testbed.serve.access import Credentials, is_local, server_certificate
    from testbed.serve.app import PortTaken, build_app, check_port

    folders = runs or [DEFAULT_RUNS]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise fail(f"not a folder: {', '.join(missing)}")
    try:
        check_port(host, port)
    except PortTaken as exc:
        raise fail(f"cannot listen on {host}:{port} ({exc.strerror}); pick another with "
                   "--port") from None
    options: dict[str, object] = {}
    credentials = None
    scheme = "http"
    if tls_name and is_local(host):
        raise fail("--tls-name: only with a non-loopback --host (loopback serves plain HTTP)")
    try:
        names = [check_name(n) for n in tls_name or []]
    except CertError as exc:
        raise fail(f"--tls-name: {exc}") from None
    if not is_local(host):
        try:
            cert, key, ca = server_certificate(state, host, names)
        except CertError as exc:
            raise fail(str(exc)) from None
        credentials = Credentials.load(state)
        options = {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
        scheme = "https"
        console.print(f"TLS with {cert} (CA {ca}); every request needs the token in "
                      f"{state / 'token'} (Authorization: Bearer, or ?token=) or the Basic "
                      f"credential in {state / 'basic'}", highlight=False)
    app = build_app(folders, credentials)
    shown = f"[{host}]" if ":" in host else host
    console.print(f"serving {', '.join(map(str, folders))} at {scheme}://{shown}:{port}/",
                  highlight=False)
    uvicorn.run(app, host=host, port=port, log_level="warning", **options)  # type: ignore[arg-type]
