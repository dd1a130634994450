"""Maelstrom node programs on the testbed (docs/maelstrom.md): the host agents' part of the
node configs, and `testbed maelstrom test`'s translation of Maelstrom's flags into an
experiment and a topology."""

from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import time
from pathlib import Path
from typing import Any

from nodes.maelstrom import neighbours, node_names
from testbed.spec.experiment import ExperimentSpec

AGENT = "testbed:type=Agent"


def clients_of(concurrency: int, hosts: int) -> list[list[str]]:
    """Client names per host index: c1, c2, ... placed on the hosts in turn."""
    out: list[list[str]] = [[] for _ in range(hosts)]
    for j in range(concurrency):
        out[j % hosts].append(f"c{j + 1}")
    return out


def maelstrom_names(hosts: list[str]) -> list[str]:
    """The hosts' Maelstrom node names: the hosts' own when every one is `n` and a number
    (the flat networks `testbed maelstrom test` builds: `--node-count N` makes n0..n(N-1),
    `--nodes` lists them), else n0..n(N-1) in the topology's order."""
    if all(re.fullmatch(r"n[0-9]+", h) for h in hosts):
        return list(hosts)
    return node_names(len(hosts))


def agent_sections(exp: ExperimentSpec, hosts: list[str]) -> dict[str, dict[str, Any]]:
    """Per host, the `maelstrom` section of its node config (nodes/config.py)."""
    assert exp.node is not None and exp.workload.maelstrom is not None
    w = exp.workload
    n = len(hosts)
    concurrency = w.concurrency or n
    clients = clients_of(concurrency, n)
    names = maelstrom_names(hosts)
    topology = neighbours(names, w.topology) \
        if w.maelstrom in ("broadcast", "total-order") else None
    total = w.msgs_per_s
    clock = has_clock_faults(exp)
    return {h: {"program": list(exp.node.program), "workload": w.maelstrom,
                "names": names, "clients": clients[i],
                "rate": total * len(clients[i]) / concurrency, "topology": topology,
                "settle_ns": exp.drain, "clock": clock, "key_count": w.key_count,
                "max_writes_per_key": w.max_writes_per_key,
                "max_txn_length": w.max_txn_length}
            for i, h in enumerate(hosts)}


def has_clock_faults(exp: ExperimentSpec) -> bool:
    """Whether the run skews programs' clocks (`mgmt` faults calling the agents' `skew`):
    then the agents preload libfaketime into their programs (docs/maelstrom.md)."""
    return any(getattr(f, "mbean", None) == AGENT and (getattr(f, "exec_", None) or [""])[0]
               == "skew" for f in exp.faults)


# Host directories never bound into a container: the image's own system (and anything
# below it), and the top-level directories themselves.
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc",
           "/sys", "/dev", "/boot", "/opt/testbed", "/run/testbed")
_TOP = ("/", "/opt", "/run", "/var", "/tmp", "/home", "/root", "/srv", "/mnt", "/media")


def program_dirs(program: list[str]) -> list[str]:
    """The host directories a container needs to run `program` (docs/maelstrom.md, docker):
    the directory of every argument that is an absolute path to a file (the spec made the
    files next to the experiment absolute), or the directory itself, outside the system's
    own directories; the docker backend binds each read-only at the same path, so the
    program, its modules next to it and its arguments resolve as on the host."""
    out: list[str] = []
    for arg in program:
        p = Path(arg)
        if not p.is_absolute():
            continue
        try:
            d = p if p.is_dir() else p.parent if p.is_file() else None
        except OSError:
            continue
        if d is None or str(d) in _TOP or any(d.is_relative_to(s) for s in _SYSTEM):
            continue
        if str(d) not in out:
            out.append(str(d))
    # A directory inside another bound one comes with it.
    return [d for d in out if not any(d != o and Path(d).is_relative_to(o) for o in out)]


def program_of_run(run_path: Path) -> list[str]:
    """The Maelstrom program a run's spec.lock.yaml names (empty for protocol nodes)."""
    import yaml

    try:
        lock = yaml.safe_load((run_path / "spec.lock.yaml").read_text()) or {}
        node = (lock.get("experiment") or {}).get("node") or {}
        return [str(a) for a in node.get("program") or []]
    except (OSError, yaml.YAMLError, AttributeError):
        return []


def program_binds(run_path: Path) -> dict[str, dict[str, str]]:
    """The docker backend's read-only binds for a run's Maelstrom program (none for protocol
    nodes): each of `program_dirs` at the same path inside the node container."""
    return {d: {"bind": d, "mode": "ro"} for d in program_dirs(program_of_run(run_path))}


def is_nodejs(program: list[str]) -> bool:
    """Whether the program runs on Node.js (`node PROG.js`, or a file whose `#!` names node):
    the docker backend's node image has no Node.js."""
    if not program:
        return False
    if Path(program[0]).name in ("node", "nodejs"):
        return True
    try:
        with open(program[0], "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and any(
        w in (b"node", b"nodejs") or w.endswith((b"/node", b"/nodejs"))
        for w in first[2:].split())


MAX_PROGRAM_BYTES = 256 << 20  # what the remote backend copies to every host, at most
_SKIPPED = ("__pycache__", ".git")


class ProgramError(Exception):
    """The program cannot be shipped to remote hosts; one sentence for the user."""


def program_sources(program: list[str]) -> list[Path]:
    """What the remote backend copies to each host for `program` (docs/maelstrom.md,
    remote): the directories docker binds (`program_dirs`), and an absolute file argument
    whose directory is a top-level one (`/tmp/node.py`) alone."""
    out = [Path(d) for d in program_dirs(program)]
    for arg in program:
        p = Path(arg)
        try:
            if p.is_absolute() and p.is_file() and str(p.parent) in _TOP \
                    and not any(p.is_relative_to(s) for s in _SYSTEM) and p not in out:
                out.append(p)
        except OSError:
            continue
    return out


def remote_argv(program: list[str], sources: list[Path], root: str) -> list[str]:
    """The program's command on a remote host, where source k was unpacked as `root/k`:
    every argument inside a copied source points into its copy; the rest (`python3`, flags)
    is left as it is."""
    out = []
    for arg in program:
        p = Path(arg)
        for k, src in enumerate(sources):
            if p.is_absolute() and (p == src or p.is_relative_to(src)):
                rel = p.relative_to(src)
                base = f"{root}/{k}" if src.is_dir() else f"{root}/{k}/{src.name}"
                arg = base if str(rel) == "." else f"{base}/{rel}"
                break
        out.append(arg)
    return out


def program_tarball(sources: list[Path], out: Path) -> Path:
    """Source k as `k/...` (a file as `k/NAME`) in a gzip tarball at `out`, modes kept (an
    executable program stays executable), `__pycache__` and `.git` left out. Raises
    ProgramError past MAX_PROGRAM_BYTES."""
    import tarfile

    total = 0

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        nonlocal total
        if any(part in _SKIPPED for part in Path(info.name).parts):
            return None
        total += info.size
        if total > MAX_PROGRAM_BYTES:
            raise ProgramError(f"the program's files are over {MAX_PROGRAM_BYTES >> 20} MiB "
                               f"({', '.join(map(str, sources))}); the remote backend copies "
                               "them to every host")
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz") as tar:
        for k, src in enumerate(sources):
            name = str(k) if src.is_dir() else f"{k}/{src.name}"
            tar.add(src, arcname=name, filter=keep)
    return out


def interpreter(argv: list[str], sources: list[Path]) -> str:
    """The command a remote host must have to run the program: its first argument when that
    is not one of the copied files (`python3`, `node`), else the file's `#!` interpreter
    (`/usr/bin/env node` -> `node`); empty for a binary."""
    first = Path(argv[0])
    if not any(first == s or first.is_relative_to(s) for s in sources if first.is_absolute()):
        return argv[0]
    try:
        with open(first, "rb") as f:
            line = f.readline(200)
    except OSError:
        return ""
    if not line.startswith(b"#!"):
        return ""
    words = line[2:].decode("utf-8", "replace").split()
    if not words:
        return ""
    if Path(words[0]).name == "env":
        rest = [w for w in words[1:] if not w.startswith("-")]
        return rest[0] if rest else ""
    return words[0]


PREFLIGHT_S = 10.0  # how long a program may take to answer its trial `init`


def preflight(program: list[str], name: str, timeout_s: float = PREFLIGHT_S) -> str | None:
    """Start `program` once on this machine and send it `init` as node `name` alone: None
    when it answers or is still running after `timeout_s` (a slow starter: the run will
    tell), else why it cannot start (it cannot be executed, or it exited first: its exit
    status and last stderr lines). The program is killed either way."""
    init = {"src": "c0", "dest": name, "body": {"type": "init", "msg_id": 1,
                                                "node_id": name, "node_ids": [name]}}
    try:
        proc = subprocess.Popen(program, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except OSError as exc:
        return f"{exc.strerror or exc}: {exc.filename or program[0]}"
    try:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(init).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            pass  # it exited already: its status and stderr say why
        deadline = time.monotonic() + timeout_s
        os_fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(os_fd, selectors.EVENT_READ)
            buf = b""
            while time.monotonic() < deadline:
                if not sel.select(max(0.0, deadline - time.monotonic())):
                    return None
                chunk = os.read(os_fd, 1 << 16)
                if not chunk:
                    break
                buf += chunk
                if b"\n" in buf:
                    return None  # it answered something: it runs
            else:
                return None
        code = proc.wait(timeout=5)
        assert proc.stderr is not None
        tail = proc.stderr.read()[-2000:].decode("utf-8", "replace").strip().splitlines()
        return f"exited with status {code} before answering init" + (
            f": {' | '.join(tail[-3:])}" if tail else "")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f is not None:
                f.close()
