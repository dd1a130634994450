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


def undo(run: RunDir) -> list[str]:
    """Remove every live resource of the run (a rollback; the run is not marked down)."""
    journal = run.journal
    removed = []
    live = journal.live()
    # Processes die before anything they live in (they were created after it), so they may
    # all be asked to stop at once; the ordered pass below then finds them exiting or gone.
    signalled = set()
    for entry in live:
        if entry.get("kind") == "process" and is_alive(entry["pid"], entry.get("starttime")):
            with contextlib.suppress(OSError):
                os.kill(entry["pid"], signal.SIGTERM)
                signalled.add(entry["id"])
    for entry in reversed(live):
        line = remove(entry)
        if line is None and entry["id"] in signalled:
            line = f"process {entry['id']} (pid {entry['pid']})"
        if line:
            removed.append(line)
        journal.append("remove", id=entry["id"])
    # A kill between spawn() and its journal line leaves a process only its environment names.
    for pid in run_processes(run.run_id):
        if stop_pid(pid, start_time(pid)):
            removed.append(f"process pid {pid} (found by run id)")
    return removed


def teardown(run: RunDir) -> list[str]:
    """Remove what the run left; return a line per resource removed."""
    removed = undo(run)
    journal = run.journal
    if not journal.finished():
        journal.append("down")
    return removed


def is_active(run: RunDir) -> bool:
    return not run.journal.finished()
