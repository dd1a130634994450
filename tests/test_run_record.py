"""The run directory is read by one module (analysis/record.py, docs/architecture.md "Run
record"): no other module of the testbed reads faults.jsonl, faults.skipped.jsonl, plan.json,
drain.json or the delivery logs, and only it decides whether a run is a Maelstrom program's.

A function *reads* a run file when it names the file (a string that is the file's name or ends
in `/<name>`, or a constant that stands for it) and reads something in the same function
(`read_text`, `read_bytes`, `json.loads`, an `open` without a write mode...). Writing is not
reading: a function that names faults.jsonl to append to it is fine. Parsing a delivery-log
line (analysis/deliverylog.py `read_node`, `parse_line`) is reading wherever it happens.
"""

from __future__ import annotations

import ast
from pathlib import Path

from analysis.record import read_record

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("analysis", "testbed", "nodes", "bench")
RUN_FILES = ("faults.jsonl", "faults.skipped.jsonl", "plan.json", "drain.json", "events.jsonl")
# constants that stand for a run file (nodes/quiescence.py, testbed/runplan.py,
# testbed/faults/nemesis.py, analysis/deliverylog.py, analysis/record.py)
FILE_CONSTANTS = {"DRAIN_FILE", "PLAN_FILE", "SKIPPED_FILE"}
RECORD_CONSTANTS = {"FAULTS", "SKIPPED_FAULTS", "PLAN", "DRAIN"}
READS = {"read_text", "read_bytes", "loads", "load", "readlines", "readline", "read"}
PARSERS = {"read_node", "parse_line"}
RECORD = "analysis/record.py"
PARSER = "analysis/deliverylog.py"  # the log's line format, which the record reads through
# Modules that name a run file and never read one: they write it (the runner, the backends,
# the nodes' configs, the nemesis, the drain, the simulator's harnesses), or look at its size
# or whether it exists.
NAMERS = {
    "analysis/synthetic.py": "writes synthetic runs' logs and faults",
    "bench/switching_fig22.py": "the nodes' log paths it runs",
    "nodes/quiescence.py": "DRAIN_FILE, which the simulator writes",
    "testbed/backends/docker.py": "the nodes' log paths in their containers",
    "testbed/backends/remote.py": "the nodes' log paths on the hosts, and collecting them",
    "testbed/backends/sim.py": "where the simulator writes faults and the drain",
    "testbed/deploy.py": "the nodes' log paths",
    "testbed/drain.py": "writes drain.json",
    "testbed/explore/case.py": "where the in-process simulator writes faults and the drain",
    "testbed/faults/live.py": "appends live faults to faults.jsonl",
    "testbed/faults/nemesis.py": "writes faults.jsonl and faults.skipped.jsonl",
    "testbed/rundir.py": "creates faults.jsonl",
    "testbed/runner.py": "where the nemesis writes faults.jsonl",
    "testbed/runplan.py": "writes plan.json",
    "testbed/serve/runs.py": "a run's files' times, for its cache",
}
# Modules that read a run file besides the record, each with why: they follow a run that is
# still being written (line by line as it grows), act on a testbed that is up, or read the
# logs in bulk through the record's paths (Spark). The record is of a run whose nodes stopped.
READERS = {
    ("testbed/runview.py", "RunCounts.faults"): "the console's live view tails faults.jsonl",
    ("testbed/serve/live.py", "<module>"): "the live page parses the lines it tails",
    ("testbed/serve/live.py", "LiveRun.__init__"): "the live page of a run that is up",
    ("testbed/serve/live.py", "LiveRun._read_logs"): "tails the logs of a run that is up",
    ("testbed/serve/live.py", "LiveRun.poll"): "tails faults.jsonl of a run that is up",
    ("testbed/runplan.py", "read_plan"): "the hosts of a testbed that is up (mgmt, faults)",
    ("testbed/drain.py", "mark_cut_short"): "amends the drain.json of the run it stopped",
    ("testbed/backends/remote.py", "RemoteBackend._unpack"): "extracts the hosts' files from "
    "the archive it fetched (reads the archive, writes the run's files)",
    ("bench/sim_speed.py", "run_case"): "hashes the simulator's logs in its own work folder, "
    "not a run directory",
    ("analysis/maelstrom.py", "<module>"): "Spark's executors parse the lines of the logs the "
    "record names (`spark_logs`) with the record's line format",
    ("analysis/maelstrom.py", "parse_lines"): "the same",
}

def _names_run_file(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return any(node.value == f or node.value.endswith("/" + f) for f in RUN_FILES)
    if isinstance(node, ast.Name):
        return node.id in FILE_CONSTANTS
    if isinstance(node, ast.Attribute):
        return node.attr in FILE_CONSTANTS or (
            node.attr == "LOG" and isinstance(node.value, ast.Name)
            and node.value.id == "deliverylog")
    return False


def _write_mode(call: ast.Call) -> bool:
    modes = [a for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    modes += [k.value for k in call.keywords if k.arg == "mode"
              and isinstance(k.value, ast.Constant)]
    return any(isinstance(m, ast.Constant) and set(str(m.value)) & set("wax") for m in modes)


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _reads(call: ast.Call) -> bool:
    name = _call_name(call)
    return name in READS or (name == "open" and not _write_mode(call))


class _Scopes(ast.NodeVisitor):
    """Per function (module level as `<module>`): whether it names a run file, reads, parses
    a log line."""

    def __init__(self) -> None:
        self.stack = ["<module>"]
        self.found: dict[str, dict[str, bool]] = {}
        self.imported: set[str] = set()

    def _mark(self, key: str) -> None:
        self.found.setdefault(self.stack[-1], {})[key] = True

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.stack.append(node.name if len(self.stack) == 1 else f"{self.stack[-1]}.{node.name}")
        for stmt in node.body:
            self.visit(stmt)
        self.stack.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.stack.append(f"{self.stack[-1]}.{node.name}" if len(self.stack) > 1 else node.name)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # a docstring names files in prose
        for stmt in body:
            self.visit(stmt)
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "analysis.record":
            self.imported |= {a.asname or a.name for a in node.names} & RECORD_CONSTANTS
        if node.module == "analysis.deliverylog":
            self.imported |= {a.asname or a.name for a in node.names} & {"LOG"}
        if any(a.name in PARSERS for a in node.names) and node.module == "analysis.deliverylog":
            self._mark("parses")

    def generic_visit(self, node: ast.AST) -> None:
        if _names_run_file(node) or (isinstance(node, ast.Name) and node.id in self.imported):
            self._mark("names")
        if isinstance(node, ast.Call):
            if _reads(node):
                self._mark("reads")
            if _call_name(node) in PARSERS:
                self._mark("parses")
        super().generic_visit(node)


def _scan(source: str) -> _Scopes:
    tree = ast.parse(source)
    if tree.body and isinstance(tree.body[0], ast.Expr):
        tree.body = tree.body[1:]  # the module's docstring
    scopes = _Scopes()
    scopes.visit(tree)
    return scopes


def readers(source: str) -> list[str]:
    """The functions of a module's source that read a run file or parse a log line."""
    return sorted(name for name, f in _scan(source).found.items()
                  if (f.get("names") and f.get("reads")) or f.get("parses"))


def names_run_file(source: str) -> bool:
    """Whether the module names a run file anywhere but in docstrings."""
    return any(f.get("names") for f in _scan(source).found.values())


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_no_module_but_the_record_reads_a_run_file() -> None:
    stray, unlisted = {}, []
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        if rel in (RECORD, PARSER):
            continue
        source = path.read_text()
        found = [f for f in readers(source) if (rel, f) not in READERS]
        if found:
            stray[rel] = found
        if names_run_file(source) and rel not in NAMERS and \
                not any(r == rel for r, _ in READERS):
            unlisted.append(rel)
    assert stray == {}, ("read the run directory through analysis/record.py "
                         f"(`read_record`), not directly: {stray}")
    assert unlisted == [], ("these modules name a run file: read it through "
                            f"analysis/record.py, or list the module as a writer: {unlisted}")


def test_the_record_module_is_a_reader() -> None:
    """The check sees the record: it names every run file and parses the logs."""
    source = (ROOT / RECORD).read_text()
    assert names_run_file(source) and "RunRecord.node_logs" in readers(source)
    assert all(f'"{name}"' in source for name in RUN_FILES if name != "events.jsonl")


def test_a_stray_read_is_flagged_and_a_write_is_not() -> None:
    stray = '''
import json
from pathlib import Path

def crashed(run_dir: Path) -> list[str]:
    lines = (run_dir / "faults.jsonl").read_text().splitlines()
    return [json.loads(x)["host"] for x in lines]

def start(run_dir):
    with open(run_dir / "plan.json") as f:
        return json.load(f)["start_at_ns"]

def events(run_dir):
    return [p.read_bytes() for p in run_dir.glob("nodes/*/events.jsonl")]

def drained(run_dir):
    from nodes.quiescence import DRAIN_FILE
    return json.loads((run_dir / DRAIN_FILE).read_text())

def lines(path, host):
    from analysis.deliverylog import read_node
    return read_node(path, host)
'''
    assert readers(stray) == ["crashed", "drained", "events", "lines", "start"]
    writer = '''
import json

def record_fault(run_dir, entry):
    """Appends to faults.jsonl (never reads it)."""
    with (run_dir / "faults.jsonl").open("a") as f:
        f.write(json.dumps(entry) + "\\n")

def write_plan(run_dir, plan):
    (run_dir / "plan.json").write_text(json.dumps(plan))

def summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())
'''
    assert readers(writer) == []


def _decides_maelstrom(source: str) -> list[int]:
    """Lines that look up the workload's `maelstrom` key: the Maelstrom decision."""
    out = []
    for node in ast.walk(ast.parse(source)):
        key = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and node.args:
            key, obj = node.args[0], node.func.value
        elif isinstance(node, ast.Subscript):
            key, obj = node.slice, node.value
        if isinstance(key, ast.Constant) and key.value == "maelstrom" \
                and "workload" in ast.unparse(obj):
            out.append(node.lineno)
    return out


def test_the_maelstrom_decision_is_made_by_the_record_only() -> None:
    decided = {p.relative_to(ROOT).as_posix(): _decides_maelstrom(p.read_text())
               for p in _modules()}
    assert {k: v for k, v in decided.items() if v} .keys() == {RECORD}
    stray = 'def is_maelstrom(lock):\n    return bool((lock["workload"] or {}).get("maelstrom"))\n'
    assert _decides_maelstrom(stray) == [2]
    spec = 'def check(exp):\n    return exp.workload.maelstrom\n'  # a spec's field: no lookup
    assert _decides_maelstrom(spec) == []


def test_the_record_decides_maelstrom_from_the_lock(tmp_path: Path) -> None:
    (tmp_path / "nodes").mkdir()
    (tmp_path / "spec.lock.yaml").write_text(
        "experiment:\n  node: {program: [./echo]}\n  workload: {maelstrom: echo}\n")
    record = read_record(tmp_path)
    assert record.is_maelstrom and record.workload == "echo"
    (tmp_path / "spec.lock.yaml").write_text(
        "experiment:\n  protocol: {name: sequencer}\n  workload: {maelstrom: echo}\n")
    record = read_record(tmp_path)
    assert not record.is_maelstrom and record.protocol == ("sequencer", {})


def test_fault_times_count_from_the_workload_start(tmp_path: Path) -> None:
    (tmp_path / "nodes" / "h1").mkdir(parents=True)
    (tmp_path / "plan.json").write_text('{"start_at_ns": 5000000000}')
    (tmp_path / "faults.jsonl").write_text(
        '{"t": 7500000000, "kind": "crash", "phase": "start", "hosts": ["h1"], "fault": 0}\n'
        "not json\n\n[1]\n")
    record = read_record(tmp_path)
    assert [f["fault"] for f in record.faults] == [0]  # a broken line and a non-object skipped
    assert record.since_start_s(record.faults[0]["t"]) == 2.5
    assert record.history().crashed == {"h1"} and record.nodes == ("h1",)
