"""Pick the shaping applier: `netem` where the kernel accepts a netem qdisc (probed in a
scratch namespace), else `userspace` (docs/architecture.md decision 3)."""

from __future__ import annotations

from testbed.doctor import probe_qdisc
from testbed.rundir import RunDir
from testbed.shaping.netem import NetemApplier
from testbed.shaping.userspace import UserspaceApplier

APPLIERS = ("auto", "netem", "userspace")


def netem_available() -> bool:
    return probe_qdisc(["netem", "delay", "1ms"])


def resolve(name: str) -> str:
    if name not in APPLIERS:
        raise ValueError(f"unknown shaping applier {name!r}; use one of {', '.join(APPLIERS)}")
    if name == "auto":
        return "netem" if netem_available() else "userspace"
    return name


def make_applier(name: str, run: RunDir, seed: int = 1) -> NetemApplier | UserspaceApplier:
    return NetemApplier() if resolve(name) == "netem" else UserspaceApplier(run, seed)
