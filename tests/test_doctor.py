"""`testbed doctor` probes the kernel in an anonymous namespace and leaves nothing behind."""

from __future__ import annotations

import os
import subprocess

import pytest

from testbed.doctor import checks


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.mark.root
def test_doctor_probes_htb_and_netem_like_tc_does() -> None:
    before = _netns()
    found = {c.name: c for c in checks()}
    assert found["root"].ok is (os.geteuid() == 0)
    assert found["HTB"].ok  # this machine's kernel has sch_htb (docs/platform.md)
    # sch_netem is exactly as available as tc says in a scratch namespace.
    subprocess.run(["ip", "netns", "add", "tb-doctor-test"], check=True)
    try:
        tc = subprocess.run(["ip", "netns", "exec", "tb-doctor-test", "tc", "qdisc", "add", "dev",
                             "lo", "root", "netem", "delay", "1ms"], capture_output=True)
    finally:
        subprocess.run(["ip", "netns", "del", "tb-doctor-test"], check=True)
    assert found["sch_netem"].ok is (tc.returncode == 0)
    assert all(c.fix for c in found.values() if not c.ok), "every missing capability says how"
    assert _netns() == before
