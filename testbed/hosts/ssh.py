"""A host reached over SSH (the `remote` backend, docs/remote.md), to the Host seam
(testbed/hosts/base.py): one `ssh` per command (OpenSSH's client, batch mode, the inventory's
key only), `scp` for files, and an NTP-style clock exchange.

A run's connections to a host share one SSH master (ControlPath named with the run id, also
used by the playbooks): a new connection costs 0.4-0.6 s on a loaded machine, a multiplexed
one a few ms. The master exits CONTROL_PERSIST_S after its last use, so a killed orchestrator
leaves it for seconds only.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from testbed.hosts.base import HostError

CONNECT_TIMEOUT_S = 5
CONTROL_PERSIST_S = 5
CLOCK_ROUNDS = 8
# The remote half of the clock exchange: one line in, its clock (ns) out, until EOF. Python 3
# is on every host the backend prepares (the node program needs it).
CLOCK_ECHO = ("import sys,time\n"
              "for _ in sys.stdin:\n"
              "    sys.stdout.write(str(time.time_ns())+'\\n'); sys.stdout.flush()\n")


def control_path(run_id: str) -> str:
    """The run's SSH multiplexing socket per host (%C: a hash of host, port and user; short
    enough for a Unix socket path)."""
    return f"/tmp/tb-ssh-{run_id}-%C"


def ssh_options(key: str, port: int = 22, connect_timeout: int = CONNECT_TIMEOUT_S,
                control: str | None = None) -> list[str]:
    # Lab and test hosts are made and destroyed by the minute: no known_hosts bookkeeping
    # (the inventory's key authenticates us; the network is the run's own bridge).
    mux = ["-o", "ControlMaster=auto", "-o", f"ControlPersist={CONTROL_PERSIST_S}",
           "-o", f"ControlPath={control}"] if control else ["-o", "ControlMaster=no"]
    return [*mux, "-i", key, "-p", str(port), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", f"ConnectTimeout={connect_timeout}",
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=2"]


@dataclass(frozen=True)
class ClockSample:
    offset_s: float  # host clock minus orchestrator clock
    rtt_s: float  # best round trip; the offset is known to +- rtt/2
    rounds: int

    @property
    def uncertainty_s(self) -> float:
        return self.rtt_s / 2


@dataclass
class SSHHost:
    name: str
    address: str
    user: str
    key: str
    port: int = 22
    control: str | None = None  # ControlPath (control_path(run_id)), or no multiplexing
    connect_timeout: int = CONNECT_TIMEOUT_S
    _clock: ClockSample | None = field(default=None, repr=False)

    @property
    def target(self) -> str:
        return f"{self.user}@{self.address}"

    def command_prefix(self) -> list[str]:
        """argv prefix that runs a command on the host: ssh joins the words after it with
        spaces for the remote shell, so quote words that hold spaces or shell syntax
        (`run` does: shlex.join)."""
        return ["ssh", *ssh_options(self.key, self.port, self.connect_timeout, self.control),
                self.target]

    def prefix(self) -> list[str]:
        """argv prefix that starts a long-lived program on the host (the ssh session lasts
        as long as it; `spawn` detaches one instead)."""
        return self.command_prefix()

    def ssh_argv(self, command: str) -> list[str]:
        return [*self.command_prefix(), command]

    def run(self, argv: list[str], *, check: bool = True, timeout: float | None = 60,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.run(self.ssh_argv(shlex.join(argv)), capture_output=True,
                                  text=True, timeout=timeout, input=input)
        except subprocess.TimeoutExpired:
            raise HostError(f"{self.name}: `{shlex.join(argv)[:80]}` timed out after "
                            f"{timeout} s") from None
        if check and proc.returncode != 0:
            raise HostError(f"{self.name}: `{shlex.join(argv)[:80]}` failed: "
                            f"{_last(proc.stderr or proc.stdout)}")
        return proc

    def spawn(self, argv: list[str], *, pidfile: str, log: str,
              env: dict[str, str] | None = None, cwd: str | None = None) -> int:
        """Start argv detached on the host (setsid, no controlling terminal, stdio to `log`,
        in `cwd` if given), its pid written to `pidfile`; returns that pid."""
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        script = (f"{f'cd {shlex.quote(cwd)} && ' if cwd else ''}"
                  f"{envs + ' ' if envs else ''}setsid {shlex.join(argv)} "
                  f"</dev/null >>{shlex.quote(log)} 2>&1 & echo $! >{shlex.quote(pidfile)}; "
                  f"cat {shlex.quote(pidfile)}")
        out = self.run(["sh", "-c", script]).stdout.strip()
        try:
            return int(out.splitlines()[-1])
        except (ValueError, IndexError):
            raise HostError(f"{self.name}: spawn wrote no pid ({out[:80]!r})") from None

    def put(self, local: Path, remote: str) -> None:
        self._scp([str(local), f"{self.target}:{remote}"])

    def fetch(self, remote: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        self._scp([f"{self.target}:{remote}", str(local)])

    def _scp(self, args: list[str]) -> None:
        opts = ssh_options(self.key, self.port, self.connect_timeout, self.control)
        opts[opts.index("-p")] = "-P"  # scp spells the port option differently
        proc = subprocess.run(["scp", "-q", "-r", *opts, *args], capture_output=True,
                              text=True, timeout=300)
        if proc.returncode != 0:
            raise HostError(f"{self.name}: copying {args[0]} failed: {_last(proc.stderr)}")

    def measure_clock(self, rounds: int = CLOCK_ROUNDS) -> ClockSample:
        """NTP-style: per round, t0 (here) -> t1 (host) -> t2 (here); offset = t1 - (t0+t2)/2,
        kept from the round with the smallest t2 - t0 (docs/remote.md, "Clocks"). One SSH session
        carries every round, so connection set-up is not in any round trip."""
        proc = subprocess.Popen(self.ssh_argv("python3 -u -c " + shlex.quote(CLOCK_ECHO)),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, bufsize=1)
        assert proc.stdin is not None and proc.stdout is not None
        best: tuple[int, int] | None = None
        try:
            for _ in range(rounds + 1):  # round 0 warms the interpreter up; dropped
                t0 = time.time_ns()
                proc.stdin.write("t\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
                t2 = time.time_ns()
                try:
                    t1 = int(line)
                except ValueError:
                    raise HostError(f"{self.name}: clock exchange failed: "
                                    f"{_last(proc.stderr.read() if proc.stderr else '')}"
                                    ) from None
                if _ == 0:
                    continue
                rtt, off = t2 - t0, t1 - (t0 + t2) // 2
                if best is None or rtt < best[0]:
                    best = (rtt, off)
        finally:
            proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        assert best is not None
        self._clock = ClockSample(best[1] / 1e9, best[0] / 1e9, rounds)
        return self._clock

    def clock_offset(self) -> float:
        if self._clock is None:
            self.measure_clock()
        assert self._clock is not None
        return self._clock.offset_s


def _last(text: str) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"
