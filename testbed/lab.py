"""`testbed lab up --hosts N` / `testbed lab down`: a lab of N SSH hosts as containers, for
trying the `remote` backend without a cluster (docs/remote.md).

Each lab host is one container of the lab image (the node image plus Debian's openssh-server,
built here without a registry: testbed/images.py builds the base with debootstrap and the
openssh-server layer comes from the Debian mirror through the build's host network). It runs
sshd only; the `remote` backend's `prepare` playbook installs the node program into a venv on
it, as on a real machine. Hosts sit on two bridge networks of the lab's own:

  data     a free 198.18.x.0/24 (x >= 128: Mininet numbers its data hosts from 198.18.0.1),
           the interface the `remote` backend shapes and captures on;
  control  a free 198.19.y.0/24 (y >= 128), the SSH and management address; the bridge holds
           .254 in the root namespace, so the orchestrator reaches every host there.

The lab directory (`--dir`, default `lab/`) holds `tblab-<id>/`: a journal like a run's
(testbed/rundir.py; every container, network and FORWARD chain is journaled before it is
created and named `tblab-<id>-...`), the lab's SSH key and `inventory.yaml`, which
`--inventory` takes. `testbed lab down` replays the journal (testbed/teardown.py), so it works
after a killed `lab up` too, and removes nothing that is not the lab's.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console

from testbed.engine import EngineError, client, ensure_engine, short
from testbed.images import ImageError
from testbed.labimage import LabError, lab_image
from testbed.rundir import RunDir
from testbed.teardown import teardown

DEFAULT_DIR = Path("lab")
LAB_LABEL = "org.testbed.lab"
USER = "root"
SSH_READY_S = 30.0
# The container's command: the lab key is the only way in (no passwords), host keys are made
# at first start.
SSHD_CMD = ("printf '%s\\n' \"$TB_LAB_KEY\" > /root/.ssh/authorized_keys && "
            "chmod 600 /root/.ssh/authorized_keys && ssh-keygen -A >/dev/null && "
            "exec /usr/sbin/sshd -D -e -o PasswordAuthentication=no "
            "-o PermitRootLogin=prohibit-password")

lab_app = typer.Typer(help="A lab of SSH hosts (containers) for the remote backend.\n\n"
                      "Example: [bold]sudo testbed lab up --hosts 4[/]",
                      no_args_is_help=True)
console = Console()
err = Console(stderr=True)


def _free_subnets(docker: Any, second: int, count: int) -> list[ipaddress.IPv4Network]:
    from testbed.backends.bridges import used_subnets

    taken = used_subnets(docker)
    out = []
    for x in range(128, 254):
        net = ipaddress.IPv4Network(f"198.{second}.{x}.0/24")
        if not any(net.overlaps(t) for t in taken):
            out.append(net)
            if len(out) == count:
                return out
    raise LabError(f"no free 198.{second}.x.0/24 for the lab; `testbed lab down` old labs")


def lab_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith("tblab-")
                  and (p / "journal.jsonl").exists())


def up(n: int, root: Path = DEFAULT_DIR, spark: bool = False) -> Path:
    """Bring up a lab of `n` hosts; returns the inventory path.

    `spark`: hosts of the `testbed-lab-spark` image (a JRE and the orchestrator's pyspark,
    testbed/spark.py) with the lab's `share/` bind-mounted at the same path in every host,
    the shared filesystem the analysis job needs (inventory `spark: shared_dir`)."""
    import secrets

    import docker as sdk

    from testbed.backends.bridges import allow_bridged

    if os.geteuid() != 0:
        raise LabError("the lab needs root (containers, bridges); run with sudo")
    if not 1 <= n <= 200:
        raise LabError(f"--hosts must be between 1 and 200, not {n}")
    try:
        ensure_engine()
        if spark:
            from testbed.spark import spark_image

            image = spark_image()
        else:
            image = lab_image()
        docker = client()
    except (EngineError, ImageError) as exc:
        raise LabError(str(exc)) from None
    lab_id = secrets.token_hex(3)
    name = f"tblab-{lab_id}"
    path = root / name
    path.mkdir(parents=True)
    lab = RunDir(path, lab_id)
    j = lab.journal
    j.append("begin", lab=name, hosts=n)
    try:
        key = path / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f",
                        str(key)], check=True, capture_output=True)
        pub = (path / "id_ed25519.pub").read_text().strip()
        share = (path / "share").resolve()
        binds = {}
        if spark:
            share.mkdir()
            binds = {str(share): {"bind": str(share), "mode": "rw"}}
        data_net = _free_subnets(docker, 18, 1)[0]
        ctl_net = _free_subnets(docker, 19, 1)[0]
        nets = {}
        for kind, net in (("data", data_net), ("control", ctl_net)):
            nname, bridge = f"{name}-{kind}", f"tbl{lab_id}{kind[0]}"
            j.append("create", kind="docker-network", id=f"network:{nname}", name=nname,
                     subnet=str(net))
            ipam = sdk.types.IPAMConfig(pool_configs=[sdk.types.IPAMPool(
                subnet=str(net), gateway=str(net.network_address + 254))])
            docker.networks.create(nname, driver="bridge", ipam=ipam,
                                   labels={LAB_LABEL: lab_id},
                                   options={"com.docker.network.bridge.name": bridge,
                                            "com.docker.network.bridge.enable_ip_masquerade":
                                                "false"})
            nets[kind] = (nname, bridge)
        allow_bridged(j, name, [nets["data"][1], nets["control"][1]])
        hosts = [f"h{i + 1}" for i in range(n)]
        data_ips = [str(data_net.network_address + i + 1) for i in range(n)]
        ctl_ips = [str(ctl_net.network_address + i + 1) for i in range(n)]

        def make(i: int) -> dict[str, Any]:
            api = docker.api
            cname = f"{name}-{hosts[i]}"
            j.append("create", kind="container", id=f"container:{cname}", name=cname)
            cid = api.create_container(
                image, ["sh", "-c", SSHD_CMD], name=cname, hostname=hosts[i],
                environment={"TB_LAB_KEY": pub}, labels={LAB_LABEL: lab_id},
                # Other test suites on a shared machine stop and restart the engine; the lab
                # comes back with it (same addresses; new host keys, which nobody pins).
                host_config=api.create_host_config(cap_add=["NET_ADMIN"], binds=binds,
                                                   network_mode=nets["data"][0],
                                                   restart_policy={"Name": "unless-stopped"}),
                networking_config=api.create_networking_config({nets["data"][0]: (
                    api.create_endpoint_config(ipv4_address=data_ips[i]))}))["Id"]
            api.connect_container_to_network(cid, nets["control"][0], ipv4_address=ctl_ips[i])
            api.start(cid)
            return {"container": cname, "data_interface": _dev_of(docker, cid, data_ips[i])}

        with ThreadPoolExecutor(8) as pool:
            made = list(pool.map(make, range(n)))
        inventory = {
            "lab": name,
            "hosts": {h: {"address": ctl_ips[i], "port": 22, "user": USER,
                          "key": str(key.resolve()), "data_interface": made[i]["data_interface"],
                          "data_address": data_ips[i], "control_address": ctl_ips[i]}
                      for i, h in enumerate(hosts)},
        }
        if spark:
            from testbed.spark import SPARK_PYTHON

            inventory["spark"] = {"python": SPARK_PYTHON, "shared_dir": str(share)}
        inv = path / "inventory.yaml"
        inv.write_text(f"# The lab {name}'s hosts for `--inventory` (testbed/lab.py)\n"
                       + yaml.safe_dump(inventory, sort_keys=False))
        wait_ssh(inventory, key)
        (root / "latest").unlink(missing_ok=True)
        (root / "latest").symlink_to(name)
        return inv
    except Exception as exc:
        teardown(lab)
        if isinstance(exc, LabError):
            raise
        raise LabError(f"lab bring-up failed and was rolled back: {short(exc)}") from None
    finally:
        docker.close()


def _dev_of(docker: Any, cid: str, ip: str, tries: int = 20) -> str:
    """The container's interface holding `ip`. Asked until it answers with JSON: an exec into
    a container that has only just started (or that the engine is restarting, see the restart
    policy above) can return an error text or nothing."""
    links: Any = None
    for attempt in range(tries):
        try:
            out = docker.api.exec_start(
                docker.api.exec_create(cid, ["ip", "-j", "-4", "addr"])["Id"])
            links = json.loads(out)
        except Exception:  # noqa: BLE001 - not running yet / restarting: ask again
            time.sleep(0.25 * (attempt + 1))
            continue
        if isinstance(links, list):
            break
    if not isinstance(links, list):
        raise LabError(f"container {cid[:12]} never listed its interfaces (`ip -j addr`)")
    for link in links:
        if any(a.get("local") == ip for a in link.get("addr_info", [])):
            return str(link["ifname"])
    raise LabError(f"no interface of container {cid[:12]} holds {ip}")


def ssh_argv(host: dict[str, Any], key: Path | str) -> list[str]:
    """The argv prefix that runs a command on a lab host (its inventory entry)."""
    from testbed.hosts.ssh import SSHHost

    return SSHHost(str(host.get("name", host["address"])), host["address"], host["user"],
                   str(key), int(host.get("port", 22)), connect_timeout=5).command_prefix()


def wait_ssh(inventory: dict[str, Any], key: Path) -> None:
    deadline = time.monotonic() + SSH_READY_S
    waiting = dict(inventory["hosts"])
    while waiting:
        for h, spec in list(waiting.items()):
            if subprocess.run([*ssh_argv(spec, key), "true"], capture_output=True,
                              timeout=15).returncode == 0:
                waiting.pop(h)
        if waiting and time.monotonic() > deadline:
            raise LabError(f"sshd on {', '.join(waiting)} did not answer within "
                           f"{SSH_READY_S:.0f} s")
        if waiting:
            time.sleep(0.3)


def down(root: Path = DEFAULT_DIR, name: str | None = None) -> list[str]:
    """Remove one lab (by name) or every lab under `root`; returns what was removed."""
    removed = []
    for path in lab_dirs(root):
        if name and name not in path.name:
            continue
        lab = RunDir.open(path)
        lines = teardown(lab)
        removed += [f"{path.name}: {line}" for line in lines]
        latest = root / "latest"
        if latest.is_symlink() and os.readlink(latest) == path.name:
            latest.unlink()
    return removed


@lab_app.command("up")
def up_cmd(
    hosts: Annotated[int, typer.Option("--hosts", help="number of SSH hosts")] = 4,
    dir: Annotated[Path, typer.Option("--dir", help="where labs live")] = DEFAULT_DIR,
    spark: Annotated[bool, typer.Option(
        "--spark", help="hosts with a JRE and pyspark, and a shared directory, for "
        "`testbed spark up` (docs/remote.md)")] = False,
) -> None:
    """Start N SSH hosts (containers) and write their inventory.

    Example: [bold]sudo testbed lab up --hosts 4[/], then
    [bold]testbed run experiments/quickstart.yaml --backend remote --inventory
    lab/latest/inventory.yaml[/]
    """
    try:
        with console.status(f"starting {hosts} lab hosts"):
            inv = up(hosts, dir, spark)
    except LabError as exc:
        err.print(f"[red]error:[/] {exc}", highlight=False)
        raise typer.Exit(1) from None
    console.print(f"lab up: {hosts} hosts; inventory [bold]{inv}[/]")
    if spark:
        console.print(f"then: [bold]testbed spark up --inventory {inv}[/]")


@lab_app.command("down")
def down_cmd(
    name: Annotated[str | None, typer.Argument(help="lab name; default: every lab",
                                               metavar="LAB")] = None,
    dir: Annotated[Path, typer.Option("--dir", help="where labs live")] = DEFAULT_DIR,
) -> None:
    """Remove the lab's containers, networks and rules (from its journal; idempotent).

    Example: [bold]sudo testbed lab down[/]
    """
    removed = down(dir, name)
    for line in removed:
        console.print(f"  {line}", highlight=False)
    console.print(f"lab down: removed {len(removed)} resource(s)")
