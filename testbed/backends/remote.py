"""The `remote` backend: nodes on real hosts reached over SSH, named in an inventory
(`--inventory hosts.yaml` or `inventory:` in the experiment; `testbed lab up` writes one for a
lab of containers). docs/remote.md says how to use it and what it costs.

Bring-up and wind-down are the playbooks in `playbooks/` run with ansible-runner
(testbed/backends/ansible.py): prepare (node program into a venv, tools, the data interface
checked), shape (the same HTB + per-destination plan as mininet and docker, rendered by
testbed/shaping/; the userspace delay line where the host's kernel lacks sch_netem), start
(capture, then the node detached with a pidfile, waiting for the absolute start time),
collect, teardown. Ansible cannot time anything (one task's start spreads over seconds on 8
hosts), so what happens *during* the run goes over SSH and the nodes' management endpoints:
the liveness poll, crash/restart/pause/resume (signals by pidfile), link changes (the delay
line's control socket), partitions (iptables rules commented with the run id), clock and
management faults (testbed/faults/nodeside.py), applied through `controls` (nodes/faults.py).

Clocks: before the run each host's offset to this machine is measured NTP-style over SSH
(testbed/hosts/ssh.py, best of several rounds) and recorded in spec.lock.yaml `clocks`; a
node's start time is shifted into its own clock, and analysis subtracts the offset from every
`t` (analysis/ingest.py), with half the best round trip as the uncertainty.

Every resource on a host is named with the run id (`/var/tmp/tb-<run>`, pidfiles there, the
iptables comment `tb-<run>`); the journal holds one `remote` entry (written before prepare)
from which `testbed teardown` runs the teardown playbook, also after a SIGKILL.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shlex
import shutil
import subprocess
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from nodes.config import NodeConfig
from nodes.faults import Controls, Measured, SetPath
from testbed.backends.ansible import (
    InventoryError,
    InventoryHost,
    Playbooks,
    StepResult,
    load_inventory,
)
from testbed.backends.base import Backend, BackendError, Capabilities, HostAddress, Realised
from testbed.capture import CaptureOptions, pcap_span, tcpdump_argv
from testbed.faults.nodeside import NodeSideFaults
from testbed.hosts.base import HostError
from testbed.hosts.partitions import Partitions
from testbed.hosts.ssh import ClockSample, SSHHost, control_path
from testbed.images import node_program
from testbed.maelstrom import (
    ProgramError,
    interpreter,
    program_of_run,
    program_sources,
    program_tarball,
    remote_argv,
)
from testbed.rundir import RunDir
from testbed.shaping import netem
from testbed.shaping.plan import ClassPlan, HostPlan, change_link, host_plans
from testbed.shaping.userspace import daemon_config, lane, nfqueue_rule
from testbed.spec.topology import PathMatrix, TopologySpec

ROOT = Path(__file__).resolve().parent.parent.parent
REMOTE_ROOT = "/opt/testbed-remote"  # the node program, shared by runs (content-addressed)
DATA_PORT = 7000
POLL_S = 1.0  # liveness poll over SSH during the run
# Time between computing the start and the nodes' start: the start playbook (about 1.3 s per
# call plus 0.45 s per host-task: docs/remote.md) and fetching each node's control.json; at least
# this, more when the shape playbook (as long as start's) was slower.
STARTUP_BASE_NS = 5_000_000_000
STARTUP_PER_HOST_NS = 250_000_000
WHEELS = Path("/var/cache/testbed/wheels")


def remote_dir(run_id: str) -> str:
    return f"/var/tmp/tb-{run_id}"


def bundle(out_dir: Path) -> tuple[Path, str]:
    """The node program as a reproducible tarball (sorted, zero mtimes), named by content:
    what the node image holds (testbed/images.py `node_program`)."""
    files = node_program()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for f in files:
            data = f.read_bytes()
            info = tarfile.TarInfo(str(f.relative_to(ROOT)))
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    digest = hashlib.sha256(raw.getvalue()).hexdigest()[:12]
    out = out_dir / f"node-program-{digest}.tar.gz"
    if not out.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        with gzip.GzipFile(out, "wb", mtime=0) as gz:
            gz.write(raw.getvalue())
    return out, digest


def _parallel(fn: Any, items: list[str]) -> list[Any]:
    with ThreadPoolExecutor(max(1, min(16, len(items)))) as pool:
        return list(pool.map(fn, items))


class RemoteBackend(Backend):
    name = "remote"
    # Real interfaces shaped by tc (or the userspace delay line) on each host, captured with
    # tcpdump there; nodes serve management on their control address; the wall clock.
    capabilities = Capabilities(virtual_clock=False, inprocess_shaping=False, capture=True,
                                management=True)
    takes_options = True

    def __init__(self, run: RunDir, topology: TopologySpec, paths: PathMatrix,
                 inventory: Path | str | None = None,
                 capture: CaptureOptions | None = CaptureOptions(), seed: int = 1,
                 applier: str = "auto"):
        super().__init__(run, topology, paths)
        if inventory is None:
            raise BackendError("the remote backend needs an inventory: --inventory hosts.yaml "
                               "or `inventory:` in the experiment (`testbed lab up` writes one)")
        self.inventory_path = Path(inventory)
        self.capture, self.seed, self.applier_name = capture, seed, applier
        self.dir = remote_dir(run.run_id)
        self.inv: dict[str, InventoryHost] = {}
        self.hosts: dict[str, SSHHost] = {}
        self.clocks: dict[str, ClockSample] = {}
        self.plans: dict[str, HostPlan] = {}
        self.mode = "userspace"
        self.addresses: dict[str, HostAddress] = {}
        self.configs: dict[str, NodeConfig] = {}
        self.crashed: set[str] = set()
        # partitions: iptables rules on the hosts (teardown.yml removes the run's by comment)
        self.partitions = Partitions(run.run_id, lambda h: self.hosts[h],
                                     lambda h: self.inv[h].data_address, timeout=20)
        self.running: dict[str, bool] = {}
        self.last_poll = 0.0
        self.collected = False
        self.node_side = NodeSideFaults(run, paths.hosts, lambda h: h not in self.crashed)
        # Crash/restart/pause/resume by signal, partitions by iptables and link changes on each
        # host's shaper, all over SSH (this class); clocks and management through the nodes.
        self.controls = Controls(process=self, network=self, node=self.node_side)
        self.playbooks: Playbooks | None = None
        self.startup_ns = STARTUP_BASE_NS + STARTUP_PER_HOST_NS * len(paths.hosts)
        # A Maelstrom program's files, copied to every host by prepare (docs/maelstrom.md)
        self.program_root = f"{self.dir}/program"
        self.program_sources: list[Path] = []

    # -- up -----------------------------------------------------------------------------------
    def up(self) -> Realised:
        try:
            inv = load_inventory(self.inventory_path)
        except InventoryError as exc:
            raise BackendError(str(exc)) from None
        missing = [h for h in self.paths.hosts if h not in inv]
        if missing:
            raise BackendError(f"{self.inventory_path}: the topology's host {missing[0]} is not "
                               f"in the inventory (it has {', '.join(inv)})")
        for h in self.paths.hosts:
            if not Path(inv[h].key).is_file():
                raise BackendError(f"{self.inventory_path}: {h}: key {inv[h].key} does not "
                                   "exist")
        self.inv = {h: inv[h] for h in self.paths.hosts}
        mux = control_path(self.run.run_id)
        self.hosts = {h: i.ssh(mux) for h, i in self.inv.items()}
        self.playbooks = Playbooks(self.run.path / "ansible", self.inv, mux)
        # Journaled before anything touches a host: teardown replays it after any crash.
        self.run.journal.append(
            "create", kind="remote", id=f"remote:{self.run.run_id}", run_id=self.run.run_id,
            run_path=str(self.run.path.resolve()), dir=self.dir,
            hosts={h: {"address": i.address, "port": i.port, "user": i.user, "key": i.key,
                       "data_interface": i.data_interface, "control_address": i.control_address,
                       "data_address": i.data_address}
                   for h, i in self.inv.items()})
        self.prepare()
        self.measure_clocks()
        shaped = self.shape()
        # The start playbook is one task like shape's: give it twice what shape took (the
        # orchestrator's load decides; measured idle: 1.3 s + 0.45 s per host-task).
        self.startup_ns = max(self.startup_ns, int(2e9 * shaped.elapsed_s) + 3_000_000_000)
        self.addresses = {h: HostAddress(i.data_address, DATA_PORT, i.control_address)
                          for h, i in self.inv.items()}
        # the plans as shaped on the hosts (their data interfaces and addresses)
        return Realised(dict(self.addresses), dict(self.plans))

    def _step(self, step: str, hostvars: dict[str, dict[str, Any]]) -> StepResult:
        assert self.playbooks is not None
        res = self.playbooks.run(step, hostvars)
        self.run.journal.append("step", **res.as_dict())
        if res.problems:  # one line, every failed host named with its task and reason
            raise BackendError(f"{step} failed " + "; ".join(
                f"on {h}: {why}" for h, why in sorted(res.problems.items())))
        return res

    def prepare(self) -> StepResult:
        """playbooks/prepare.yml on every host; fails naming the first failed host and task."""
        tar, digest = bundle(self.run.path / "ansible")
        wheels = sorted(WHEELS.glob("[Nn]etfilter[Qq]ueue-*.whl"))
        common = {"tb_root": REMOTE_ROOT, "tb_bundle": str(tar.resolve()),
                  "tb_bundle_hash": digest, "tb_wheel": str(wheels[-1]) if wheels else "",
                  **self._program()}
        return self._step("prepare", {h: {**common, "tb_data_dev": i.data_interface,
                                          "tb_data_addr": i.data_address}
                                      for h, i in self.inv.items()})

    def _program(self) -> dict[str, str]:
        """A Maelstrom program's part of prepare: its files as one tarball (unpacked into
        the run's directory on each host, `program/<k>`), the command the host must have."""
        program = program_of_run(self.run.path)
        if not program:
            return {}
        self.program_sources = program_sources(program)
        argv = remote_argv(program, self.program_sources, self.program_root)
        tar = ""
        if self.program_sources:
            try:
                tar = str(program_tarball(self.program_sources, self.run.path / "ansible"
                                          / f"program-{self.run.run_id}.tar.gz"))
            except (ProgramError, OSError) as exc:
                raise BackendError(str(exc)) from None
        self.run.journal.append("program", sources=[str(s) for s in self.program_sources],
                                argv=argv)
        return {"tb_program_tar": tar, "tb_program_root": self.program_root,
                "tb_program_cmd": interpreter(program, self.program_sources)}

    def measure_clocks(self) -> dict[str, ClockSample]:
        """Each host's clock offset (NTP-style over SSH, best round trip), into spec.lock.yaml
        `clocks` (ms)."""
        def one(h: str) -> ClockSample:
            try:
                return self.hosts[h].measure_clock()
            except HostError as exc:
                raise BackendError(str(exc)) from None

        self.clocks = dict(zip(self.hosts, _parallel(one, list(self.hosts)), strict=True))
        lock_path = self.run.path / "spec.lock.yaml"
        lock = yaml.safe_load(lock_path.read_text()) if lock_path.exists() else {}
        lock = lock or {}
        lock["clocks"] = {h: {"offset_ms": round(c.offset_s * 1e3, 4),
                              "uncertainty_ms": round(c.uncertainty_s * 1e3, 4),
                              "rtt_ms": round(c.rtt_s * 1e3, 4), "rounds": c.rounds,
                              "method": "ntp-over-ssh"}
                          for h, c in self.clocks.items()}
        lock_path.write_text(yaml.safe_dump(lock, sort_keys=False))
        return self.clocks

    def _mode(self) -> str:
        if self.applier_name in ("netem", "userspace"):
            return self.applier_name
        # auto: netem where the remote kernel has it (a dummy link of the run's, removed).
        probe = (f"ip link add tbp{self.run.run_id} type dummy && "
                 f"tc qdisc add dev tbp{self.run.run_id} root netem delay 1ms; r=$?; "
                 f"ip link del tbp{self.run.run_id} 2>/dev/null; exit $r")
        first = self.hosts[self.paths.hosts[0]]
        ok = first.run(["sh", "-c", probe], check=False, timeout=30).returncode == 0
        return "netem" if ok else "userspace"

    def shape(self) -> StepResult:
        """playbooks/shape.yml: each host's plan as tc commands (+ the delay line's config)."""
        self.mode = self._mode()
        data_ip = {h: i.data_address for h, i in self.inv.items()}
        plans = host_plans(self.topology, self.paths, data_ip, "eth0")
        hostvars = {}
        for h, plan in plans.items():
            plan = replace(plan, dev=self.inv[h].data_interface)
            self.plans[h] = plan
            rule = nfqueue_rule(plan.dev)
            rule[3:3] = ["-m", "comment", "--comment", f"tb-{self.run.run_id}"]
            hostvars[h] = {
                "tb_dir": self.dir, "tb_root": REMOTE_ROOT, "tb_run_id": self.run.run_id,
                "tb_data_dev": plan.dev, "tb_mode": self.mode,
                "tb_tc": [shlex.join(c) for c in netem.commands(plan, self.mode == "netem")],
                "tb_shaper_cfg": json.dumps(daemon_config(plan, f"{self.dir}/shaper.sock",
                                                          self.seed), indent=1),
                "tb_nfq_rule": shlex.join(rule),
            }
        return self._step("shape", hostvars)

    # -- nodes --------------------------------------------------------------------------------
    def _node_config(self, cfg: NodeConfig) -> NodeConfig:
        """The config as the host sees it: its own paths, and the start in its own clock."""
        offset_ns = int(self.clocks[cfg.name].offset_s * 1e9) if cfg.name in self.clocks else 0
        maelstrom = cfg.maelstrom
        if maelstrom.get("program"):  # the program's copy on the host (prepare)
            maelstrom = {**maelstrom, "program": remote_argv(
                [str(a) for a in maelstrom["program"]], self.program_sources,
                self.program_root)}
        return replace(cfg, log_path=f"{self.dir}/nodes/{cfg.name}/events.jsonl",
                       start_at_ns=cfg.start_at_ns + offset_ns, maelstrom=maelstrom)

    def _config_text(self, cfg: NodeConfig) -> str:
        local = self.run.node_dir(cfg.name) / "node.json"
        cfg.write(local)
        return local.read_text()

    def deploy(self, configs: list[NodeConfig]) -> None:
        hostvars = {}
        for cfg in configs:
            cfg = self._node_config(cfg)
            self.configs[cfg.name] = cfg
            dev = self.inv[cfg.name].data_interface
            tcpdump = "" if self.capture is None else shlex.join(tcpdump_argv(
                dev, Path(f"{self.dir}/pcaps/{cfg.name}-{dev}.pcap"), self.capture))
            hostvars[cfg.name] = {"tb_dir": self.dir, "tb_root": REMOTE_ROOT,
                                  "tb_run_id": self.run.run_id, "tb_host": cfg.name,
                                  "tb_config": self._config_text(cfg), "tb_tcpdump": tcpdump}
        self._step("start", hostvars)
        self.running = {h: True for h in hostvars}
        _parallel(self._fetch_control, list(hostvars))

    def _fetch_control(self, host: str) -> None:
        """The node's management address (it writes control.json once listening)."""
        path = f"{self.dir}/nodes/{host}/control.json"
        script = (f"for i in $(seq 150); do [ -s {path} ] && cat {path} && exit 0; "
                  "sleep 0.1; done; exit 1")
        try:
            out = self.hosts[host].run(["sh", "-c", script], timeout=30).stdout
            json.loads(out)
        except (HostError, ValueError):
            raise BackendError(f"start failed on {host}: the node did not report its "
                               f"management endpoint (see {self.dir}/nodes/{host}/node.log "
                               "there)") from None
        (self.run.node_dir(host) / "control.json").write_text(out)

    def _alive(self, host: str) -> bool:
        p = f"{self.dir}/pids/node.pid"
        try:
            return self.hosts[host].run(["sh", "-c", f'kill -0 "$(cat {p})" 2>/dev/null'],
                                        check=False, timeout=20).returncode == 0
        except HostError:
            return True  # a slow answer is not an exit; the runner's cap bounds the wait

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            if time.monotonic() - self.last_poll >= POLL_S:
                self.last_poll = time.monotonic()
                hosts = [h for h, r in self.running.items() if r]
                for h, alive in zip(hosts, _parallel(self._alive, hosts), strict=True):
                    self.running[h] = alive
            if not any(self.running.values()):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    # -- faults (SSH and management, never Ansible) -------------------------------------------
    # Process control (nodes/faults.py): signals by the node's pidfile over SSH.
    def _signal(self, host: str, sig: str) -> int:
        p = f"{self.dir}/pids/node.pid"
        return self.hosts[host].run(["sh", "-c", f'kill -{sig} "$(cat {p})"'], check=False,
                                    timeout=20).returncode

    def crash(self, host: str) -> Measured:
        if host in self.crashed:
            return {"alive": False, "note": "already down"}
        rc = self._signal(host, "KILL")
        self.crashed.add(host)
        time.sleep(0.1)
        return {"alive": self._alive(host), "kill_rc": rc}

    def restart(self, host: str) -> Measured:
        """The node again, detached with the same pidfile, its incarnation one higher."""
        if host not in self.crashed:
            return {"alive": True, "note": "was not down"}
        cfg = replace(self.configs[host], incarnation=self.configs[host].incarnation + 1)
        self.configs[host] = cfg
        tmp = self.run.node_dir(host) / "node.json"
        cfg.write(tmp)
        h = self.hosts[host]
        h.put(tmp, f"{self.dir}/node.json")
        h.run(["rm", "-f", f"{self.dir}/nodes/{host}/control.json"])
        h.spawn([f"{REMOTE_ROOT}/venv/bin/python", "-m", "nodes", "--config",
                 f"{self.dir}/node.json"], pidfile=f"{self.dir}/pids/node.pid",
                log=f"{self.dir}/nodes/{host}/node.log",
                env={"PYTHONPATH": f"{REMOTE_ROOT}/app", "TESTBED_RUN_ID": self.run.run_id},
                cwd=self.dir)
        self.crashed.discard(host)
        self.running[host] = True
        self._fetch_control(host)
        return {"alive": self._alive(host), "incarnation": cfg.incarnation}

    def pause(self, host: str) -> Measured:
        if host in self.crashed:
            return {"note": "host is down"}
        return {"state": "paused", "rc": self._signal(host, "STOP")}

    def resume(self, host: str) -> Measured:
        if host in self.crashed:
            return {"note": "host is down"}
        return {"state": "running", "rc": self._signal(host, "CONT")}

    # Network control over SSH: partitions are iptables rules on the hosts, link changes each
    # host's shaper.
    def block(self, cuts: list[tuple[str, str]]) -> Measured:
        """One DROP rule per cut (src, dst) first in src's OUTPUT chain (ahead of the delay
        line's NFQUEUE rule), commented with the run id (testbed/hosts/partitions.py), as on
        mininet and docker; teardown.yml removes the run's rules, also after a crash of the
        orchestrator."""
        return self.partitions.block(cuts)

    def heal(self) -> Measured:
        """The probe (what each node's failure detector suspects, through the data plane),
        then the run's cut rules go."""
        measured = self.node_side.heal()
        self.partitions.heal()
        return measured

    def set_path(self, fault: SetPath) -> Measured:
        """A link change: each end's HTB class and delay-line lane for the other end, over
        SSH (tc change; the daemon's control socket), as ShapedHosts does locally."""
        return change_link(self.plans, self.paths, fault.between, fault.changes(), fault.reset,
                           self._change)

    def _change(self, src: str, plan: HostPlan, c: ClassPlan) -> None:
        h = self.hosts[src]
        if self.mode == "netem":
            for cmd in netem.change_commands(plan, c):
                h.run(cmd)
            return
        h.run(netem.htb_class(plan.dev, "1:1", c.classid, c.rate_bps, verb="change"))
        req = json.dumps({"op": "set", "dst": c.dst_ip, "path": lane(c)})
        send = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
                f"s.connect({self.dir + '/shaper.sock'!r})\n"
                "s.sendall(sys.stdin.buffer.read())\nprint(s.recv(4096).decode())")
        reply = h.run(["python3", "-c", send], input=req + "\n").stdout
        if '"ok": true' not in reply.replace("'", '"').lower():
            raise BackendError(f"{src}: the delay line refused the change: "
                               f"{reply.strip()[:120]}")

    # -- collect and down ---------------------------------------------------------------------
    def collect(self) -> None:
        if self.collected or self.playbooks is None or not self.configs:
            return
        self.collected = True
        local = self.run.path / "ansible" / "fetched"
        res = self.playbooks.run("collect", {h: {"tb_dir": self.dir, "tb_host": h,
                                                 "tb_local": str(local.resolve())}
                                             for h in self.configs})
        self.run.journal.append("step", **res.as_dict())
        pcaps = self.run.path / "pcaps"
        manifest = []
        for host in self.configs:
            archive = local / f"{host}.tar.gz"
            if archive.is_file():
                manifest += self._unpack(host, archive, pcaps)
        if manifest:
            (pcaps / "manifest.json").write_text(json.dumps(manifest, indent=1))
        if res.problems:
            raise BackendError("collect failed on " + "; ".join(
                f"{h}: {m}" for h, m in sorted(res.problems.items())))

    def _unpack(self, host: str, archive: Path, pcaps: Path) -> list[dict[str, Any]]:
        """One host's collect archive into the run directory. The archive comes from the
        network: only regular files named nodes/<host>/<name> or pcaps/<host>-*.pcap* are
        taken, anything else is counted and skipped."""
        manifest, skipped = [], 0
        node_dir = self.run.node_dir(host)
        with tarfile.open(archive, "r:gz") as tar:
            for m in tar.getmembers():
                parts = Path(m.name).parts
                if not m.isfile() or ".." in parts:
                    skipped += not m.isdir()
                    continue
                if parts[:2] == ("nodes", host) and len(parts) == 3 and parts[2] in (
                        "events.jsonl", "node.log"):
                    dst = node_dir / parts[2]
                elif (len(parts) == 2 and parts[0] == "pcaps"
                      and parts[1].startswith(f"{host}-") and ".pcap" in parts[1]):
                    pcaps.mkdir(exist_ok=True)
                    dst = pcaps / parts[1]
                else:
                    skipped += parts[-1] != "control.json"
                    continue
                src = tar.extractfile(m)
                assert src is not None
                with dst.open("wb") as out:
                    shutil.copyfileobj(src, out)
                if dst.parent == pcaps:
                    first, last, n = pcap_span(dst)
                    manifest.append({"host": host, "interface": self.inv[host].data_interface,
                                     "file": dst.name, "first_ns": first, "last_ns": last,
                                     "packets": n,
                                     "clock_offset_ns": int(self.clocks[host].offset_s * 1e9)
                                     if host in self.clocks else 0})
        if skipped:
            self.run.journal.append("collect-rejected", host=host, files=skipped)
        return manifest

    def down(self) -> None:
        try:
            self.collect()
        finally:
            from testbed.teardown import undo

            undo(self.run)


def ssh_check(host: SSHHost) -> subprocess.CompletedProcess[str]:
    """`true` on the host (used by tests and `testbed lab`)."""
    return host.run(["true"], check=False, timeout=20)
