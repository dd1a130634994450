"""Reservations as HTB classes, realised by the node itself in its own network namespace
(mininet, docker: the node runs as root there, or with NET_ADMIN; docs/reservations.md).

The host's data device already carries the shaping tree (testbed/shaping/: an HTB root with a
class and delay line per destination, or with the userspace applier the host's rate alone and
a delay-line lane per destination). A reservation must hold the node's *whole* egress to
its rate before that per-destination tree, so it lives on an IFB device in front of it:

    data UDP from the node's port --clsact egress, mirred redirect--> qos0
    qos0:  root 1: stab overhead -42 htb default <first>  (counts datagram bytes)
             1:<m>   htb rate R ceil R burst B   -> <m>: bfifo limit (R x MAX_HOLD_NS)
           filter: everything -> the charged reservation's class
    qos0 hands each datagram back to the data device, whose shaping tree classifies it as
    before (per destination).

One HTB class per reservation key; a renegotiation is `tc class change` (and `tc qdisc
change` of its bfifo), never a rebuild, so nothing queued is lost. The IFB device and the
clsact qdisc are journaled by the backend before the node starts (teardown removes them with
the namespace, or by name); the node removes them itself when it stops. Like the in-process
token bucket (nodes/reservation.py), a class delays a sender above its rate and drops past
MAX_HOLD_NS of queue.
"""

from __future__ import annotations

import contextlib
import subprocess

from nodes.reservation import (
    CHARGED_KEY,
    DEFAULT_BURST,
    MAX_HOLD_NS,
    WIRE_OVERHEAD,
    Reservation,
)

IFB = "qos0"
FIRST_MINOR = 0x10
TC_TIMEOUT_S = 10


def quantum(bps: float) -> int:
    """One MTU per round at low rates, at most 60 kB (as testbed/shaping/netem.py)."""
    return max(1514, min(60000, int(bps) // 8 // 10))


def queue_limit(rate_bps: float, burst: int) -> int:
    """The bfifo's bytes: MAX_HOLD_NS of the rate, and never less than two MTUs or the
    burst."""
    return max(2 * DEFAULT_BURST, burst, int(rate_bps * MAX_HOLD_NS / 8e9))


def class_args(minor: int, rate_bps: float, burst: int) -> list[str]:
    rate = f"{int(rate_bps)}bit"
    return ["parent", "1:", "classid", f"1:{minor:x}", "htb", "rate", rate, "ceil", rate,
            "burst", f"{burst}b", "quantum", str(quantum(rate_bps))]


class HtbRealiser:
    """`Reservations.realiser` for a node that owns its namespace's data device `dev`."""

    def __init__(self, dev: str, sport: int, ifb: str = IFB):
        self.dev, self.sport, self.ifb = dev, sport, ifb
        self.minors: dict[str, int] = {}
        self.charged: str | None = None
        self.commands: list[list[str]] = []  # every tc/ip command run, for the node log

    def _tc(self, *cmds: list[str]) -> str | None:
        """Run commands in order; the first failure as one line, or None."""
        for cmd in cmds:
            self.commands.append(cmd)
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=TC_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired) as exc:
                return f"{' '.join(cmd[:4])}: {exc}"
            if p.returncode != 0:
                err = " ".join(p.stderr.split()) or f"exit {p.returncode}"
                return f"`{' '.join(cmd)}` failed: {err}"[:300]
        return None

    def _setup(self, minor: int) -> str | None:
        self.close()  # a restarted node finds its previous incarnation's devices
        return self._tc(
            ["ip", "link", "add", self.ifb, "type", "ifb"],
            ["ip", "link", "set", self.ifb, "up"],
            # The size table makes HTB count datagram bytes, as the reservation does.
            ["tc", "qdisc", "add", "dev", self.ifb, "root", "handle", "1:", "stab", "overhead",
             str(-WIRE_OVERHEAD), "linklayer", "ethernet", "htb", "default", f"{minor:x}"],
            ["tc", "qdisc", "add", "dev", self.dev, "clsact"],
            ["tc", "filter", "add", "dev", self.dev, "egress", "protocol", "ip", "prio", "1",
             "u32", "match", "ip", "protocol", "17", "0xff", "match", "ip", "sport",
             str(self.sport), "0xffff", "action", "mirred", "egress", "redirect", "dev",
             self.ifb])

    def __call__(self, res: Reservation, new: bool) -> str | None:
        limit = ["bfifo", "limit", str(queue_limit(res.rate_bps, res.burst_bytes))]
        if not new:
            minor = self.minors[res.key]
            return self._tc(
                ["tc", "class", "change", "dev", self.ifb, *class_args(minor, res.rate_bps,
                                                                      res.burst_bytes)],
                ["tc", "qdisc", "change", "dev", self.ifb, "parent", f"1:{minor:x}", "handle",
                 f"{minor:x}:", *limit])
        minor = FIRST_MINOR + len(self.minors)
        if not self.minors:
            error = self._setup(minor)
            if error is not None:
                return error
        error = self._tc(
            ["tc", "class", "add", "dev", self.ifb, *class_args(minor, res.rate_bps,
                                                               res.burst_bytes)],
            ["tc", "qdisc", "add", "dev", self.ifb, "parent", f"1:{minor:x}", "handle",
             f"{minor:x}:", *limit])
        if error is not None:
            return error
        self.minors[res.key] = minor
        if self.charged is None:
            self.charged = res.key  # the qdisc's default class
        elif res.key == CHARGED_KEY:  # `default` carries the traffic (nodes/reservation.py)
            self.charged = res.key
            return self._tc(["tc", "filter", "add", "dev", self.ifb, "parent", "1:", "protocol",
                             "all", "prio", "1", "u32", "match", "u32", "0", "0", "flowid",
                             f"1:{minor:x}"])
        return None

    def close(self) -> None:
        """Remove the clsact qdisc and the IFB device (gone already: fine)."""
        for cmd in (["tc", "qdisc", "del", "dev", self.dev, "clsact"],
                    ["ip", "link", "del", self.ifb]):
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(cmd, capture_output=True, timeout=TC_TIMEOUT_S)
