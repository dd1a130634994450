"""Reservations on the namespaced backends (mininet, docker): the node realises them itself as
HTB classes on an IFB device in front of its data device (nodes/htb.py, docs/reservations.md). The
backend journals that device, before the node may create it, so teardown removes it."""

from __future__ import annotations

from dataclasses import replace

from nodes.config import NodeConfig
from nodes.htb import IFB
from testbed.rundir import Journal


def reservations_as_htb(cfg: NodeConfig, dev: str, ns_pid: int, ns_start: int | None,
                        journal: Journal) -> NodeConfig:
    """`cfg` with reservations realised on `dev` of the namespace held by `ns_pid`."""
    journal.append("create", kind="qos", id=f"qos:{cfg.name}", host=cfg.name, dev=dev,
                   ifb=IFB, ns_pid=ns_pid, ns_start=ns_start)
    return replace(cfg, qos_dev=dev)
