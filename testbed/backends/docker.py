"""The `docker` backend (root): one container per emulated host, on the node image
(`testbed image build`, testbed/images.py).

Per run, two user-defined bridge networks (labelled `org.testbed.run=<run id>`):
  data     `tb-<run>-data`, bridge `tb<run>d`: a /24 of 198.19.0.0/16 picked from the run id
           (skipping any /24 a Docker network or a root-namespace address already uses), or the
           /24 holding the topology's own addresses; shaped by the applier;
  control  `tb<run>c`: another free 198.19.<y>.0/24, never shaped (docs/architecture.md decision
           4). The bridge holds the gateway (.254) in the root namespace, so the orchestrator
           reaches each node's management endpoint at its control address.
Mininet uses 198.18.0.0/16 for data and checks `ip addr` before taking a 198.19 control /24;
the bridges of these networks carry addresses, so the two never pick the same subnet.

Each host is a pod of two containers, as in Kubernetes: `tb-<run>-<host>-net` (`sleep
infinity`) owns the network namespace, with the shaping (the other helpers' appliers, entered
with nsenter from the root namespace, so `inprocess_shaping` is off) and tcpdump; `tb-<run>-<host>`
runs `python -m nodes` in that namespace with the run directory bind-mounted at /run/testbed.
So a crash (`docker kill`) and a restart (`docker start`, incarnation + 1 in node.json, as the
local backend does) keep addresses, shaping and the capture file; pause is `docker pause`.
Partitions, clock and management faults go through the nodes' own endpoints
(testbed/faults/nodeside.py); link changes go through the shaper. Every network, container
and the FORWARD chain is journaled before it is created (the containers of all hosts by name,
in one write, before the first exists).

At scale: the hosts' containers and shaping are made side by side, START_WORKERS at a time (the
engine serves concurrent requests; its container starts are what remains of `up`); `down`
stops the nodes side by side, then removes every container side by side over one engine
client, nodes before their sandboxes, so `undo` is left the shaping daemons, the networks
and the chain (the namespaces' qdiscs and rules went with their sandboxes).
"""

from __future__ import annotations

import ipaddress
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from rich.console import Console

from nodes.config import NodeConfig
from nodes.faults import Controls
from testbed.backends.base import (
    STARTUP_NS,
    BackendError,
    Capabilities,
    HostAddress,
    Realised,
)
from testbed.backends.bridges import allow_bridged
from testbed.backends.docker_net import (
    CONTROL,
    DATA,
    LABEL,
    data_addresses,
    pick_subnets,
)
from testbed.backends.reservations import reservations_as_htb
from testbed.backends.shaped import ShapedHosts
from testbed.capture import Capture, CaptureOptions
from testbed.engine import LOG as ENGINE_LOG
from testbed.engine import EngineError, client, ensure_engine, short
from testbed.faults.nodeside import NodeSideFaults
from testbed.faults.schedule import Action
from testbed.hosts.base import HostError
from testbed.hosts.container import ContainerHost
from testbed.images import ImageError, build, expected_tag, image_id, record_in_lock
from testbed.maelstrom import program_binds
from testbed.processes import start_time
from testbed.rundir import RunDir
from testbed.shaping.auto import make_applier
from testbed.shaping.plan import HostPlan, host_plans
from testbed.spec.topology import PathMatrix, TopologySpec
from testbed.teardown import undo

DATA_PORT = 7000
MOUNT = "/run/testbed"
STOP_GRACE_S = 5
START_WORKERS = 8
#: Per node on top of STARTUP_NS: deploy starts the capture and the node containers after the
#: workload's start time is fixed, and the engine starts containers one after another inside
#: (0.3 s each on an idle 2-core machine, 1-2 s at load 50). Without it the nodes of a
#: 100-host run started after the workload had ended and stopped at once.
NODE_BOOT_NS = 1_000_000_000


class DockerBackend(ShapedHosts):
    name = "docker"
    capabilities = Capabilities(inprocess_shaping=False, capture=True)
    takes_options = True

    def __init__(self, run: RunDir, topology: TopologySpec, paths: PathMatrix,
                 applier: str = "auto", capture: CaptureOptions | None = CaptureOptions(),
                 seed: int = 1, image: str | None = None, cpus: float | None = None,
                 memory: str | None = None):
        super().__init__(run, topology, paths)
        self.applier_name, self.seed = applier, seed
        self.capture = Capture(run, capture) if capture else None
        self.image = image
        self.cpus, self.memory = cpus, memory
        self.prefix = f"tb-{run.run_id}"
        self.ns: dict[str, ContainerHost] = {}
        self.nodes: dict[str, str] = {}  # host -> node container id
        self.plans: dict[str, HostPlan] = {}
        self.addresses: dict[str, HostAddress] = {}
        self.configs: dict[str, NodeConfig] = {}
        self.crashed: set[str] = set()
        # deploy() starts the capture, then the containers; each node then boots Python:
        # the workload starts when all of them can be up.
        self.startup_ns = STARTUP_NS + NODE_BOOT_NS * len(paths.hosts)
        self.node_side = NodeSideFaults(run, paths.hosts, lambda h: h not in self.crashed)
        # Crash, restart and pause act on the node container; partitions and link changes on
        # the sandbox's namespace (ShapedHosts); clocks and management through the node.
        self.controls = Controls(process=self, network=self, node=self.node_side)
        self.docker: Any = None
        self.startup_ns = STARTUP_NS + NODE_BOOT_NS * len(paths.hosts)

    # -- up -----------------------------------------------------------------------------------
    def up(self) -> Realised:
        if os.geteuid() != 0:
            raise BackendError("the docker backend needs root; run with sudo or use --backend "
                               "local")
        try:
            # A user never has to start the engine or build the image first: the run does
            # both, like `testbed image build` (docs/platform.md).
            if ensure_engine():
                _say(f"started the Docker engine (dockerd, log in {ENGINE_LOG})")
            self.docker = client()
            self.docker.ping()
            tag, iid = self._image()
            record_in_lock(self.run.path, tag, iid)
            self.image = tag
        except (EngineError, ImageError) as exc:
            raise BackendError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - the SDK's connection errors vary by transport
            raise BackendError(f"the Docker engine is not running or not reachable at "
                               f"{os.environ.get('DOCKER_HOST') or 'the default socket'} "
                               f"({short(exc)}); start dockerd or fix DOCKER_HOST") from None
        try:
            return self._up()
        except Exception as exc:
            undo(self.run)
            if isinstance(exc, BackendError):
                raise
            raise BackendError(f"docker bring-up failed and was rolled back: {short(exc)}"
                               ) from exc

    def _image(self) -> tuple[str, str]:
        """The node image's tag and id; the default image is built when it is missing."""
        if self.image:
            return self.image, image_id(self.image)
        tag = expected_tag()
        try:
            return tag, image_id(tag)
        except ImageError:
            pass
        with Console(stderr=True).status(f"building the node image {tag} (first docker run "
                                         "of this code; a few minutes with a new base)"):
            info = build("auto")
        _say(f"built {info['tag']}")
        return info["tag"], info["id"]

    def _up(self) -> Realised:
        j, rid = self.run.journal, self.run.run_id
        nets = pick_subnets(self.docker, self.topology, rid)
        data_ip = data_addresses(self.topology, nets.data)
        ctl_ips = dict(zip(self.paths.hosts, map(str, nets.control.hosts()), strict=False))
        for kind, net in ((DATA, nets.data), (CONTROL, nets.control)):
            self._network(kind, net)
        allow_bridged(j, f"tb{rid}", [f"tb{rid}{DATA[0]}", f"tb{rid}{CONTROL[0]}"])
        self.applier = make_applier(self.applier_name, self.run, self.seed)
        plans = host_plans(self.topology, self.paths, data_ip, "eth0")
        # Every container of the run is journaled (by name) in one write before any exists:
        # a kill at any point leaves names teardown removes or finds gone. Sandboxes come
        # first, so the journal's reverse order removes each node before its sandbox.
        j.append_many([
            {"op": "create", "kind": "container", "id": f"container:{name}", "name": name}
            for name in [self._sandbox(h) for h in self.paths.hosts]
            + [self._node(h) for h in self.paths.hosts]])
        # Each host is independent of the others (fixed names and addresses): its containers
        # and its shaping are made side by side with the other hosts', as the engine serves
        # concurrent requests and the shaping runs in each host's own namespace.
        _each(lambda h: self._host(h, data_ip[h], ctl_ips[h], plans[h]), self.paths.hosts)
        return Realised(dict(self.addresses), {h: self.plans[h] for h in self.paths.hosts})

    def _sandbox(self, host: str) -> str:
        return f"{self.prefix}-{host}-net"

    def _node(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def _host(self, host: str, data_ip: str, ctl_ip: str, plan: HostPlan) -> None:
        """The host's network sandbox (on both networks, started), its node container and the
        shaping of its data interface."""
        import docker as sdk

        api, sandbox = self.docker.api, self._sandbox(host)
        try:
            cid = api.create_container(
                self.image, ["sleep", "infinity"], name=sandbox, hostname=host,
                labels=self._labels(host, "netns"),
                host_config=api.create_host_config(cap_add=["NET_ADMIN"],
                                                   network_mode=self._net(DATA)),
                networking_config=api.create_networking_config({self._net(DATA): (
                    api.create_endpoint_config(ipv4_address=data_ip))}))["Id"]
        except sdk.errors.APIError as exc:
            raise BackendError(f"cannot create the container for {host}: {short(exc)}"
                               ) from None
        api.connect_container_to_network(cid, self._net(CONTROL), ipv4_address=ctl_ip)
        api.start(cid)
        pid = int(api.inspect_container(cid)["State"]["Pid"])
        ns = ContainerHost(host, pid, start_time(pid))
        self.ns[host] = ns
        self.addresses[host] = HostAddress(data_ip, DATA_PORT, ctl_ip)
        self.nodes[host] = self._create_node(host, cid)
        try:
            self.plans[host] = replace(plan, dev=ns.dev_of(data_ip))
        except HostError as exc:
            raise BackendError(str(exc)) from None
        self.applier.apply(ns, self.plans[host], self.run.journal)
    def _net(self, kind: str) -> str:
        return f"{self.prefix}-{kind}"

    def _labels(self, host: str | None = None, role: str | None = None) -> dict[str, str]:
        labels = {LABEL: self.run.run_id, "org.testbed.dir": str(self.run.path.resolve())}
        if host:
            labels["org.testbed.host"] = host
        if role:
            labels["org.testbed.role"] = role
        return labels

    def _network(self, kind: str, net: ipaddress.IPv4Network) -> None:
        import docker as sdk

        name, bridge = self._net(kind), f"tb{self.run.run_id}{kind[0]}"
        gateway = str(net.network_address + 254)
        self.run.journal.append("create", kind="docker-network", id=f"network:{name}",
                                name=name, subnet=str(net))
        ipam = sdk.types.IPAMConfig(pool_configs=[sdk.types.IPAMPool(subnet=str(net),
                                                                     gateway=gateway)])
        try:
            self.docker.networks.create(
                name, driver="bridge", ipam=ipam, labels=self._labels(role=kind),
                options={"com.docker.network.bridge.name": bridge,
                         "com.docker.network.bridge.enable_ip_masquerade": "false"})
        except sdk.errors.APIError as exc:
            if "overlap" in str(exc):
                raise BackendError(f"the {kind} subnet {net} overlaps an existing network; "
                                   "remove that network or give the hosts other addresses"
                                   ) from None
            raise BackendError(f"cannot create the {kind} network {name}: {short(exc)}"
                               ) from None

    def _create_node(self, host: str, sandbox_id: str) -> str:
        api, name = self.docker.api, self._node(host)  # journaled with the sandboxes
        limits: dict[str, Any] = {}
        cpus = getattr(self._host_spec(host), "cpus", None) or self.cpus
        memory = getattr(self._host_spec(host), "memory", None) or self.memory
        if cpus:
            limits["nano_cpus"] = int(float(cpus) * 1e9)
        if memory:
            limits["mem_limit"] = memory
        self.run.node_dir(host)
        return str(api.create_container(
            self.image, ["python", "-m", "nodes", "--config", f"{MOUNT}/nodes/{host}/node.json"],
            name=name, labels=self._labels(host, "node"), working_dir=MOUNT,
            host_config=api.create_host_config(
                cap_add=["NET_ADMIN"], network_mode=f"container:{sandbox_id}",
                binds={str(self.run.path.resolve()): {"bind": MOUNT, "mode": "rw"},
                       **program_binds(self.run.path)}, **limits),
        )["Id"])

    def _host_spec(self, host: str) -> Any:
        return next(h for h in self.topology.hosts if h.name == host)

    # -- nodes --------------------------------------------------------------------------------
    def deploy(self, configs: list[NodeConfig]) -> None:
        for cfg in configs:
            ns = self.ns[cfg.name]  # the node reserves with HTB classes itself (NET_ADMIN)
            self._write(reservations_as_htb(cfg, self.plans[cfg.name].dev, ns.pid,
                                            ns.starttime, self.run.journal))
        if self.capture:
            capture = self.capture
            _each(lambda h: capture.start(self.ns[h], self.plans[h].dev), self.paths.hosts)
            capture.wait_listening()
        # Starting is the slow part (~0.1-0.3 s each); in parallel it fits the start margin.
        _each(lambda h: self.docker.api.start(self.nodes[h]), [c.name for c in configs])

    def _write(self, cfg: NodeConfig) -> None:
        # The node sees the run directory at /run/testbed; control.json lands next to the log.
        cfg = replace(cfg, log_path=f"{MOUNT}/nodes/{cfg.name}/events.jsonl")
        self.configs[cfg.name] = cfg
        d = self.run.node_dir(cfg.name)
        (d / "control.json").unlink(missing_ok=True)
        cfg.write(d / "node.json")

    def _state(self, host: str) -> dict[str, Any]:
        state: dict[str, Any] = self.docker.api.inspect_container(self.nodes[host])["State"]
        return state

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            running = [h for h in self.nodes if self._state(h)["Running"]]
            if not running:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))

    def failed(self) -> dict[str, int]:
        out = {}
        for host in self.nodes:
            st = self._state(host)
            if not st["Running"] and host not in self.crashed and st["ExitCode"] != 0:
                out[host] = int(st["ExitCode"])
        return out

    # -- process control (nodes/faults.py) ----------------------------------------------------
    def fault(self, action: Action) -> dict[str, Any]:
        if self.docker is None:  # the runner stops its nemesis before down(); never reached
            raise BackendError(f"{action.op}: the run's containers are gone (the backend is "
                               "down)")
        return super().fault(action)

    def crash(self, host: str) -> dict[str, Any]:
        api, cid = self.docker.api, self.nodes[host]
        if not self._state(host)["Running"]:
            return {"alive": False, "note": "already down"}
        api.kill(cid)
        api.wait(cid, timeout=30)
        self.crashed.add(host)
        return {"alive": self._state(host)["Running"], "exit": self._state(host)["ExitCode"]}

    def restart(self, host: str) -> dict[str, Any]:
        if self._state(host)["Running"]:
            return {"alive": True, "note": "was not down"}
        cfg = self.configs[host]
        self._write(replace(cfg, incarnation=cfg.incarnation + 1))
        self.docker.api.start(self.nodes[host])
        self.crashed.discard(host)
        return {"alive": self._state(host)["Running"], "incarnation": cfg.incarnation + 1}

    def pause(self, host: str) -> dict[str, Any]:
        if not self._state(host)["Running"]:
            return {"note": "host is down"}
        self.docker.api.pause(self.nodes[host])
        return {"state": self._state(host)["Status"]}

    def resume(self, host: str) -> dict[str, Any]:
        if not self._state(host)["Running"]:
            return {"note": "host is down"}
        self.docker.api.unpause(self.nodes[host])
        return {"state": self._state(host)["Status"]}

    # -- collect and down ---------------------------------------------------------------------
    def collect(self) -> None:
        if self.docker is None:
            return
        api = self.docker.api

        def one(host: str) -> None:
            cid = self.nodes[host]
            try:
                if self._state(host)["Paused"]:
                    api.unpause(cid)
                api.stop(cid, timeout=STOP_GRACE_S)
                logs = api.logs(cid, stdout=True, stderr=True)
                (self.run.node_dir(host) / "node.log").write_bytes(logs)
            except Exception:  # noqa: BLE001,S110 - a container already gone has nothing left
                pass

        # Every node gets its grace period at the same time, not one after another.
        _each(one, list(self.nodes))
        if self.capture:
            self.capture.stop()

    def down(self) -> None:
        self.collect()
        self._remove_containers()
        undo(self.run)
        if self.docker is not None:
            self.docker.close()
            self.docker = None

    def _remove_containers(self) -> None:
        """Every live container of the run removed side by side (nodes, then the sandboxes
        whose namespaces they share), each marked removed in the journal; `undo` then stops
        the shaping daemons and removes the networks and the FORWARD chain, and finds the
        namespaces' qdiscs and rules gone with their sandboxes. A kill in between leaves
        entries that teardown removes again (already gone: nothing to do)."""
        from testbed.docker_cleanup import container_waves, remove_containers

        journal = self.run.journal
        live = {e["name"]: e for e in journal.live() if e.get("kind") == "container"}
        for wave in container_waves(list(live)):
            remove_containers(wave)
            journal.append_many([{"op": "remove", "id": live[name]["id"]} for name in wave])


def _each(fn: Callable[[str], None], hosts: list[str]) -> None:
    """fn for every host, START_WORKERS at a time; the first failure cancels what has not
    started and is raised once the running ones are done."""
    if not hosts:
        return
    with ThreadPoolExecutor(min(START_WORKERS, len(hosts))) as pool:
        futures = [pool.submit(fn, h) for h in hosts]
        try:
            for f in futures:
                f.result()
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _say(text: str) -> None:
    Console(stderr=True).print(f"[dim]{text}[/]")
