"""The `mininet` backend (root): one Mininet host (a network namespace) per emulated host.

Two Linux bridges per run (Mininet's LinuxBridge, no controller, no Open vSwitch: docs/platform.md):
  data     `tb<run>d`: each host's `d0`, addresses in 198.18.0.0/16 (or the topology's own,
           within 198.18.0.0/15), shaped by the applier on `d0` egress;
  control  `tb<run>c`: each host's `c0` plus an address on the bridge itself in the root
           namespace, 198.19.<k>.0/24 with a per-run <k>. Never shaped (docs/architecture.md
           decision 4); 198.19.0.0/16 is the other half of the benchmarking range we own.
Every bridge, veth end, namespace holder, qdisc, iptables rule and process is journaled before
it is created; a failure during up() rolls everything back.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from collections.abc import Sequence
from typing import Any

from nodes.config import NodeConfig
from nodes.faults import Controls
from testbed.backends.addressing import DATA_DEV, DATA_NET, data_addresses
from testbed.backends.base import STARTUP_NS, BackendError, Capabilities, HostAddress, Realised
from testbed.backends.bridges import allow_bridged
from testbed.backends.nodeprocs import NodeProcesses
from testbed.backends.reservations import reservations_as_htb
from testbed.backends.shaped import ShapedHosts
from testbed.capture import Capture, CaptureOptions
from testbed.faults.nodeside import NodeSideFaults
from testbed.hosts.base import HostError
from testbed.hosts.netns import NetnsHost
from testbed.pathcheck import PING_WORKERS, ping_pairs
from testbed.processes import start_time
from testbed.rundir import RUN_ENV, RunDir
from testbed.shaping.auto import make_applier
from testbed.shaping.plan import HostPlan, host_plans
from testbed.spec.topology import PathMatrix, TopologySpec
from testbed.teardown import undo

DATA_PORT = 7000
CONTROL_DEV = "c0"
NODE_BOOT_NS = 500_000_000  # per node, on top of STARTUP_NS (booting nodes share the cores)
IFNAMSIZ = 15
#: Nodes booting at once (NodeProcesses.start_all). Each boot is an interpreter start (0.32 s
#: of CPU). On a 2-core machine shared with other work, 30 nodes booted in 6.0-6.6 s all at
#: once and in 17.9-18.4 s four at a time (`testbed up` of topologies/regions-30.yaml,
#: interleaved, load 12-24: a small window only loses CPU share to the other work), so up to
#: 32 boot together; above that, a hundred interpreters at once are bounded to 32.
NODES_AT_ONCE = 32


def check_ifname(name: str) -> str:
    if len(name) > IFNAMSIZ:
        raise BackendError(f"interface name {name!r} is longer than the kernel's 15 characters")
    return name


def control_subnet(run_id: str) -> ipaddress.IPv4Network:
    """A /24 of 198.19.0.0/16 that no interface in the root namespace uses yet."""
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    start = int(run_id, 16) % 254 + 1
    for k in range(254):
        net = ipaddress.IPv4Network(f"198.19.{(start + k) % 254 + 1}.0/24")
        if f"198.19.{net.network_address.packed[2]}." not in used:
            return net
    raise BackendError("every 198.19.x.0/24 control subnet is in use; tear down old runs")


class MininetBackend(ShapedHosts):
    name = "mininet"
    capabilities = Capabilities(inprocess_shaping=False, capture=True)
    takes_options = True

    def __init__(self, run: RunDir, topology: TopologySpec, paths: PathMatrix,
                 applier: str = "auto", capture: CaptureOptions | None = None, seed: int = 1):
        super().__init__(run, topology, paths)
        self.applier = make_applier(applier, run, seed)
        self.capture = Capture(run, capture) if capture else None
        self.ns: dict[str, NetnsHost] = {}
        self.plans: dict[str, HostPlan] = {}
        self.addresses: dict[str, HostAddress] = {}
        self.nodes = NodeProcesses(run, host_of=lambda h: self.ns[h])
        # deploy() starts the nodes one after another, each until its management endpoint is
        # up: 0.4-0.5 s a node on a loaded 2-core machine. The workload start leaves time for
        # all of them, so that a protocol with a common epoch (docs/qos.md) finds every peer
        # listening at the configured start.
        self.startup_ns = STARTUP_NS + NODE_BOOT_NS * len(paths.hosts)
        self.node_side = NodeSideFaults(run, paths.hosts, self.nodes.alive)
        # Process faults by signal; partitions with iptables in the host namespaces and link
        # changes through the shaper (ShapedHosts); clocks and management through the nodes'
        # own endpoints on the control network.
        self.controls = Controls(process=self.nodes, network=self, node=self.node_side)
        self.net: Any = None
        self.boot_s = 0.0  # deploy(): seconds until the last node was up

    # -- up -----------------------------------------------------------------------------------
    def up(self) -> Realised:
        if os.geteuid() != 0:
            raise BackendError("the mininet backend needs root; run with sudo or use --backend "
                               "local")
        try:
            return self._up()
        except Exception as exc:
            undo(self.run)
            if isinstance(exc, BackendError):
                raise
            raise BackendError(f"mininet bring-up failed and was rolled back: {exc}") from exc

    def _up(self) -> Realised:
        """Hosts and data links through Mininet (its cost is plain Mininet's); the control
        veths in one `ip -batch` of the root namespace; each host's own configuration (control
        address, static neighbours, no IPv6) as one script that every host's shell runs side
        by side; the shaping plans through the applier's `apply_all` (all hosts at once).
        Journal entries go in batches, each batch before the resources it names exist (a
        namespace's pid the instant after; its shell carries the run id until then)."""
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.nodelib import LinuxBridge

        setLogLevel("error")  # its bridge-nf warnings are handled by allow_bridged()

        j, prefix = self.run.journal, f"tb{self.run.run_id}"
        data_br, ctl_br = check_ifname(prefix + "d"), check_ifname(prefix + "c")
        ctl_net = control_subnet(self.run.run_id)
        ctl_ips = list(ctl_net.hosts())
        data_ip = data_addresses(self.topology)
        hosts = self.paths.hosts
        # Mininet's shells and the commands it runs inherit the run id, so a kill mid-build
        # still leaves them findable by teardown (processes.run_processes).
        old_env = os.environ.get(RUN_ENV)
        os.environ[RUN_ENV] = self.run.run_id
        try:
            # No autoStaticArp: Mininet's runs one `arp -s` shell round trip per ordered pair
            # (9,900 at 100 hosts, most of the old bring-up); each host's script below sets its
            # neighbours in one `ip -batch`.
            net = Mininet(topo=None, switch=LinuxBridge, controller=None, build=False,
                          autoSetMacs=True, autoStaticArp=False, waitConnected=False)
            self.net = net
            j.append_many([{"op": "create", "kind": "link", "id": f"link:{br}", "name": br}
                           for br in (data_br, ctl_br)])
            allow_bridged(j, prefix, [data_br, ctl_br])
            sd = net.addSwitch(data_br, dpid="1")
            sc = net.addSwitch(ctl_br, dpid="2")
            j.append_many([{"op": "create", "kind": "process", "id": f"shell:{sw.name}",
                            "pid": sw.pid, "starttime": start_time(sw.pid),
                            "argv": ["mininet switch shell"]} for sw in (sd, sc)])
            mn_hosts = {}
            for host in hosts:
                h = net.addHost(host, ip=f"{data_ip[host]}/{DATA_NET.prefixlen}")
                mn_hosts[host] = h
                self.ns[host] = NetnsHost(host, h.pid, start_time(h.pid))
            # The namespaces (the instant after their holders exist), then every veth end
            # before any is made. A veth's `netns` names the namespace whose removal also
            # removes it (teardown marks it instead of deleting it).
            records = [{"op": "create", "kind": "netns", "id": f"netns:{host}",
                        "pid": self.ns[host].pid, "starttime": self.ns[host].starttime,
                        "host": host} for host in hosts]
            for i, host in enumerate(hosts):
                for br in (data_br, ctl_br):
                    port = check_ifname(f"{br}{i}")
                    records.append({"op": "create", "kind": "link", "id": f"link:{port}",
                                    "name": port, "netns": f"netns:{host}"})
            j.append_many(records)
            # The shaping daemons need only their namespaces: they start while the links are
            # built (an applier without `launch` does everything in apply_all below).
            self.plans = host_plans(self.topology, self.paths, data_ip, DATA_DEV)
            launch = getattr(self.applier, "launch", None)
            if launch is not None:
                launch([(self.ns[host], self.plans[host]) for host in hosts], j)
            for i, host in enumerate(hosts):
                net.addLink(mn_hosts[host], sd, intfName1=DATA_DEV,
                            intfName2=check_ifname(f"{data_br}{i}"))
            net.build()
            for sw in (sd, sc):
                sw.start([])
        finally:
            if old_env is None:
                os.environ.pop(RUN_ENV, None)
            else:
                os.environ[RUN_ENV] = old_env
        # The control plane: one veth a host, the host end moved into its namespace as it is
        # made, all in one `ip -batch` (Mininet's addLink is several commands a link).
        gw = f"{ctl_ips[-1]}/{ctl_net.prefixlen}"
        batch = [f"addr add {gw} dev {ctl_br}"]
        for i, host in enumerate(hosts):
            port = f"{ctl_br}{i}"
            batch += [f"link add {port} type veth peer name {CONTROL_DEV} netns "
                      f"{self.ns[host].pid}",
                      f"link set {port} master {ctl_br} up"]
        _ip_batch(batch)
        macs = {host: mn_hosts[host].MAC() for host in hosts}
        scripts = {}
        for i, host in enumerate(hosts):
            lines = [f"addr add {ctl_ips[i]}/{ctl_net.prefixlen} dev {CONTROL_DEV}",
                     f"link set {CONTROL_DEV} up"]
            lines += [f"neigh replace {data_ip[dst]} lladdr {macs[dst]} dev {DATA_DEV} "
                      "nud permanent" for dst in hosts if dst != host and macs[dst]]
            scripts[host] = lines
            self.addresses[host] = HostAddress(data_ip[host], DATA_PORT, str(ctl_ips[i]))
        configure_hosts(self.run, mn_hosts, scripts)
        self.applier.apply_all([(self.ns[host], self.plans[host]) for host in hosts], j)
        return Realised(dict(self.addresses), dict(self.plans))

    # -- nodes --------------------------------------------------------------------------------
    def deploy(self, configs: list[NodeConfig]) -> None:
        if self.capture:
            for host in self.paths.hosts:
                self.capture.start(self.ns[host], DATA_DEV)
            self.capture.wait_listening()
        self.boot_s = self.nodes.start_all(
            [reservations_as_htb(cfg, DATA_DEV, self.ns[cfg.name].pid, self.ns[cfg.name].starttime,
                                 self.run.journal) for cfg in configs], at_once=NODES_AT_ONCE)

    def wait(self, timeout_s: float) -> bool:
        return self.nodes.wait(timeout_s)

    def collect(self) -> None:
        self.nodes.stop_all()
        if self.capture:
            self.capture.stop()

    def down(self) -> None:
        self.collect()
        undo(self.run)

    # -- measurement --------------------------------------------------------------------------
    def measure_rtt(self, count: int = 5, interval_s: float = 0.05,
                    pairs: Sequence[tuple[str, str]] | None = None,
                    workers: int = PING_WORKERS) -> dict[tuple[str, str], float | None]:
        """Median ping RTT in ms for every ordered pair, or for `pairs` (None when no reply
        came back); at most `workers` ping processes at once (testbed/pathcheck.py)."""
        if pairs is None:
            pairs = [(a, b) for a in self.paths.hosts for b in self.paths.hosts if a != b]
        return ping_pairs(pairs, lambda h: self.ns[h].command_prefix(),
                          {h: addr.data for h, addr in self.addresses.items()},
                          count=count, interval_s=interval_s, workers=workers)


def _ip_batch(lines: list[str]) -> None:
    proc = subprocess.run(["ip", "-batch", "-"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BackendError(f"`ip -batch` in the root namespace failed: {proc.stderr.strip()}")


def configure_hosts(run: RunDir, shells: dict[str, Any], scripts: dict[str, list[str]]) -> None:
    """Each host's `ip -batch` script (kept in the run directory, hosts/<host>.ip) and IPv6 off,
    run by every host's Mininet shell at once: one round trip a host, all in flight together."""
    d = run.path / "hosts"
    d.mkdir(exist_ok=True)
    for host, lines in scripts.items():
        (d / f"{host}.ip").write_text("\n".join(lines) + "\n")
    for host, sh in shells.items():
        sh.sendCmd(f"ip -batch {d.resolve() / (host + '.ip')} 2>&1; echo tb-rc=$?; "
                   "sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
    failed = []
    for host, sh in shells.items():
        out = sh.waitOutput()
        if "tb-rc=0" not in out:
            failed.append(f"{host}: {out.strip()[-300:]}")
    if failed:
        raise BackendError(f"configuring {len(failed)} host(s) failed: {failed[0]}")


def rtt_report(paths: PathMatrix, measured: dict[tuple[str, str], float | None],
               tolerance: float = 0.10, slack_ms: float = 1.0) -> list[dict[str, Any]]:
    """Configured vs measured RTT per pair; `off` marks pairs off by more than 10% + 1 ms."""
    rows = []
    for (a, b), got in sorted(measured.items()):
        want = (paths.get(a, b).delay_ns + paths.get(b, a).delay_ns) / 1e6
        off = got is None or abs(got - want) > tolerance * want + slack_ms
        rows.append({"src": a, "dst": b, "configured_ms": want, "measured_ms": got, "off": off})
    return rows


def bring_up(run: RunDir, topology: TopologySpec, applier: str = "auto"
             ) -> tuple[MininetBackend, dict[str, HostAddress], list[dict[str, Any]]]:
    """`testbed up TOPOLOGY --backend mininet`: the WAN up and left up, with the measured RTT
    matrix next to the configured one. The caller tears it down (testbed teardown)."""
    backend = MininetBackend(run, topology, topology.paths(), applier=applier)
    addresses = backend.up().addresses
    try:
        report = rtt_report(backend.paths, backend.measure_rtt())
    except (OSError, subprocess.SubprocessError, HostError) as exc:
        backend.down()
        raise BackendError(f"measuring the RTT matrix failed: {exc}") from exc
    return backend, addresses, report
