"""Bring-up and teardown of the mininet backend at N hosts in 10 regions, next to plain Mininet,
in one run (root).

    sudo python -m bench.bringup --hosts 10 30 100 [--repeat 1]
    sudo python -m bench.bringup --hosts 100 --kill 5   # crash safety at that size
    sudo python -m bench.bringup --hosts 10 100 --with-nodes   # what `testbed up` costs a user

`--kill K`: K times, a child process brings the shaped backend up and is killed with SIGKILL
at a random point of its bring-up; teardown from the journal must then leave no interface,
iptables rule, process or live journal entry of that run.

The topology is topologies/regions-100.yaml cut to N/10 hosts a region (per-pair delays from
its region matrix, so a full N x (N-1) shaping plan). For each N, interleaved on the same
machine load:
  plain    Mininet's own start and stop: hosts + one LinuxBridge + links, no controller, no
           static ARP (`mn --switch lxbr --controller none --topo single,N`), the same data
           addresses;
  bare     `MininetBackend.up()` with shaping left out (an applier that applies nothing):
           both bridges, control plane, static neighbours, the journal;
  shaped   `MininetBackend.up()` with the userspace applier (this kernel has no sch_netem):
           N HTB roots (the host's rate), N delay-line daemons of N-1 lanes each, N NFQUEUE rules;
           then one shaped WAN pair pinged, and the backend's teardown (`down` = undo).
Ratios are against plain Mininet's start (up) and stop (down). Node processes and the
measured-vs-configured check are not in these times (they follow `up()` in `testbed up`).

`--with-nodes` times what a user runs instead of `shaped`: `testbed up <topology> --backend
mininet` from the CLI's start to its exit (idle nodes of the default protocol with default
parameters, the default RTT sample check), the machine's runnable tasks before and while the
group idles (sampled from /proc/loadavg, the sampler excluded, for `--idle` seconds), then
`testbed teardown` to its exit; plain Mininet's start and stop beside it in the same run.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from testbed.backends.addressing import DATA_NET, data_addresses
from testbed.backends.mininet import MininetBackend
from testbed.hosts.netns import NetnsHost
from testbed.rundir import Journal, RunDir
from testbed.shaping.plan import HostPlan
from testbed.spec.topology import TopologySpec
from testbed.teardown import teardown

ROOT = Path(__file__).resolve().parents[1]
REGIONS = ROOT / "topologies" / "regions-100.yaml"


def topology_data(hosts: int) -> dict[str, Any]:
    """regions-100 with `hosts` // 10 hosts in each of its 10 regions, as YAML data."""
    spec = yaml.safe_load(REGIONS.read_text())
    per = max(1, hosts // len(spec["sites"]))
    spec["hosts"] = [h for h in spec["hosts"] if int(h["name"][2:]) <= per]
    spec["name"] = f"bringup{len(spec['hosts'])}"
    return spec


def topology(hosts: int) -> TopologySpec:
    return TopologySpec.model_validate(topology_data(hosts))


def plain_mininet(topo: TopologySpec) -> tuple[float, float]:
    """Seconds for plain Mininet to build and to stop the same hosts and data addresses."""
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.nodelib import LinuxBridge

    setLogLevel("error")
    addresses = data_addresses(topo)
    br = f"tbb{secrets.token_hex(3)}"
    t0 = time.monotonic()
    net = Mininet(topo=None, switch=LinuxBridge, controller=None, build=False,
                  autoSetMacs=True, autoStaticArp=False, waitConnected=False)
    try:
        sw = net.addSwitch(br, dpid="1")
        for i, h in enumerate(topo.hosts):
            host = net.addHost(h.name, ip=f"{addresses[h.name]}/{DATA_NET.prefixlen}")
            net.addLink(host, sw, intfName1="d0", intfName2=f"{br}{i}")
        net.build()
        sw.start([])
        up = time.monotonic() - t0
    finally:
        t1 = time.monotonic()
        net.stop()
    return up, time.monotonic() - t1


class NoShaping:
    """An applier that applies nothing: the backend's bring-up without its shaping step."""

    name = "none"

    def apply_all(self, hosts: list[tuple[NetnsHost, HostPlan]], journal: Journal) -> None:
        return None


def backend_run(topo: TopologySpec, shaped: bool) -> dict[str, Any]:
    run = RunDir.create(Path("/tmp/tb-bench"), "bringup")
    backend = MininetBackend(run, topo, topo.paths(), applier="userspace")
    if not shaped:
        backend.applier = NoShaping()
    shaping = 0.0
    if shaped:
        apply_all = backend.applier.apply_all

        def timed(*args: Any) -> None:
            nonlocal shaping
            t = time.monotonic()
            apply_all(*args)
            shaping += time.monotonic() - t

        backend.applier.apply_all = timed  # type: ignore[method-assign]
    out: dict[str, Any] = {"classes": 0, "rtt": None}
    try:
        t0 = time.monotonic()
        realised = backend.up()
        out["up_s"] = time.monotonic() - t0
        out["shaping_s"] = shaping
        out["classes"] = sum(len(p.classes) for p in backend.plans.values()) if shaped else 0
        if shaped:
            first, last = topo.hosts[0].name, topo.hosts[-1].name
            paths = topo.paths()
            out["want"] = (paths.get(first, last).delay_ns + paths.get(last, first).delay_ns) / 1e6
            ping = backend.exec(first, ["ping", "-n", "-c", "3", "-i", "0.2",
                                        realised.addresses[last].data]).stdout.decode()
            if "min/" in ping:
                out["rtt"] = float(ping.split("min/avg/max")[1].split("=")[1].split("/")[0])
            out["pair"] = f"{first}->{last}"
    finally:
        t1 = time.monotonic()
        backend.down()
        teardown(run)
        out["down_s"] = time.monotonic() - t1
    out["leftover"] = len(run.journal.live())
    out["run_id"] = run.run_id
    return out


def runnable_while_idle(seconds: float) -> float:
    """Mean runnable tasks on the machine over `seconds` (/proc/loadavg's instantaneous count,
    every 0.25 s, less the sampler itself): the load average an idle group causes, without the
    one-minute average's lag."""
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        running = Path("/proc/loadavg").read_text().split()[3].split("/")[0]
        samples.append(int(running) - 1)
        time.sleep(0.25)
    return sum(samples) / len(samples)


def cli_up_down(hosts: int, out: Path, idle_s: float) -> dict[str, Any]:
    """`testbed up` of the cut topology on mininet, idle for `idle_s`, `testbed teardown`."""
    out.mkdir(parents=True, exist_ok=True)
    topo_file = out / f"bringup{hosts}.yaml"
    topo_file.write_text(yaml.safe_dump(topology_data(hosts)))
    cli = [sys.executable, "-m", "testbed"]
    before = runnable_while_idle(min(idle_s, 5.0))
    t0 = time.monotonic()
    up = subprocess.run([*cli, "up", str(topo_file), "--backend", "mininet", "--out", str(out)],
                        capture_output=True, text=True)
    res: dict[str, Any] = {"up_s": time.monotonic() - t0, "runnable_before": before}
    found = re.search(r"run (\w+) in ", up.stdout)
    if up.returncode != 0 or not found:
        raise SystemExit(f"testbed up failed (exit {up.returncode}): "
                         f"{(up.stderr or up.stdout).strip().splitlines()[-1:]}")
    run_id = found.group(1)
    checked = re.search(r"^checked \d+ pairs.*$", up.stdout, re.MULTILINE)
    res["check"] = checked.group(0).strip() if checked else ""
    try:
        res["idle_runnable"] = runnable_while_idle(idle_s)
        res["loadavg_1m"] = os.getloadavg()[0]
    finally:
        t1 = time.monotonic()
        down = subprocess.run([*cli, "teardown", run_id, "--runs", str(out)],
                              capture_output=True, text=True)
        res["down_s"] = time.monotonic() - t1
    res["down_ok"] = down.returncode == 0
    res["run_id"] = run_id
    return res


def with_nodes(hosts: list[int], repeat: int, idle_s: float) -> int:
    """The `--with-nodes` table: `testbed up`/`teardown` against plain Mininet, side by side."""
    rows = []
    for n in hosts:
        topo = topology(n)
        for i in range(repeat):
            load = os.getloadavg()[0]
            plain_up, plain_down = plain_mininet(topo)
            r = cli_up_down(n, Path("/tmp/tb-bench/with-nodes"), idle_s)
            left = leftovers([r["run_id"]])
            rows.append((len(topo.hosts), load, plain_up, plain_down, r, left))
            print(f"{len(topo.hosts)} hosts, run {i + 1} (load {load:.1f}): plain Mininet up "
                  f"{plain_up:.2f} s stop {plain_down:.2f} s | testbed up {r['up_s']:.2f} s "
                  f"({r['up_s'] / plain_up:.1f}x) teardown {r['down_s']:.2f} s "
                  f"({r['down_s'] / plain_down:.1f}x) | runnable tasks {r['runnable_before']:.2f} "
                  f"before, {r['idle_runnable']:.2f} while the group idles ({idle_s:.0f} s) | "
                  f"{r['check']} | links left {len(left)}",
                  flush=True)
    print()
    print("| hosts | load before | plain up / stop (s) | testbed up (s) | teardown (s) "
          "| up ratio | teardown ratio | runnable before / idle |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, load, pu, pd, r, _ in rows:
        print(f"| {n} | {load:.1f} | {pu:.2f} / {pd:.2f} | {r['up_s']:.2f} | {r['down_s']:.2f} "
              f"| {r['up_s'] / pu:.1f}x | {r['down_s'] / pd:.1f}x | "
              f"{r['runnable_before']:.2f} / {r['idle_runnable']:.2f} |")
    return 1 if any(left or not r["down_ok"] for *_, r, left in rows) else 0


def leftovers(run_ids: list[str]) -> list[str]:
    """Interfaces, namespaces' holders or processes of these runs still present."""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return [line.split(": ")[1] for line in links.splitlines()
            if any(f"tb{r}" in line for r in run_ids)]


def _up_forever(hosts: int, out: str) -> None:
    """The child of a kill trial: the shaped backend up, then wait to be killed."""
    topo = topology(hosts)
    run = RunDir.create(Path(out), "bringupkill")
    print(run.path, flush=True)
    MininetBackend(run, topo, topo.paths(), applier="userspace").up()
    print("up", flush=True)
    time.sleep(3600)


def kill_trials(hosts: int, trials: int, up_s: float) -> int:
    """SIGKILL at a random point of a bring-up, then teardown; the number of trials that left
    something behind."""
    from testbed.processes import run_processes

    bad = 0
    rng = random.Random(hosts)
    out = Path("/tmp/tb-bench/kill")
    for i in range(trials):
        after = rng.uniform(0.5, up_s)
        child = subprocess.Popen([sys.executable, "-m", "bench.bringup", "--child", str(hosts),
                                  str(out)], stdout=subprocess.PIPE, text=True,
                                 start_new_session=True)
        assert child.stdout is not None
        run_path = Path(child.stdout.readline().strip())
        time.sleep(after)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        run = RunDir.open(run_path)
        t = time.monotonic()
        teardown(run)
        down = time.monotonic() - t
        time.sleep(0.2)
        rules = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
        left = leftovers([run.run_id]) + [r for r in rules.splitlines()
                                          if f"tb{run.run_id}" in r]
        procs = run_processes(run.run_id)
        live = run.journal.live()
        ok = not left and not procs and not live
        bad += not ok
        print(f"kill {i + 1}: {hosts} hosts, SIGKILL after {after:.1f} s, teardown {down:.2f} s: "
              f"{'nothing left' if ok else f'LEFT {left} procs {procs} live {len(live)}'}",
              flush=True)
    return bad


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _up_forever(int(sys.argv[2]), sys.argv[3])
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, nargs="+", default=[10, 30, 100])
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--kill", type=int, default=0, metavar="K",
                   help="instead: K bring-ups killed with SIGKILL at a random point, each "
                   "then torn down and checked for leftovers")
    p.add_argument("--with-nodes", action="store_true",
                   help="instead: `testbed up` (idle nodes, RTT sample check) and `testbed "
                   "teardown` as a user runs them, beside plain Mininet")
    p.add_argument("--idle", type=float, default=20.0,
                   help="with --with-nodes: seconds the idle group's load is sampled")
    p.add_argument("--kill-window", type=float, default=30.0,
                   help="seconds of bring-up the kill point is drawn from")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("bench.bringup needs root (Mininet)", file=sys.stderr)
        return 2
    subprocess.run(["iptables", "-w", "-L", "-n"], capture_output=True)  # load xtables first
    if args.with_nodes:
        return with_nodes(args.hosts, args.repeat, args.idle)
    if args.kill:
        return 1 if sum(kill_trials(n, args.kill, args.kill_window) for n in args.hosts) else 0
    rows = []
    for n in args.hosts:
        topo = topology(n)
        for i in range(args.repeat):
            load = os.getloadavg()[0]
            plain_up, plain_down = plain_mininet(topo)
            bare = backend_run(topo, shaped=False)
            shaped = backend_run(topo, shaped=True)
            left = leftovers([bare["run_id"], shaped["run_id"]])
            rows.append((n, plain_up, plain_down, bare, shaped, load))
            print(f"{len(topo.hosts)} hosts, run {i + 1} (load {load:.1f}): "
                  f"plain Mininet up {plain_up:.2f} s stop {plain_down:.2f} s | "
                  f"backend unshaped up {bare['up_s']:.2f} s ({bare['up_s'] / plain_up:.2f}x) "
                  f"down {bare['down_s']:.2f} s | shaped up {shaped['up_s']:.2f} s "
                  f"({shaped['up_s'] / plain_up:.2f}x; shaping {shaped['shaping_s']:.2f} s, "
                  f"{shaped['classes']} lanes) down {shaped['down_s']:.2f} s "
                  f"({shaped['down_s'] / plain_down:.2f}x) | {shaped.get('pair')} RTT "
                  f"{shaped['rtt']} ms (configured {shaped.get('want')}) | journal left "
                  f"{bare['leftover'] + shaped['leftover']}, links left {len(left)}",
                  flush=True)
    print()
    print("| hosts | load | plain Mininet up / stop (s) | unshaped up (s) | shaped up (s) "
          "| shaping (s) | down (s) | up ratio unshaped / shaped | down ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, pu, pd, bare, shaped, load in rows:
        print(f"| {n} | {load:.1f} | {pu:.2f} / {pd:.2f} | {bare['up_s']:.2f} | "
              f"{shaped['up_s']:.2f} | {shaped['shaping_s']:.2f} | {shaped['down_s']:.2f} | "
              f"{bare['up_s'] / pu:.2f}x / {shaped['up_s'] / pu:.2f}x | "
              f"{shaped['down_s'] / pd:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
