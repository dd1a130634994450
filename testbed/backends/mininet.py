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
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.nodelib import LinuxBridge

        setLogLevel("error")  # its bridge-nf warnings are handled by allow_bridged()

        j, prefix = self.run.journal, f"tb{self.run.run_id}"
        data_br, ctl_br = check_ifname(prefix + "d"), check_ifname(prefix + "c")
        ctl_net = control_subnet(self.run.run_id)
        ctl_ips = list(ctl_net.hosts())
        data_ip = data_addresses(self.topology)
        # Mininet's shells and the commands it runs inherit the run id, so a kill mid-build
        # still leaves them findable by teardown (processes.run_processes).
        old_env = os.environ.get(RUN_ENV)
        os.environ[RUN_ENV] = self.run.run_id
        try:
            net = Mininet(topo=None, switch=LinuxBridge, controller=None, build=False,
                          autoSetMacs=True, autoStaticArp=True, waitConnected=False)
            self.net = net
            for br in (data_br, ctl_br):
                j.append("create", kind="link", id=f"link:{br}", name=br)
            allow_bridged(j, prefix, [data_br, ctl_br])
            sd = net.addSwitch(data_br, dpid="1")
            sc = net.addSwitch(ctl_br, dpid="2")
            for sw in (sd, sc):
                j.append("create", kind="process", id=f"shell:{sw.name}", pid=sw.pid,
                         starttime=start_time(sw.pid), argv=["mininet switch shell"])
            for i, host in enumerate(self.paths.hosts):
                h = net.addHost(host, ip=f"{data_ip[host]}/{DATA_NET.prefixlen}")
                ns = NetnsHost(host, h.pid, start_time(h.pid))
                j.append("create", kind="netns", id=f"netns:{host}", pid=ns.pid,
                         starttime=ns.starttime, host=host)
                self.ns[host] = ns
                for br, dev, sw in ((data_br, DATA_DEV, sd), (ctl_br, CONTROL_DEV, sc)):
                    port = check_ifname(f"{br}{i}")
                    j.append("create", kind="link", id=f"link:{port}", name=port)
                    net.addLink(h, sw, intfName1=dev, intfName2=port)
            net.build()
            for sw in (sd, sc):
                sw.start([])
        finally:
            if old_env is None:
                os.environ.pop(RUN_ENV, None)
            else:
                os.environ[RUN_ENV] = old_env
        gw = f"{ctl_ips[-1]}/{ctl_net.prefixlen}"
        subprocess.run(["ip", "addr", "add", gw, "dev", ctl_br], check=True, capture_output=True)
        for i, host in enumerate(self.paths.hosts):
            ns = self.ns[host]
            ns.run(["ip", "addr", "add", f"{ctl_ips[i]}/{ctl_net.prefixlen}", "dev",
                    CONTROL_DEV])
            ns.run(["ip", "link", "set", CONTROL_DEV, "up"])
            ns.run(["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"], check=False)
            self.addresses[host] = HostAddress(data_ip[host], DATA_PORT, str(ctl_ips[i]))
        self.plans = host_plans(self.topology, self.paths, data_ip, DATA_DEV)
        for host, plan in self.plans.items():
            self.applier.apply(self.ns[host], plan, j)
        return Realised(dict(self.addresses), dict(self.plans))

    # -- nodes --------------------------------------------------------------------------------
    def deploy(self, configs: list[NodeConfig]) -> None:
        if self.capture:
            for host in self.paths.hosts:
                self.capture.start(self.ns[host], DATA_DEV)
            self.capture.wait_listening()
        self.nodes.start_all([reservations_as_htb(cfg, DATA_DEV, self.ns[cfg.name].pid,
                                                  self.ns[cfg.name].starttime, self.run.journal)
                              for cfg in configs])

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
