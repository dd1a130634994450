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
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            for kw in node.keywords:
                if kw.arg == "kind" and isinstance(kw.value, ast.Constant):
                    out.setdefault(str(kw.value.value), where)
            for record in (n for arg in node.args[1:] for n in ast.walk(arg)
                           if isinstance(n, ast.Dict)):
                for key, value in zip(record.keys, record.values, strict=True):
                    if (isinstance(key, ast.Constant) and key.value == "kind"
                            and isinstance(value, ast.Constant)):
                        out.setdefault(str(value.value), where)
    return out


def test_the_scan_finds_kinds_journaled_in_batches() -> None:
    assert journaled_kinds()["container"].startswith("testbed/backends/docker.py:")


def test_a_batch_of_records_is_on_disk_at_once_and_removed_like_single_ones(
        tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "batch")
    run.journal.append("create", kind="link", id="link:a", name="a")
    run.journal.append_many([{"op": "create", "kind": "container", "id": f"container:c{i}",
                              "name": f"c{i}"} for i in range(3)])
    lines = (run.path / "journal.jsonl").read_text().splitlines()
    assert len(lines) == 4
    assert [e["id"] for e in run.journal.live()] == ["link:a", "container:c0", "container:c1",
                                                     "container:c2"]
    run.journal.append_many([{"op": "remove", "id": "container:c0"},
                             {"op": "remove", "id": "container:c2"}])
    run.journal.append_many([])
    assert [e["id"] for e in run.journal.live()] == ["link:a", "container:c1"]


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
