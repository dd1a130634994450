"""`testbed clean`: remove leftovers that carry testbed's name prefix, whatever run made them
(journals lost, runs/ deleted). Only names starting with `tb` followed by a six-digit hex run
id are touched: bridges and veth ends `tb<id>...`, iptables chains `tb<id>-...`, and
`ip netns` namespaces `tb<id>...` or `tbt<id>...` (test scratch). Docker containers and
networks are matched by their `org.testbed.run` label, never by name, and go first: their
bridges are `tb<id>d`/`tb<id>c` and belong to the engine while the network exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

LINK = re.compile(r"^tb[0-9a-f]{6}[a-z][0-9]*$")
CHAIN = re.compile(r"^tb[0-9a-f]{6}-[a-z]+$")
NETNS = re.compile(r"^tbt?[0-9a-f]{6}[a-z0-9]*$")


def _out(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _do(argv: list[str], dry_run: bool) -> None:
    if not dry_run:
        subprocess.run(argv, capture_output=True, timeout=30)


def clean(dry_run: bool) -> list[str]:
    """Remove (or with dry_run only list) testbed-named links, chains and namespaces."""
    from testbed.docker_cleanup import clean_labelled

    done = clean_labelled(dry_run)
    for chain in re.findall(r"^-N (\S+)$", _out(["iptables", "-w", "-S"]), re.M):
        if CHAIN.match(chain):
            for hook in re.findall(rf"^-A (\S+) -j {re.escape(chain)}$",
                                   _out(["iptables", "-w", "-S"]), re.M):
                _do(["iptables", "-w", "-D", hook, "-j", chain], dry_run)
            _do(["iptables", "-w", "-F", chain], dry_run)
            _do(["iptables", "-w", "-X", chain], dry_run)
            done.append(f"iptables chain {chain}")
    net = Path("/sys/class/net")
    links = sorted(p.name for p in net.iterdir() if LINK.match(p.name)) if net.is_dir() else []
    # Bridges last would leave ports dangling for a moment; order does not matter to the kernel.
    for name in links:
        if (net / name).exists():
            _do(["ip", "link", "del", name], dry_run)
            done.append(f"link {name}")
    for line in _out(["ip", "netns", "list"]).splitlines():
        name = line.split()[0] if line.split() else ""
        if NETNS.match(name):
            _do(["ip", "netns", "del", name], dry_run)
            done.append(f"netns {name}")
    return done
