"""Partitions as iptables rules, on any host of the seam (testbed/hosts/base.py `Host`): one
DROP rule per cut (src, dst), first in src's OUTPUT chain -- ahead of the userspace shaper's
NFQUEUE rule, whose daemon re-sends through a packet socket that iptables never sees --
commented `tb-<run id>`. The kernel drops the datagrams; the nodes know nothing of it.

Written once for every backend that cuts with iptables: mininet and docker (a namespace host;
each rule journaled first, so teardown removes it in that namespace) and remote (an SSH host;
its teardown playbook removes the run's rules by their comment).

At scale a partition is many rules (ten hosts cut off from ninety: 1,800): each host's rules
are inserted or deleted one after another, the hosts side by side, `WORKERS` at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from testbed.hosts.base import Host

WORKERS = 8  # hosts changing their rules at once

Cut = tuple[str, str, list[str]]  # src host, dst host, the rule (chain first)


class Partitions:
    def __init__(self, run_id: str, host: Callable[[str], Host],
                 data_address: Callable[[str], str], timeout: float | None = 30):
        self.run_id = run_id
        self.host = host
        self.data_address = data_address
        self.timeout = timeout
        self.cuts: list[Cut] = []  # made by this instance and not yet removed
        self._lock = threading.Lock()

    def rule(self, dst: str) -> list[str]:
        """The OUTPUT rule that drops what goes to dst's data address."""
        return ["OUTPUT", "-d", self.data_address(dst), "-j", "DROP", "-m", "comment",
                "--comment", f"tb-{self.run_id}"]

    def block(self, cuts: Iterable[tuple[str, str]],
              before: Callable[[str, str, list[str]], None] | None = None
              ) -> dict[str, dict[str, int]]:
        """Insert one rule per cut (`before(src, dst, rule)` first: the journal line); the
        measured effect is the number of rules per host."""
        by_src: dict[str, list[tuple[str, list[str]]]] = {}
        for src, dst in cuts:
            rule = self.rule(dst)
            if before is not None:
                before(src, dst, rule)
            by_src.setdefault(src, []).append((dst, rule))

        def insert(src: str) -> None:
            for dst, rule in by_src[src]:
                self.host(src).run(["iptables", "-w", "-I", rule[0], "1", *rule[1:]],
                                   timeout=self.timeout)
                with self._lock:
                    self.cuts.append((src, dst, rule))

        _side_by_side(insert, list(by_src))
        return {"drop_rules": {src: len(rules) for src, rules in by_src.items()}}

    def remove(self, src: str, rule: list[str]) -> None:
        """Delete one rule from src (gone already is fine)."""
        self.host(src).run(["iptables", "-w", "-D", *rule], check=False, timeout=self.timeout)
        with self._lock:
            at = next((k for k, c in enumerate(self.cuts) if (c[0], c[2]) == (src, rule)),
                      None)
            if at is not None:
                del self.cuts[at]

    def remove_all(self, rules: Iterable[tuple[str, list[str]]]) -> None:
        """Delete each (src, rule), the hosts side by side."""
        by_src: dict[str, list[list[str]]] = {}
        for src, rule in rules:
            by_src.setdefault(src, []).append(rule)

        def delete(src: str) -> None:
            for rule in by_src[src]:
                self.remove(src, rule)

        _side_by_side(delete, list(by_src))

    def heal(self) -> None:
        """Delete every rule this instance made."""
        with self._lock:
            made = [(src, rule) for src, _, rule in self.cuts]
        self.remove_all(made)


def _side_by_side(fn: Callable[[str], object], hosts: list[str]) -> None:
    """fn for every host, WORKERS at a time; the first failure is raised once all are done."""
    if not hosts:
        return
    with ThreadPoolExecutor(min(WORKERS, len(hosts))) as pool:
        for f in [pool.submit(fn, h) for h in hosts]:
            f.result()
