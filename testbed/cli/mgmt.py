"""A running node's management: `testbed mgmt` (Jolokia) and `testbed certs` (its TLS)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from testbed.cli.common import RunOpt, RunsOpt, active_run, cli_value, console, fail
from testbed.rundir import DEFAULT_RUNS, resolve_run


def certs(
    run_name: Annotated[str, typer.Argument(help="run id, directory name or path", metavar="RUN")],
    key: Annotated[str, typer.Option(help="key algorithm: ecdsa-p256 or rsa-2048",
                                     metavar="ALGORITHM")] = "ecdsa-p256",
    runs: RunsOpt = DEFAULT_RUNS,
) -> None:
    """Make the run's CA and a certificate per node, as Java's keytool does for JMX over TLS.

    Writes certs/ca.pem (what clients trust), certs/<host>.pem and certs/<host>.key (0600) in
    the run directory, for every host in its nodes/*/node.json, with the host's control
    address as IP SAN. An existing CA is kept, so certificates issued again still verify.
    `testbed run` does this itself for experiments with `management: {tls: true}`.

    Example: [bold]testbed certs 3fa9c1 --key rsa-2048[/]
    """
    from nodes.config import NodeConfig
    from testbed.certs import CertError, make_run_certs

    try:
        target = resolve_run(runs, run_name)
    except LookupError as exc:
        raise fail(str(exc)) from None
    hosts: dict[str, list[str]] = {}
    for path in sorted((target.path / "nodes").glob("*/node.json")):
        try:
            cfg = NodeConfig.read(path)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise fail(f"{path}: not a node configuration ({exc})") from None
        hosts[cfg.name] = [cfg.control_host]
    if not hosts:
        raise fail(f"run {target.run_id} has no nodes/*/node.json to issue certificates for")
    try:
        made = make_run_certs(target.path, target.run_id, hosts, key)
    except CertError as exc:
        raise fail(str(exc)) from None
    table = Table("host", "certificate", "key", "addresses", title=f"CA {target.ca_file}")
    for host, cert in made.items():
        table.add_row(host, str(cert.cert_path), str(cert.key_path), ", ".join(hosts[host]))
    console.print(table)


def mgmt(
    host: Annotated[str, typer.Argument(help="host name in the running testbed", metavar="HOST")],
    op: Annotated[str, typer.Argument(help="read, write, exec, list, search or version",
                                      metavar="OP")],
    args: Annotated[list[str] | None,
                    typer.Argument(help="MBEAN [ATTRIBUTE|OPERATION] [VALUE|ARGS...]")] = None,
    run_name: RunOpt = None,
    runs: RunsOpt = DEFAULT_RUNS,
) -> None:
    """Talk to a node's Jolokia management endpoint.

    Examples: [bold]testbed mgmt h2 read testbed:type=Clock OffsetMs[/],
    [bold]testbed mgmt h2 write testbed:type=Clock DriftPpm 50[/],
    [bold]testbed mgmt h2 exec testbed:type=Clock jump 50[/]
    """
    from testbed.mgmt import MgmtClient, MgmtError
    from testbed.runplan import read_plan

    try:
        target = active_run(run_name, runs)
        hosts = read_plan(target)["hosts"]
        if host not in hosts:
            raise LookupError(f"run {target.run_id} has no host {host!r}; its hosts are "
                              f"{', '.join(hosts)}")
        client: MgmtClient = target.mgmt_client(host)
    except LookupError as exc:
        raise fail(str(exc)) from None
    a = list(args or [])
    need = {"read": 1, "write": 3, "exec": 2, "list": 0, "search": 0, "version": 0}
    if op not in need:
        raise fail(f"unknown operation {op!r}; use one of {', '.join(need)}")
    if len(a) < need[op]:
        raise fail(f"`mgmt {op}` needs {need[op]} argument(s): see testbed mgmt --help")
    try:
        if op == "read":
            value = client.read(a[0], a[1] if len(a) > 1 else None)
        elif op == "write":
            value = client.write(a[0], a[1], cli_value(a[2]))
        elif op == "exec":
            value = client.exec(a[0], a[1], *[cli_value(x) for x in a[2:]])
        elif op == "list":
            value = client.list(a[0] if a else None)
        elif op == "search":
            value = client.search(a[0] if a else "*:*")
        else:
            value = client.version()
    except MgmtError as exc:
        raise fail(str(exc)) from None
    print(json.dumps(value, indent=2, default=str))


