"""Undo a run from its journal, in reverse creation order; idempotent, and it works after the
orchestrator was killed (docs/architecture.md decision 5).

Resource kinds: `process` and `netns` (a process holding a Mininet host's namespace: stopping it
lets the kernel free the namespace and the veth ends inside), `qdisc` and `iptables` (inside a
host namespace, entered through its journaled holder; gone already if the holder is gone),
`qos` (a node's reservation classes: the clsact qdisc and IFB device in its host namespace),
`iptables-chain` (root namespace), `link` (a bridge or veth end in the root namespace) and
`sysctl` (restored to the journaled value), and the docker backend's `container` and
`docker-network` (by name; containers first, as the journal's reverse order has it), and the
remote backend's `remote` (every file, process, qdisc and rule of the run on its SSH hosts).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.hosts.netns import NetnsHost
from testbed.processes import is_alive, run_processes, start_time, stop_pid
from testbed.rundir import RunDir


def _quiet(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _in_ns(entry: dict[str, Any], argv: list[str]) -> bool | None:
    """Run argv in the entry's host namespace; None when that namespace no longer exists."""
    pid = entry.get("ns_pid")
    if pid is None:
        return _quiet(argv)
    host = NetnsHost(str(entry.get("host", pid)), int(pid), entry.get("ns_start"))
    if not host.alive():
        return None
    return _quiet([*host.command_prefix(), *argv])


def _link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


Entry = dict[str, Any]


def _process(entry: Entry) -> str | None:
    # A namespace holder is an interactive shell (ignores SIGTERM) with no state to flush.
    grace = 0.0 if entry["kind"] == "netns" else 3.0
    if stop_pid(entry["pid"], entry.get("starttime"), grace_s=grace):
        return f"{entry['kind']} {entry['id']} (pid {entry['pid']})"
    return None


def _qdisc(entry: Entry) -> str | None:
    if _in_ns(entry, ["tc", "qdisc", "del", "dev", entry["dev"], "root"]):
        return f"qdisc {entry['id']}"
    return None


def _qos(entry: Entry) -> str | None:
    """A node's reservations: clsact on the data device, the IFB device."""
    gone = _in_ns(entry, ["tc", "qdisc", "del", "dev", entry["dev"], "clsact"])
    if _in_ns(entry, ["ip", "link", "del", entry["ifb"]]) or gone:
        return f"reservations {entry['id']}"
    return None


def _iptables(entry: Entry) -> str | None:
    if _in_ns(entry, ["iptables", "-w", "-D", *entry["rule"]]):
        return f"iptables rule {entry['id']}"
    return None


def _iptables_chain(entry: Entry) -> str | None:
    chain, hook = entry["chain"], entry["hook"]
    jumped = _quiet(["iptables", "-w", "-D", hook, "-j", chain])
    _quiet(["iptables", "-w", "-F", chain])
    if _quiet(["iptables", "-w", "-X", chain]) or jumped:
        return f"iptables chain {chain}"
    return None


def _link(entry: Entry) -> str | None:
    if _link_exists(entry["name"]) and _quiet(["ip", "link", "del", entry["name"]]):
        return f"link {entry['name']}"
    return None


def _docker(entry: Entry) -> str | None:
    from testbed.docker_cleanup import remove_container, remove_network

    gone = (remove_container if entry["kind"] == "container" else remove_network)(entry["name"])
    return f"{entry['kind']} {entry['name']}" if gone else None


def _remote(entry: Entry) -> str | None:
    """A run's hosts over SSH: playbooks/teardown.yml (docs/remote.md)."""
    from testbed.backends.ansible import teardown_entry

    return teardown_entry(entry)


def _sysctl(entry: Entry) -> str | None:
    path = Path("/proc/sys") / entry["key"].replace(".", "/")
    try:
        if path.read_text().strip() != str(entry["old"]):
            path.write_text(str(entry["old"]))
            return f"sysctl {entry['key']}={entry['old']} (restored)"
    except OSError:
        return None
    return None


# The resource kinds a journal holds (module docstring), each with how it is undone: a line
# saying what was removed, or None when it was gone already.
REMOVERS: dict[str, Callable[[Entry], str | None]] = {
    "process": _process,
    "netns": _process,
    "qdisc": _qdisc,
    "qos": _qos,
    "iptables": _iptables,
    "iptables-chain": _iptables_chain,
    "link": _link,
    "container": _docker,
    "docker-network": _docker,
    "remote": _remote,
    "sysctl": _sysctl,
}


def remove(entry: Entry) -> str | None:
    """Remove one journaled resource; a line saying what was removed, or None if it was gone
    (or is of a kind that holds nothing to remove)."""
    undo_one = REMOVERS.get(str(entry.get("kind")))
    return undo_one(entry) if undo_one is not None else None


#: How long teardown waits for the kernel to free the veth ends of namespaces it removed
#: (namespace cleanup runs in a kernel work queue, after the last process left).
NETNS_GONE_S = 10.0
#: Grace for journaled processes between SIGTERM and SIGKILL (nodes flush logs, tcpdump its
#: pcap); all of them share it rather than each waiting its own.
PROCESS_GRACE_S = 3.0


def undo(run: RunDir) -> list[str]:
    """Remove every live resource of the run (a rollback; the run is not marked down).

    At the kernel's speed: every process of the run is stopped together (one grace period for
    all); then the namespace holders, whose exit makes the kernel remove each namespace with
    its veths, qdiscs, rules and sockets. Entries that only a removed namespace held (a
    `qdisc`, `iptables` or `qos` entry whose `ns_pid` is that holder, a `link` whose `netns`
    names it) are marked removed (`by` the namespace), not replayed one command each. The
    rest (bridges, root-namespace rules, containers, ...) are undone in reverse creation order
    as before. Idempotent, and safe to repeat after a kill at any point: marks are written
    only once what they claim is true, and an unmarked entry is simply undone again."""
    journal = run.journal
    removed: list[str] = []
    live = journal.live()
    marks: list[dict[str, Any]] = []

    def mark(entry: Entry, by: str | None = None) -> None:
        marks.append({"op": "remove", "id": entry["id"], **({"by": by} if by else {})})

    # 1. Every process at once: journaled ones, and any only the run id in its environment
    #    names (a kill between spawn() and its journal line). Namespace holders last.
    # A Mininet shell (a namespace holder, a switch's shell) ignores SIGTERM and has nothing
    # to flush: it goes with the holders, killed without a grace period.
    holders = [e for e in live if e.get("kind") == "netns"
               or (e.get("kind") == "process" and str(e["id"]).startswith("shell:"))]
    procs = [e for e in live if e.get("kind") == "process" and e not in holders]
    holder_pids = {e["pid"] for e in holders}
    journaled = {e["pid"] for e in procs} | holder_pids
    strays = [pid for pid in run_processes(run.run_id) if pid not in journaled]
    for line in _stop_together([(e["pid"], e.get("starttime"), e["id"]) for e in procs]
                               + [(pid, start_time(pid), None) for pid in strays],
                               PROCESS_GRACE_S):
        removed.append(line)
    for e in procs:
        mark(e)
    journal.append_many(marks)
    marks.clear()
    # 2. The namespaces: their holders (interactive shells, no state) killed together.
    gone_ns: dict[tuple[int, int | None], str] = {}
    for line in _stop_together([(e["pid"], e.get("starttime"), e["id"]) for e in holders], 0.0):
        removed.append(line.replace("process netns:", "netns "))
    for e in holders:
        if e.get("kind") == "netns":
            gone_ns[(e["pid"], e.get("starttime"))] = e["id"]
        mark(e)
    journal.append_many(marks)
    marks.clear()
    gone_ids = set(gone_ns.values())
    # 3. What the namespaces held went with them: marked. Their veth ends in the root
    #    namespace go once the kernel has freed each namespace; wait for that (bounded).
    rest = [e for e in live if e.get("kind") not in ("process", "netns")]
    ends = [e for e in rest if e.get("kind") == "link" and e.get("netns") in gone_ids]
    deadline = time.monotonic() + NETNS_GONE_S
    while ends and any(_link_exists(e["name"]) for e in ends) and time.monotonic() < deadline:
        time.sleep(0.05)
    inside = 0
    for e in rest:
        ns_key = (e.get("ns_pid"), e.get("ns_start"))
        if e.get("kind") in ("qdisc", "iptables", "qos") and ns_key in gone_ns:
            mark(e, by=gone_ns[ns_key])
            inside += 1
        elif e in ends and not _link_exists(e["name"]):
            mark(e, by=e["netns"])
            inside += 1
    if inside:
        removed.append(f"{inside} resource(s) inside {len(gone_ids)} namespace(s), removed "
                       "with them")
    journal.append_many(marks)
    marks.clear()
    # 4. Everything else, newest first; a run of containers (a docker run's, journaled in one
    #    batch) side by side, as the backend's own down() removes them.
    todo = []
    for entry in reversed(rest):
        if entry in ends and not _link_exists(entry["name"]):
            continue
        ns_key = (entry.get("ns_pid"), entry.get("ns_start"))
        if entry.get("kind") in ("qdisc", "iptables", "qos") and ns_key in gone_ns:
            continue
        todo.append(entry)
    k = 0
    while k < len(todo):
        batch = [todo[k]]
        while batch[0].get("kind") == "container" and k + len(batch) < len(todo) \
                and todo[k + len(batch)].get("kind") == "container":
            batch.append(todo[k + len(batch)])
        k += len(batch)
        if len(batch) > 1:
            removed += _containers(batch)
        else:
            undone = remove(batch[0])
            if undone:
                removed.append(undone)
        for entry in batch:
            mark(entry)
    journal.append_many(marks)
    return removed


def _containers(entries: list[Entry]) -> list[str]:
    """Containers removed side by side (testbed/docker_cleanup.py `container_waves`: nodes
    before the sandboxes they share a namespace with); a line for each that existed."""
    from testbed.docker_cleanup import container_waves, remove_containers

    gone: dict[str, bool] = {}
    for wave in container_waves([e["name"] for e in entries]):
        gone.update(remove_containers(wave))
    return [f"container {e['name']}" for e in entries if gone.get(e["name"])]


def _stop_together(procs: list[tuple[int, int | None, str | None]], grace_s: float) -> list[str]:
    """SIGTERM to every live one, one shared grace period, SIGKILL to what is left; a line per
    process that was running."""
    running = [(pid, st, rid) for pid, st, rid in procs if is_alive(pid, st)]
    for pid, _, _ in running:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    pending = list(running)
    killed = False
    while pending:
        for pid, _, _ in pending:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        pending = [p for p in pending if is_alive(p[0], p[1])]
        if not pending:
            break
        if time.monotonic() >= deadline:
            if killed and time.monotonic() > deadline + 5:
                break
            if not killed:
                for pid, _, _ in pending:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                killed = True
        time.sleep(0.02)
    return [f"process {rid} (pid {pid})" if rid else f"process pid {pid} (found by run id)"
            for pid, _, rid in running]


def teardown(run: RunDir) -> list[str]:
    """Remove what the run left; return a line per resource removed."""
    removed = undo(run)
    journal = run.journal
    if not journal.finished():
        journal.append("down")
    return removed


def is_active(run: RunDir) -> bool:
    return not run.journal.finished()
