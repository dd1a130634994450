"""The `netem` applier's real `tc` script under a kernel that has sch_netem: Debian's
user-mode-linux kernel (docs/platform.md), booted with the host filesystem as its root. Inside it,
three namespaces on a bridge get the project's rendered per-host plans (HTB root, one netem leaf
per destination, u32 filters); the test then reads back `tc -s qdisc` and ping RTTs, which the
init script wrote into a scratch directory before powering UML off.

UML timing is coarse (docs/platform.md: outliers to 2x), so only the minimum RTT is compared, with
a margin a loaded machine keeps (-2 ms .. +25% + 5 ms): this proves the commands' shape and
effect (no netem, or netem twice, fails), not sub-millisecond fidelity."""

from __future__ import annotations

import glob
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from testbed.shaping import netem
from testbed.shaping.plan import host_plans
from testbed.spec.topology import TopologySpec
from tests.shaping_env import root_only

pytestmark = [pytest.mark.root, root_only]

UML = "linux.uml"
BOOT_TIMEOUT_S = 60
PINGS = 10
HOSTS = ("h1", "h2", "h3")
ADDR = {h: f"198.18.0.{i + 1}" for i, h in enumerate(HOSTS)}
#: One-way delays in ms; every direction distinct so a class picked by the wrong filter shows.
DELAYS = {("h1", "h2"): 10, ("h2", "h1"): 20, ("h1", "h3"): 30,
          ("h3", "h1"): 10, ("h2", "h3"): 20, ("h3", "h2"): 30}
MODULES = ("drivers/net/veth", "net/sched/sch_htb", "net/sched/cls_u32", "net/sched/sch_netem",
           "net/bridge/bridge")


def topology() -> TopologySpec:
    matrix: dict[str, dict[str, str]] = {h: {} for h in HOSTS}
    for (a, b), ms in DELAYS.items():
        matrix[a][b] = f"{ms}ms"
    return TopologySpec.model_validate({"name": "uml3", "hosts": [{"name": h} for h in HOSTS],
                                        "matrix": matrix})


def module_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/uml/modules/6.1.*"))
    if not found:
        pytest.fail("user-mode-linux modules are missing: apt-get install user-mode-linux")
    return Path(found[-1])


def insmod_order(mdir: Path, wanted: tuple[str, ...]) -> list[Path]:
    """Modules to insmod, dependencies first, from the kernel's own modules.dep (bridge needs
    llc, stp and ipv6, which needs crc-ccitt; insmod does not resolve them)."""
    deps: dict[str, list[str]] = {}
    for line in (mdir / "modules.dep").read_text().splitlines():
        mod, _, rest = line.partition(":")
        deps[mod] = rest.split()
    order: list[str] = []

    def visit(mod: str) -> None:
        for dep in deps[mod]:
            visit(dep)
        if mod not in order:
            order.append(mod)

    for name in wanted:
        visit(f"kernel/{name}.ko")
    return [mdir / m for m in order]


def init_script(out: Path, mdir: Path, plans: dict[str, str]) -> str:
    """Runs as UML's pid 1; everything it writes lands in `out` on the host."""
    lines = [
        "#!/bin/sh",
        "export PATH=/usr/sbin:/usr/bin:/sbin:/bin",
        f"OUT={shlex.quote(str(out))}",
        'exec >"$OUT/init.log" 2>&1',
        "mount -t proc proc /proc && mount -t sysfs sys /sys",
        # A private /run for the netns mounts: nothing the guest creates reaches the host's.
        "mount -t tmpfs tmpfs /run",
        *[f"insmod {m}" for m in insmod_order(mdir, MODULES)],
        "ip link add br0 type bridge && ip link set br0 up",
    ]
    for i, h in enumerate(HOSTS):
        lines += [
            f"ip netns add {h}",
            f"ip link add v{i} type veth peer name d0 netns {h}",
            f"ip link set v{i} master br0 up",
            f"ip -n {h} addr add {ADDR[h]}/24 dev d0",
            f"ip -n {h} link set d0 up && ip -n {h} link set lo up",
        ]
    for h, script in plans.items():
        (out / f"plan-{h}.sh").write_text(script + "\n")
        lines.append(f'ip netns exec {h} sh -e "$OUT/plan-{h}.sh" && echo planned {h}')
    # One warm-up echo per pair (ARP, first-packet costs), then all pairs ping at once.
    for (a, b) in DELAYS:
        lines.append(f"ip netns exec {a} ping -n -c 1 -W 2 {ADDR[b]} >/dev/null")
    for (a, b) in DELAYS:
        lines.append(f'ip netns exec {a} ping -n -c {PINGS} -i 0.1 -W 2 {ADDR[b]} '
                     f'>"$OUT/ping-{a}-{b}.txt" &')
    lines.append("wait")
    lines += [f'ip netns exec {h} tc -s qdisc show dev d0 >"$OUT/qdisc-{h}.txt"' for h in HOSTS]
    lines += [f'ip netns exec {h} tc filter show dev d0 >"$OUT/filter-{h}.txt"' for h in HOSTS]
    lines += ['echo ok >"$OUT/done"', "sync",
              # systemctl's double-forced poweroff is a bare reboot(2); sysrq is the fallback.
              "poweroff -ff || echo o >/proc/sysrq-trigger"]
    return "\n".join(lines) + "\n"


def group_members(pgid: int) -> list[int]:
    pids = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            pids.append(int(stat.split("/")[2]))
    return pids


UML_FP_PANIC = "ptrace set fp regs failed"


def boot(out: Path, init: Path) -> subprocess.CompletedProcess[str]:
    """Boot UML on `init`; whatever happens, its whole process group (UML forks one host process
    per guest address space) is gone when this returns."""
    umldir = out / "uml"
    umldir.mkdir()
    argv = [UML, "mem=512M", "rootfstype=hostfs", "rw", f"init={init}", "con=null",
            "con0=fd:0,fd:1", f"uml_dir={umldir}"]
    env = {**os.environ, "TMPDIR": str(umldir)}
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    try:
        stdout, _ = proc.communicate(timeout=BOOT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stdout = ""
    finally:
        # The group is ours: start_new_session made UML's pid its id.
        if group_members(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # The SIGKILLed members leave the process table once init has reaped them (they were the
    # leader's children): on a loaded machine that takes a moment after the leader's wait.
    deadline = time.monotonic() + 10
    while group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_members(proc.pid) == [], "UML left host processes behind"
    if UML_FP_PANIC in stdout:
        # Not a missing package or a broken plan: Debian's UML 6.1 cannot restore the FPU
        # state of a host CPU with AMX tiles (its XSTATE buffer is too small: ptrace fails
        # with EFAULT and init is killed at boot). Every run on such a CPU panics the same way.
        pytest.skip(f"this CPU's XSTATE (AMX) breaks Debian's UML kernel: '{UML_FP_PANIC}' at "
                    "boot (UML netem needs a host CPU without AMX or a newer UML kernel)")
    return subprocess.CompletedProcess(argv, proc.returncode, stdout)


def min_rtt(text: str) -> float:
    return min(float(x) for x in re.findall(r"time=([\d.]+) ms", text))


def netem_leaves(qdisc: str) -> dict[str, tuple[float, int]]:
    """netem handle -> (delay ms, packets sent) from `tc -s qdisc show`."""
    leaves = {}
    for m in re.finditer(r"qdisc netem (\w+): parent 1:\w+ limit \d+ delay ([\d.]+)ms.*?\n"
                         r"\s*Sent \d+ bytes (\d+) pkt", qdisc, re.S):
        leaves[m.group(1)] = (float(m.group(2)), int(m.group(3)))
    return leaves


@pytest.mark.timing
def test_netem_plan_under_uml_builds_planned_tree_and_delays_each_direction(
        tmp_path: Path) -> None:
    topo = topology()
    plans = host_plans(topo, topo.paths(), ADDR, "d0")
    init = tmp_path / "init.sh"
    init.write_text(init_script(tmp_path, module_dir(), {h: netem.script(p)
                                                        for h, p in plans.items()}))
    init.chmod(0o755)
    result = boot(tmp_path, init)
    log = (tmp_path / "init.log").read_text() if (tmp_path / "init.log").exists() else ""
    assert (tmp_path / "done").exists(), f"UML init did not finish:\n{log}\n{result.stdout[-2000:]}"
    assert all(f"planned {h}" in log for h in HOSTS), log

    for h in HOSTS:
        qdisc = (tmp_path / f"qdisc-{h}.txt").read_text()
        assert re.search(r"qdisc htb 1: root .*default 0x2", qdisc), qdisc
        leaves = netem_leaves(qdisc)
        plan = plans[h]
        # One netem leaf per destination, each with its planned delay, and each one carried
        # exactly its destination's traffic: the warm-up echo plus PINGS echoes or replies.
        assert set(leaves) == {c.handle.rstrip(":") for c in plan.classes}, qdisc
        for c in plan.classes:
            delay, sent = leaves[c.handle.rstrip(":")]
            assert delay == DELAYS[(h, c.dst)], (h, c.dst, qdisc)
            assert sent >= 2 * (PINGS + 1), (h, c.dst, qdisc)
        filters = (tmp_path / f"filter-{h}.txt").read_text()
        assert filters.count("flowid 1:") == len(plan.classes), filters

    for (a, b) in DELAYS:
        want = DELAYS[(a, b)] + DELAYS[(b, a)]
        got = min_rtt((tmp_path / f"ping-{a}-{b}.txt").read_text())
        # A margin a loaded machine keeps; no netem (~0 ms) or netem twice still fails.
        assert want - 2.0 <= got <= 1.25 * want + 5.0, (a, b, got, want)
