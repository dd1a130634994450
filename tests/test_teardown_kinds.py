"""Teardown's resource kinds are one table (testbed/teardown.py `REMOVERS`): every kind the
orchestrator journals has its remover there, and a journaled process is removed through it."""

from __future__ import annotations

import ast
import subprocess
import time
from pathlib import Path

from testbed import teardown
from testbed.processes import is_alive, start_time
from testbed.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]


def _record_kind(node: ast.AST) -> str | None:
    """The kind of a `{"op": "create", "kind": "..."}` record (what `journal.append_many`
    takes), else None."""
    if not isinstance(node, ast.Dict):
        return None
    fields = {k.value: v.value for k, v in zip(node.keys, node.values, strict=True)
              if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}
    return str(fields["kind"]) if fields.get("op") == "create" and "kind" in fields else None


def journaled_kinds() -> dict[str, str]:
    """kind -> where: every `journal.append("create", kind="...")` and every create record
    for `append_many` in testbed/."""
    out: dict[str, str] = {}
    for path in sorted((ROOT / "testbed").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            kind = _record_kind(node)
            if kind is not None:
                out.setdefault(kind, f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}")
                continue
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "append" and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value == "create"):
                continue
            for kw in node.keywords:
                if kw.arg == "kind" and isinstance(kw.value, ast.Constant):
                    out.setdefault(str(kw.value.value),
                                   f"{path.relative_to(ROOT)}:{node.lineno}")
    return out


def test_every_journaled_kind_has_a_remover_and_is_documented() -> None:
    kinds = journaled_kinds()
    # what the backends create: namespaces, links, qdiscs, rules, chains, containers, ...
    assert {"process", "netns", "link", "qdisc", "iptables", "iptables-chain", "qos",
            "container", "docker-network", "remote"} <= set(kinds)
    missing = {k: where for k, where in kinds.items() if k not in teardown.REMOVERS}
    assert not missing, f"journaled kinds teardown cannot undo: {missing}"
    doc = teardown.__doc__ or ""
    assert all(f"`{k}`" in doc for k in teardown.REMOVERS), "kinds missing from the docstring"


def test_a_journaled_process_is_removed_through_the_table(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "kinds")
    proc = subprocess.Popen(["sleep", "60"])
    try:
        run.journal.append("create", kind="process", id="p:sleep", pid=proc.pid,
                           starttime=start_time(proc.pid))
        run.journal.append("create", kind="no-such-kind", id="x")  # holds nothing: skipped
        removed = teardown.undo(run)
        assert removed == [f"process p:sleep (pid {proc.pid})"]
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while is_alive(proc.pid, None) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not is_alive(proc.pid, None)
        assert teardown.undo(run) == []  # idempotent: nothing live is left
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
