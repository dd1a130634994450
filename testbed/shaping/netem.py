"""The `netem` applier: a host plan as real `tc` commands (printable with `--dry-run`, copyable
by hand, like Mininet's TCIntf.config), applied inside the host's namespace.

Tree per host:  root 1: htb default 2
                  1:1   htb rate <host capacity>
                    1:2      htb (unshaped default: ARP, anything not in the plan)
                    1:<m>    htb rate <path rate>  ->  <m>: netem delay/jitter/loss limit
                filter u32 match ip dst <destination>/32 -> 1:<m>
Runtime changes touch only the leaf (`tc qdisc change`), so queued packets stay queued.
"""

from __future__ import annotations

import math
import shlex
import subprocess
from pathlib import Path

from testbed.hosts.netns import NetnsHost
from testbed.rundir import Journal
from testbed.shaping import ShapingError
from testbed.shaping.plan import ClassPlan, HostPlan

#: netem distribution names; netem's default (no `distribution`) is uniform. iproute2 ships
#: the tables of the first three in /usr/lib/tc; the exponential one is made here
#: (`dist_dir`) and handed to tc with TC_LIB_DIR.
NETEM_DISTRIBUTIONS = {"normal": "normal", "pareto": "pareto", "paretonormal": "paretonormal",
                       "exponential": "exponential"}
TC_LIB = Path("/var/cache/testbed/tc")
DIST_SCALE = 8192  # iproute2's NETEM_DIST_SCALE: a table value is a draw times this
DIST_SIZE = 4096  # entries, as iproute2's own tables (maketable's TABLESIZE)


def exponential_table(size: int = DIST_SIZE) -> list[int]:
    """netem's table for the standardised exponential (E - 1, mean 0, spread 1): its inverse
    CDF at the middle of `size` equal steps, scaled, cut to the table's 16-bit range (about
    four spreads, the tail iproute2's tables also cut)."""
    out = []
    for i in range(size):
        x = -math.log(1.0 - (i + 0.5) / size) - 1.0
        out.append(max(-32768, min(32767, round(x * DIST_SCALE))))
    return out


def dist_dir() -> Path:
    """A TC_LIB_DIR holding iproute2's tables (links) and the exponential one; made once."""
    table = TC_LIB / "exponential.dist"
    if not table.exists():
        TC_LIB.mkdir(parents=True, exist_ok=True)
        tables = sorted(Path("/usr/lib").glob("*/tc/normal.dist")) + sorted(
            Path("/usr/lib/tc").glob("normal.dist"))  # Debian's multiarch place, or the plain one
        for src in tables[0].parent.glob("*.dist") if tables else []:
            link = TC_LIB / src.name
            if not link.exists():
                link.symlink_to(src)
        values = exponential_table()
        tmp = table.with_suffix(".tmp")
        tmp.write_text("# netem table: standardised exponential (testbed/shaping/netem.py)\n"
                       + "\n".join(" ".join(str(v) for v in values[k:k + 8])
                                   for k in range(0, len(values), 8)) + "\n")
        tmp.replace(table)
    return TC_LIB


def tc_env(plan: HostPlan, *more: ClassPlan) -> list[str]:
    """`env TC_LIB_DIR=...` before tc when a class needs the exponential table."""
    if any(c.jitter_ns and c.distribution == "exponential" for c in (*plan.classes, *more)):
        return ["env", f"TC_LIB_DIR={dist_dir()}"]
    return []


def rate(bps: int) -> str:
    return f"{bps}bit"


def quantum(bps: int) -> int:
    # HTB's r2q default gives absurd quanta at Gbit rates; one MTU per round at low rates,
    # capped at 60 kB (HTB's own ceiling for a sane quantum).
    return max(1514, min(60000, bps // 8 // 10))


def pct(fraction: float) -> str:
    return f"{fraction * 100:.6g}%"


def netem_args(c: ClassPlan) -> list[str]:
    """The leaf's netem options, in tc-netem(8)'s terms (docs/link-model.md)."""
    p = c.path
    args = ["netem", "limit", str(c.limit)]
    if c.delay_ns or c.jitter_ns:
        args += ["delay", tc_time(c.delay_ns)]
        if c.jitter_ns:
            args.append(tc_time(c.jitter_ns))
            if p.jitter_corr:
                args.append(pct(p.jitter_corr))
            dist = NETEM_DISTRIBUTIONS.get(c.distribution)
            if dist:
                args += ["distribution", dist]
    if p.reorder:
        args += ["reorder", pct(p.reorder), *([pct(p.reorder_corr)] if p.reorder_corr else []),
                 "gap", str(p.reorder_gap or 1)]
    if p.gemodel is not None:
        ge_p, ge_r, ge_h, ge_k = p.gemodel
        # tc takes the loss probabilities of the two states: 1-h (bad), 1-k (good)
        args += ["loss", "gemodel", pct(ge_p), pct(ge_r), pct(1 - ge_h), pct(1 - ge_k)]
    elif c.loss:
        args += ["loss", pct(c.loss), *([pct(p.loss_corr)] if p.loss_corr else [])]
    if p.duplicate:
        args += ["duplicate", pct(p.duplicate),
                 *([pct(p.duplicate_corr)] if p.duplicate_corr else [])]
    if p.corrupt:
        args += ["corrupt", pct(p.corrupt), *([pct(p.corrupt_corr)] if p.corrupt_corr else [])]
    if p.rate_bps:
        args += ["rate", rate(p.rate_bps)]
    elif p.fifo and c.jitter_ns:
        # FIFO (`reorder: false`): with a rate, netem_enqueue schedules each packet after the
        # last one in its queue (time_to_send = max(now + delay, last) + length / rate), so
        # jitter no longer reorders. The class's own rate adds one packet's serialisation,
        # which the HTB class above charges anyway. Verified under UML
        # (tests/test_uml_netem_fifo.py), where a child pfifo did not keep the order.
        args += ["rate", rate(c.rate_bps)]
    return args


def htb_class(dev: str, parent: str, classid: str, bps: int, verb: str = "add") -> list[str]:
    return ["tc", "class", verb, "dev", dev, "parent", parent, "classid", classid, "htb",
            "rate", rate(bps), "ceil", rate(bps), "quantum", str(quantum(bps))]


def root_commands(plan: HostPlan) -> list[list[str]]:
    dev, root = plan.dev, plan.root_rate_bps
    return [
        ["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "2"],
        htb_class(dev, "1:", "1:1", root),
        htb_class(dev, "1:1", "1:2", root),
    ]


def class_commands(plan: HostPlan, c: ClassPlan, leaf: bool = True) -> list[list[str]]:
    dev = plan.dev
    cmds = [htb_class(dev, "1:1", c.classid, c.rate_bps)]
    if leaf:
        cmds.append(["tc", "qdisc", "add", "dev", dev, "parent", c.classid, "handle", c.handle,
                     *netem_args(c)])
    cmds.append(["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio",
                 "1", "u32", "match", "ip", "dst", f"{c.dst_ip}/32", "flowid", c.classid])
    return cmds


def commands(plan: HostPlan, leaves: bool = True) -> list[list[str]]:
    """Every command that builds the plan, in order. Without leaves it is the HTB tree alone
    (rates and QoS), which the userspace applier puts under its delay line."""
    out = root_commands(plan)
    for c in plan.classes:
        out += class_commands(plan, c, leaves)
    return out


def change_commands(plan: HostPlan, c: ClassPlan) -> list[list[str]]:
    """Commands that move a running tree to class `c` (same minor)."""
    return [htb_class(plan.dev, "1:1", c.classid, c.rate_bps, verb="change"),
            ["tc", "qdisc", "change", "dev", plan.dev, "parent", c.classid, "handle", c.handle,
             *netem_args(c)]]


def script(plan: HostPlan, leaves: bool = True) -> str:
    lines = [f"# {plan.host}: {len(plan.classes)} destination class(es) on {plan.dev}"]
    lines += [f"# warning: {w}" for w in plan.warnings]
    refused = unrealisable(plan) if leaves else None
    if refused:
        lines.append(f"# warning: {refused}")
    lines += [" ".join(cmd) for cmd in commands(plan, leaves)]
    return "\n".join(lines)


def tc_time(ns: int) -> str:
    """A time as iproute2 accepts it: tc 6.1 rejects `ns` units (`Illegal "latency"`), so
    microseconds, to the nanosecond."""
    return f"{ns / 1000:.3f}".rstrip("0").rstrip(".") + "us"


def apply_tree(ns: NetnsHost, plan: HostPlan, journal: Journal, leaves: bool) -> None:
    """Journal the root qdisc (deleting it removes the whole tree), then build it."""
    journal.append_many([qdisc_record(ns, plan)])
    # One `tc -batch` per host: a 30-host full mesh is ~90 commands a host, and a process per
    # command dominated bring-up. `-force` is off, so the first failing line stops the batch.
    batch = "\n".join(" ".join(cmd[1:]) for cmd in commands(plan, leaves)) + "\n"
    ns.run([*tc_env(plan), "tc", "-batch", "-"], input=batch)


def qdisc_record(ns: NetnsHost, plan: HostPlan) -> dict[str, object]:
    return {"op": "create", "kind": "qdisc", "id": f"qdisc:{plan.host}:{plan.dev}",
            "host": plan.host, "dev": plan.dev, "ns_pid": ns.pid, "ns_start": ns.starttime}


def run_side_by_side(jobs: list[tuple[NetnsHost, str]], what: str) -> None:
    """One `sh -c SCRIPT` in each host's namespace, all started before any is waited for (a
    process per host, not per command; at 100 hosts one after another was seconds of waiting
    for each fork on a loaded machine). The first failure, by host, is raised."""
    procs = [(ns, subprocess.Popen([*ns.command_prefix(), "sh", "-c", script],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
             for ns, script in jobs]
    failed = []
    for ns, proc in procs:
        out, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            failed.append(f"{ns.name}: {out.strip()[-300:]}")
    if failed:
        raise ShapingError(f"{what} failed on {len(failed)} host(s): {failed[0]}")


def tree_file(plan: HostPlan, directory: Path, leaves: bool) -> Path:
    """The host's tree as a `tc -batch` file (kept in the run directory: the exact commands)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{plan.host}.tc"
    path.write_text("\n".join(" ".join(cmd[1:]) for cmd in commands(plan, leaves)) + "\n")
    return path.resolve()


def unrealisable(plan: HostPlan) -> str | None:
    """Why real netem cannot build this plan, in one sentence, or None. Linux refuses a
    duplicating netem next to other netems in one tree ("netem: cannot mix duplicating netems
    with other netems in tree", seen under UML's 6.1 kernel: tests/test_uml_netem_fifo.py), and
    the plan has one netem leaf per destination."""
    dup = [c.dst for c in plan.classes if c.path.duplicate]
    if dup and len(plan.classes) > 1:
        return (f"the netem applier cannot realise `duplicate` on {plan.host}->{dup[0]}: the "
                "kernel refuses a duplicating netem beside the host's other destinations' "
                "netems (use the userspace applier)")
    return None


class NetemApplier:
    name = "netem"

    def apply(self, ns: NetnsHost, plan: HostPlan, journal: Journal) -> None:
        reason = unrealisable(plan)
        if reason is not None:
            raise ShapingError(reason)
        apply_tree(ns, plan, journal, leaves=True)

    def apply_all(self, hosts: list[tuple[NetnsHost, HostPlan]], journal: Journal,
                  directory: Path | None = None) -> None:
        """Every host's tree: all root qdiscs journaled in one batch, then one `tc -batch`
        per host, the hosts side by side."""
        for _, plan in hosts:
            reason = unrealisable(plan)
            if reason is not None:
                raise ShapingError(reason)
        d = directory or journal.path.parent / "shaping"
        files = [(ns, tree_file(plan, d, leaves=True)) for ns, plan in hosts]
        journal.append_many([qdisc_record(ns, plan) for ns, plan in hosts])
        run_side_by_side([(ns, shlex.join([*tc_env(plan), "tc", "-batch", str(f)]))
                          for (ns, plan), (_, f) in zip(hosts, files, strict=True)], "tc -batch")

    def change(self, ns: NetnsHost, plan: HostPlan, c: ClassPlan) -> None:
        for cmd in change_commands(plan, c):
            ns.run([*tc_env(plan, c), *cmd] if cmd[:2] == ["tc", "qdisc"] else cmd)

    def remove(self, ns: NetnsHost, plan: HostPlan, journal: Journal) -> None:
        ns.run(["tc", "qdisc", "del", "dev", plan.dev, "root"], check=False)
        journal.append("remove", id=f"qdisc:{plan.host}:{plan.dev}")
