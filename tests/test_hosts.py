"""The host seam (testbed/hosts/): the same five calls reach this machine and a network
namespace; a spawned program is detached, writes its pidfile, and runs where the host is."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from testbed.hosts.base import Host, HostError
from testbed.hosts.local import LocalHost
from testbed.processes import is_alive
from tests.shaping_env import two_hosts


def _spawn_and_wait(host: Host, tmp: Path, argv: list[str]) -> tuple[int, str]:
    pidfile, log = tmp / f"{host.name}.pid", tmp / f"{host.name}.log"
    pid = host.spawn(argv, pidfile=str(pidfile), log=str(log), env={"TB_HOST_TEST": host.name})
    assert int(pidfile.read_text()) == pid
    deadline = time.monotonic() + 10
    while is_alive(pid, None) and time.monotonic() < deadline:
        time.sleep(0.02)
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            break
    return pid, log.read_text()


def test_local_host_runs_spawns_copies_and_has_no_offset(tmp_path: Path) -> None:
    host: Host = LocalHost("here")
    assert host.run(["echo", "hi"]).stdout == "hi\n"
    assert host.run(["cat"], input="fed").stdout == "fed"
    assert host.run(["false"], check=False).returncode == 1
    with pytest.raises(HostError, match=r"here: `false` failed"):
        host.run(["false"])
    pid, out = _spawn_and_wait(host, tmp_path, ["sh", "-c", "echo $TB_HOST_TEST; echo $$"])
    assert out.split() == ["here", str(pid)]  # the pid returned is the program itself
    src = tmp_path / "src.txt"
    src.write_text("payload")
    host.put(src, str(tmp_path / "remote" / "dst.txt"))
    host.fetch(str(tmp_path / "remote" / "dst.txt"), tmp_path / "back.txt")
    assert (tmp_path / "back.txt").read_text() == "payload"
    assert host.clock_offset() == 0.0


@pytest.mark.root
def test_netns_host_runs_inside_its_namespace(tmp_path: Path) -> None:
    with two_hosts() as (a, b):
        assert "198.18.200.1/24" in a.run(["ip", "-4", "-o", "addr", "show", "d0"]).stdout
        assert a.run(["ping", "-c", "1", "-W", "2", "198.18.200.2"]).returncode == 0
        # A spawned program lives in the namespace: it sees b's address, not the root one's.
        _, out = _spawn_and_wait(b, tmp_path, ["ip", "-4", "-o", "addr", "show", "d0"])
        assert "198.18.200.2/24" in out
        with pytest.raises(HostError, match=r"^a: "):
            a.run(["ip", "link", "show", "no-such-dev"])


@pytest.mark.root
def test_partitions_cut_one_direction_and_heal_on_namespace_hosts() -> None:
    """testbed/hosts/partitions.py on two namespace hosts: a cut a->b drops a's pings to b
    and nothing else; a repeated cut is two rules, and heal removes every one."""
    from testbed.hosts.partitions import Partitions

    with two_hosts() as (a, b):
        hosts = {"a": a, "b": b}
        addr = {"a": "198.18.200.1", "b": "198.18.200.2"}
        cuts = Partitions("ab12cd", hosts.__getitem__, addr.__getitem__)

        def pings(src: str, dst: str) -> bool:
            return hosts[src].run(["ping", "-c", "1", "-W", "1", addr[dst]],
                                  check=False).returncode == 0

        assert pings("a", "b") and pings("b", "a")
        made = cuts.block([("a", "b"), ("a", "b")])
        assert made == {"drop_rules": {"a": 2}}
        rules = a.run(["iptables", "-w", "-S", "OUTPUT"]).stdout
        assert rules.count("--comment tb-ab12cd -j DROP") == 2, rules
        assert not pings("a", "b")
        assert b.run(["iptables", "-w", "-S", "OUTPUT"]).stdout.count("DROP") == 0
        cuts.heal()
        assert cuts.cuts == [] and "DROP" not in a.run(["iptables", "-w", "-S", "OUTPUT"]).stdout
        assert pings("a", "b")


def test_every_host_gives_its_argv_prefixes() -> None:
    """The seam's prefixes, which callers use instead of building nsenter or ssh argv by hand:
    a local host needs none, a namespace is entered by `nsenter -n` (what teardown uses for
    a journaled namespace), an SSH host is `ssh ... user@address` (its `run` and the lab's
    `ssh_argv` are that prefix)."""
    from testbed.hosts.netns import NetnsHost
    from testbed.hosts.ssh import SSHHost
    from testbed.lab import ssh_argv

    local: Host = LocalHost("h1")
    assert local.prefix() == local.command_prefix() == []
    ns: Host = NetnsHost("h2", os.getpid(), None)
    assert ns.command_prefix() == ["nsenter", "-t", str(os.getpid()), "-n"]
    ssh = SSHHost("h3", "198.19.0.3", "root", "/k", port=2222, connect_timeout=5)
    as_host: Host = ssh
    prefix = as_host.command_prefix()
    assert prefix[0] == "ssh" and prefix[-1] == "root@198.19.0.3"
    assert prefix[prefix.index("-p") + 1] == "2222" and "ConnectTimeout=5" in prefix
    assert ssh.ssh_argv("true") == [*prefix, "true"]
    assert ssh_argv({"address": "198.19.0.3", "user": "root", "port": 2222}, "/k") == prefix
