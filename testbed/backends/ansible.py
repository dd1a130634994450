"""Running the `remote` backend's playbooks (playbooks/) with ansible-runner, and the inventory
they run on (docs/remote.md).

Measurements shape this module (docs/remote.md, cost model): a reused `private_data_dir` accumulates
stale `env/` files, so every call gets a fresh one under the run directory; without a
`cancel_callback`, `run()` replaces the caller's SIGINT/SIGTERM handlers, so every call passes
the run's own; one call costs about 1.3 s plus 0.45 s per host and task, so a step is one
playbook over all hosts (`forks` = hosts). SSH never keeps a ControlMaster (a persistent master
would outlive a killed orchestrator by its ControlPersist).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testbed.hosts.ssh import SSHHost, control_path, ssh_options
from testbed.rundir import Journal

PLAYBOOKS = Path(__file__).resolve().parent.parent.parent / "playbooks"
REQUIRED = ("address", "user", "key", "data_interface", "control_address")


class InventoryError(Exception):
    """The inventory file is unusable; one line `file: host: message`."""


@dataclass(frozen=True)
class InventoryHost:
    name: str
    address: str  # SSH address
    user: str
    key: str
    data_interface: str
    control_address: str
    data_address: str
    port: int = 22

    def ssh(self, control: str | None = None) -> SSHHost:
        return SSHHost(self.name, self.address, self.user, self.key, self.port, control)

    def ansible_vars(self) -> dict[str, Any]:
        return {"ansible_host": self.address, "ansible_port": self.port,
                "ansible_user": self.user, "ansible_ssh_private_key_file": self.key,
                "ansible_python_interpreter": "/usr/bin/python3"}


def load_inventory(path: Path) -> dict[str, InventoryHost]:
    """`hosts: {name: {address, port, user, key, data_interface, data_address,
    control_address}}` (what `testbed lab up` writes). Relative key paths are relative to the
    inventory file."""
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise InventoryError(f"{path}: cannot read the inventory: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise InventoryError(f"{path}: not YAML: {str(exc).splitlines()[0]}") from None
    hosts = (doc or {}).get("hosts") if isinstance(doc, dict) else None
    if not isinstance(hosts, dict) or not hosts:
        raise InventoryError(f"{path}: hosts: a mapping of host name to its addresses is "
                             "required")
    out = {}
    for name, spec in hosts.items():
        if not isinstance(spec, dict):
            raise InventoryError(f"{path}: {name}: expected a mapping")
        missing = [k for k in REQUIRED if not spec.get(k)]
        if missing:
            raise InventoryError(f"{path}: {name}: missing {', '.join(missing)}")
        key = Path(str(spec["key"]))
        key = key if key.is_absolute() else (path.parent / key).resolve()
        try:
            port = int(spec.get("port", 22))
        except (TypeError, ValueError):
            raise InventoryError(f"{path}: {name}: port must be a number") from None
        out[str(name)] = InventoryHost(
            str(name), str(spec["address"]), str(spec["user"]), str(key),
            str(spec["data_interface"]), str(spec["control_address"]),
            str(spec.get("data_address") or spec["address"]), port)
    return out


@dataclass
class StepResult:
    step: str
    ok: dict[str, int] = field(default_factory=dict)
    changed: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # host -> "task: message"
    unreachable: dict[str, str] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def problems(self) -> dict[str, str]:
        return {**{h: f"unreachable: {m}" for h, m in self.unreachable.items()}, **self.failed}

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "ok": self.ok, "changed": self.changed,
                "failed": self.failed, "unreachable": self.unreachable,
                "elapsed_s": round(self.elapsed_s, 3)}


class Playbooks:
    """One object per run: calls playbooks with fresh private data dirs under `base`."""

    def __init__(self, base: Path, hosts: dict[str, InventoryHost], control: str | None = None):
        self.base = base
        self.hosts = hosts
        self.control = control  # the run's SSH ControlPath (testbed/hosts/ssh.py)
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        self.cancelled.set()

    def run(self, step: str, hostvars: dict[str, dict[str, Any]],
            extravars: dict[str, Any] | None = None) -> StepResult:
        import time

        import ansible_runner

        self.base.mkdir(parents=True, exist_ok=True)
        # Fresh per call, numbered after what is there (teardown may run in a later process).
        n = len(list(self.base.glob("[0-9][0-9]-*")))
        while True:
            n += 1
            pdd = self.base / f"{n:02d}-{step}"
            try:
                pdd.mkdir()
                break
            except FileExistsError:
                continue
        inventory = {"all": {"hosts": {h: {**self.hosts[h].ansible_vars(), **v}
                                       for h, v in hostvars.items()}}}
        # the `-o` options; key and port are per-host variables
        opts = ssh_options("-", control=self.control)
        ssh_args = " ".join(f"-o {shlex.quote(opts[i + 1])}" for i in range(0, len(opts), 2)
                            if opts[i] == "-o")
        env = {
            # the venv's ansible-playbook, whatever PATH the orchestrator was started with
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
            "ANSIBLE_SSH_ARGS": ssh_args,
            "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_HOST_KEY_CHECKING": "False",
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "ANSIBLE_LOCAL_TEMP": str(pdd / "tmp"),
            "ANSIBLE_REMOTE_TMP": "/tmp/.ansible-tb",
            "ANSIBLE_TIMEOUT": "10",
        }
        began = time.monotonic()
        old_path = os.environ.get("PATH", "")
        os.environ["PATH"] = env["PATH"]  # ansible-runner looks the executable up here
        try:
            r = ansible_runner.run(
                private_data_dir=str(pdd), playbook=str(PLAYBOOKS / f"{step}.yml"),
                inventory=inventory, extravars=extravars or {}, envvars=env,
                forks=max(1, len(hostvars)), quiet=True,
                cancel_callback=self.cancelled.is_set,
                settings={"suppress_ansible_output": True})
        finally:
            os.environ["PATH"] = old_path
        res = StepResult(step, elapsed_s=time.monotonic() - began)
        stats = r.stats or {}
        res.ok = {h: int(n) for h, n in (stats.get("ok") or {}).items()}
        res.changed = {h: int(stats.get("changed", {}).get(h, 0)) for h in hostvars}
        for ev in r.events:
            data = ev.get("event_data") or {}
            host = data.get("host")
            if ev.get("event") == "runner_on_unreachable" and host:
                res.unreachable[host] = _message(data.get("res") or {})
            elif ev.get("event") == "runner_on_failed" and host and not data.get(
                    "ignore_errors"):
                res.failed.setdefault(host, f"task '{data.get('task', '?')}': "
                                            f"{_message(data.get('res') or {})}")
        if (r.status != "successful" or r.rc != 0) and not res.problems:
            # no host failed, yet the run did (a playbook that does not load, a cancel)
            res.failed["*"] = f"ansible-runner ended {r.status}: " + _tail(pdd)
        return res


def _message(res: dict[str, Any]) -> str:
    for key in ("msg", "stderr", "stdout", "module_stderr"):
        text = res.get(key)
        if text and str(text).strip():
            lines = [ln for ln in str(text).strip().splitlines() if ln.strip()]
            if key == "msg" and lines and lines[0].startswith("non-zero return code") and (
                    res.get("stderr") or res.get("stdout")):
                continue
            return lines[-1][:240] if lines else ""
    return "failed"


def _tail(pdd: Path) -> str:
    out = pdd / "artifacts"
    for f in sorted(out.rglob("stdout")):
        text = re.sub(r"\x1b\[[0-9;]*m", "", f.read_text(errors="replace"))
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        errors = [ln for ln in lines if "ERROR" in ln]
        return (errors or lines or [""])[0][:200]
    return ""


def teardown_entry(entry: dict[str, Any]) -> str | None:
    """The journal's `remote` entry undone: playbooks/teardown.yml on every host of the run
    (testbed/teardown.py calls this; it lives beside the playbooks, so that teardown and
    the remote backend need not import each other). One line: what was removed, and which
    host could not be reached (the others are still cleaned)."""
    hosts = {h: InventoryHost(h, s["address"], s["user"], s["key"], s["data_interface"],
                              s["control_address"], s.get("data_address", s["address"]),
                              int(s.get("port", 22)))
             for h, s in entry["hosts"].items()}
    base = Path(entry["run_path"]) / "ansible"
    if not base.parent.is_dir():
        base = Path("/tmp") / f"tb-{entry['run_id']}-ansible"
    base.mkdir(parents=True, exist_ok=True)
    book = Playbooks(base, hosts, control_path(entry["run_id"]))
    res = book.run("teardown", {h: {"tb_dir": entry["dir"], "tb_run_id": entry["run_id"],
                                    "tb_data_dev": i.data_interface} for h, i in hosts.items()})
    cleaned = sorted(h for h in hosts if h not in res.problems)
    line = f"remote run {entry['run_id']} on {', '.join(cleaned) or 'no host'}"
    if res.problems:
        line += "; NOT cleaned: " + "; ".join(f"{h} ({m})" for h, m in
                                              sorted(res.problems.items()))
        left = {h: s for h, s in entry["hosts"].items() if h in res.problems}
        if not left:  # the run itself failed ("*"): keep every host
            left = entry["hosts"]
        # What could not be cleaned stays in the journal under a new id, so the next
        # `testbed teardown RUN` tries those hosts again.
        journal = Journal(Path(entry["run_path"]) / "journal.jsonl")
        if journal.path.parent.is_dir():
            kept = {k: v for k, v in entry.items() if k not in ("op", "t", "id", "hosts")}
            journal.append("create", **kept, hosts=left,
                           id=f"remote:{entry['run_id']}:{'+'.join(sorted(left))}")
    return line
