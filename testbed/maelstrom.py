"""Maelstrom node programs on the testbed (docs/maelstrom.md): the host agents' part of the
node configs, and `testbed maelstrom test`'s translation of Maelstrom's flags into an
experiment and a topology."""

from __future__ import annotations

from typing import Any

from nodes.maelstrom import neighbours, node_names
from testbed.spec.experiment import ExperimentSpec


def clients_of(concurrency: int, hosts: int) -> list[list[str]]:
    """Client names per host index: c1, c2, ... placed on the hosts in turn."""
    out: list[list[str]] = [[] for _ in range(hosts)]
    for j in range(concurrency):
        out[j % hosts].append(f"c{j + 1}")
    return out


def agent_sections(exp: ExperimentSpec, hosts: list[str]) -> dict[str, dict[str, Any]]:
    """Per host, the `maelstrom` section of its node config (nodes/config.py)."""
    assert exp.node is not None and exp.workload.maelstrom is not None
    w = exp.workload
    n = len(hosts)
    concurrency = w.concurrency or n
    clients = clients_of(concurrency, n)
    names = node_names(n)
    topology = neighbours(names, w.topology) \
        if w.maelstrom in ("broadcast", "total-order") else None
    total = w.msgs_per_s
    return {h: {"program": list(exp.node.program), "workload": w.maelstrom,
                "clients": clients[i], "rate": total * len(clients[i]) / concurrency,
                "topology": topology, "settle_ns": exp.drain}
            for i, h in enumerate(hosts)}
