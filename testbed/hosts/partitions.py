"""Partitions as iptables rules, on any host of the seam (testbed/hosts/base.py `Host`): one
DROP rule per cut (src, dst), first in src's OUTPUT chain -- ahead of the userspace shaper's
NFQUEUE rule, whose daemon re-sends through a packet socket that iptables never sees --
commented `tb-<run id>`. The kernel drops the datagrams; the nodes know nothing of it.

Written once for every backend that cuts with iptables: mininet and docker (a namespace host;
each rule journaled first, so teardown removes it in that namespace) and remote (an SSH host;
its teardown playbook removes the run's rules by their comment)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from testbed.hosts.base import Host

Cut = tuple[str, str, list[str]]  # src host, dst host, the rule (chain first)


class Partitions:
    def __init__(self, run_id: str, host: Callable[[str], Host],
                 data_address: Callable[[str], str], timeout: float | None = 30):
        self.run_id = run_id
        self.host = host
        self.data_address = data_address
        self.timeout = timeout
        self.cuts: list[Cut] = []  # made by this instance and not yet removed

    def rule(self, dst: str) -> list[str]:
        """The OUTPUT rule that drops what goes to dst's data address."""
        return ["OUTPUT", "-d", self.data_address(dst), "-j", "DROP", "-m", "comment",
                "--comment", f"tb-{self.run_id}"]

    def block(self, cuts: Iterable[tuple[str, str]],
              before: Callable[[str, str, list[str]], None] | None = None
              ) -> dict[str, dict[str, int]]:
        """Insert one rule per cut (`before(src, dst, rule)` first: the journal line); the
        measured effect is the number of rules per host."""
        rules: dict[str, int] = {}
        for src, dst in cuts:
            rule = self.rule(dst)
            if before is not None:
                before(src, dst, rule)
            self.host(src).run(["iptables", "-w", "-I", rule[0], "1", *rule[1:]],
                               timeout=self.timeout)
            self.cuts.append((src, dst, rule))
            rules[src] = rules.get(src, 0) + 1
        return {"drop_rules": rules}

    def remove(self, src: str, rule: list[str]) -> None:
        """Delete one rule from src (gone already is fine)."""
        self.host(src).run(["iptables", "-w", "-D", *rule], check=False, timeout=self.timeout)
        at = next((k for k, c in enumerate(self.cuts) if (c[0], c[2]) == (src, rule)), None)
        if at is not None:
            del self.cuts[at]

    def heal(self) -> None:
        """Delete every rule this instance made."""
        while self.cuts:
            src, _, rule = self.cuts[0]
            self.remove(src, rule)
