"""Packet capture: tcpdump on each host's data interface, into the run's `pcaps/`.

Started before the workload and stopped (SIGTERM: tcpdump flushes its buffer and closes the
file) before collect, then a manifest lists every file with its host, interface and first and
last packet timestamps. Rotation uses tcpdump's own `-C` (MB) and `-G` (seconds); with `-G`
the file name carries a strftime pattern so rotated files do not overwrite each other.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.hosts.netns import NetnsHost
from testbed.processes import spawn, stop_pid
from testbed.rundir import RunDir

PCAP_MAGICS = {0xA1B2C3D4: 1_000, 0xA1B23C4D: 1}  # microsecond / nanosecond pcaps -> ns factor


@dataclass(frozen=True)
class CaptureOptions:
    snaplen: int = 256
    rotate_mb: int | None = None
    rotate_s: int | None = None


def tcpdump_argv(iface: str, out: Path, opts: CaptureOptions) -> list[str]:
    # --immediate-mode: without it packets wait in the capture ring for up to 1 s and a stop
    # in that window loses them ("received by filter" but never "captured").
    argv = ["tcpdump", "-i", iface, "-n", "-U", "--immediate-mode", "-s", str(opts.snaplen),
            "--time-stamp-precision=nano", "-Z", "root"]
    name = str(out)
    if opts.rotate_s:
        argv += ["-G", str(opts.rotate_s)]
        name = name.replace(".pcap", "-%Y%m%dT%H%M%S.pcap")
    if opts.rotate_mb:
        argv += ["-C", str(opts.rotate_mb)]
    return [*argv, "-w", name]


def pcap_span(path: Path) -> tuple[int | None, int | None, int]:
    """(first ns, last ns, packets) of a pcap file, reading only record headers."""
    data = path.read_bytes()
    if len(data) < 24:
        return None, None, 0
    magic_le = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic_le in PCAP_MAGICS else ">"
    factor = PCAP_MAGICS.get(struct.unpack(endian + "I", data[:4])[0])
    if factor is None:
        return None, None, 0
    first = last = None
    n, off = 0, 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack_from(endian + "IIII", data, off)
        t = sec * 1_000_000_000 + frac * factor
        first = t if first is None else first
        last = t
        n += 1
        off += 16 + incl
    return first, last, n


class Capture:
    def __init__(self, run: RunDir, opts: CaptureOptions):
        self.run = run
        self.opts = opts
        self.dir = run.path / "pcaps"
        self.procs: dict[str, tuple[int, int | None, str]] = {}

    def start(self, ns: NetnsHost, iface: str) -> None:
        self.dir.mkdir(exist_ok=True)
        out = self.dir / f"{ns.name}-{iface}.pcap"
        proc = spawn(self.run.journal, self.run.run_id, f"tcpdump:{ns.name}",
                     [*ns.prefix(), *tcpdump_argv(iface, out, self.opts)],
                     self.dir / f"{ns.name}-{iface}.log")
        self.procs[ns.name] = (proc.pid, None, iface)

    def wait_listening(self, timeout_s: float = 5.0) -> None:
        """tcpdump says `listening on` once its socket is open; packets before that are lost."""
        import time

        deadline = time.monotonic() + timeout_s
        pending = dict(self.procs)
        while pending and time.monotonic() < deadline:
            for host, (_, _, iface) in list(pending.items()):
                log = self.dir / f"{host}-{iface}.log"
                if log.exists() and "listening on" in log.read_text():
                    del pending[host]
            time.sleep(0.02)

    def settle(self, quiet_s: float = 0.3, timeout_s: float = 3.0) -> None:
        """Wait until no capture file has grown for `quiet_s` (at most `timeout_s`): on a
        loaded machine tcpdump reads its socket late, and a SIGTERM before it did drops the
        packets still queued there."""
        import time

        def sizes() -> dict[Path, int]:
            return {f: f.stat().st_size for f in self.dir.glob("*.pcap*") if f.is_file()}

        deadline = time.monotonic() + timeout_s
        last, quiet_since = sizes(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = sizes()
            if now != last:
                last, quiet_since = now, time.monotonic()
            elif time.monotonic() - quiet_since >= quiet_s:
                return

    def stop(self) -> list[dict[str, Any]]:
        from testbed.processes import start_time

        if self.procs:
            self.settle()
        for host, (pid, _, _) in list(self.procs.items()):
            stop_pid(pid, start_time(pid), grace_s=5.0)
            self.run.journal.append("remove", id=f"tcpdump:{host}")
        manifest = []
        for host, (_, _, iface) in sorted(self.procs.items()):
            for f in sorted(self.dir.glob(f"{host}-{iface}*.pcap*")):
                first, last, n = pcap_span(f)
                manifest.append({"host": host, "interface": iface, "file": f.name,
                                 "first_ns": first, "last_ns": last, "packets": n})
        self.procs.clear()
        if manifest:
            (self.dir / "manifest.json").write_text(json.dumps(manifest, indent=1))
        return manifest
