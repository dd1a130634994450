"""Maelstrom node programs on the local backend (docs/maelstrom.md): the protocol pieces, the
spec, `testbed maelstrom test` end to end with this project's own node programs in Python and
JavaScript (tests/maelstrom_nodes/), and the checkers on logs they must flag and must not."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis.judge import judge_run
from analysis.record import read_record
from nodes.agent import libfaketime
from nodes.maelstrom import (
    CHUNK,
    Generator,
    Op,
    Reassembly,
    completion,
    fragments,
    neighbours,
    node_names,
)
from testbed.spec.loader import SpecError, load_experiment
from tests.eventlogs import agent_ops, read_faults
from tests.inproc import maelstrom_run, run_cli

NODES = Path(__file__).resolve().parent / "maelstrom_nodes"
needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="Node.js not installed")


# -- protocol pieces ------------------------------------------------------------------------
def test_neighbour_maps_follow_maelstrom_topologies() -> None:
    names = node_names(9)
    assert names[0] == "n0" and names[-1] == "n8"  # Maelstrom's --node-count names
    grid = neighbours(names, "grid")  # 3x3: the centre has four neighbours, a corner two
    assert sorted(grid["n4"]) == ["n1", "n3", "n5", "n7"]
    assert sorted(grid["n0"]) == ["n1", "n3"]
    assert neighbours(names, "line")["n0"] == ["n1"]
    assert sorted(neighbours(names, "line")["n4"]) == ["n3", "n5"]
    assert len(neighbours(names, "total")["n2"]) == 8
    tree = neighbours(names, "tree2")
    assert sorted(tree["n0"]) == ["n1", "n2"] and sorted(tree["n1"]) == ["n0", "n3", "n4"]
    assert neighbours(names, "tree") == tree  # Maelstrom's tree is tree2
    for kind in ("grid", "line", "tree3", "tree4"):
        m = neighbours(names, kind)
        assert all(a in m[b] for a in names for b in m[a]), kind  # symmetric
    with pytest.raises(ValueError):
        neighbours(names, "ring")


def test_fragments_reassemble_in_any_order_and_bad_frames_are_refused() -> None:
    data = bytes(random.Random(1).randrange(256) for _ in range(5 * CHUNK + 7))
    frags = fragments(42, data)
    assert len(frags) == 6
    random.Random(2).shuffle(frags)
    r = Reassembly()
    got = [r.add("n1", f, 0) for f in frags]
    assert [g for g in got if g is not None] == [data]
    assert r.pending == {}
    with pytest.raises(ValueError):
        r.add("n1", b"XX" + frags[0][2:], 0)
    with pytest.raises(ValueError):
        r.add("n1", b"TM", 0)


def test_error_codes_make_fail_or_info() -> None:
    op = Op("broadcast", {"type": "broadcast", "message": 7}, 7)
    assert completion(op, {"type": "broadcast_ok"})[:2] == ("ok", 7)
    assert completion(op, {"type": "error", "code": 11})[0] == "fail"  # definite
    assert completion(op, {"type": "error", "code": 0})[0] == "info"  # timeout: maybe
    assert completion(op, {"type": "error", "code": 13})[0] == "info"  # crash: maybe
    assert completion(op, {"type": "read_ok"})[0] == "info"  # a reply of the wrong type
    read = Op("read", {"type": "read"})
    assert completion(read, {"type": "read_ok", "messages": [1, 2]})[1] == [1, 2]


def test_broadcast_values_never_repeat_across_hosts_and_incarnations() -> None:
    seen: set[Any] = set()
    for host in range(3):
        for inc in range(2):
            g = Generator("broadcast", host, 3, inc, random.Random(host))
            for _ in range(200):
                op = g.next()
                if op.f == "broadcast":
                    assert op.value not in seen
                    seen.add(op.value)


# -- the spec --------------------------------------------------------------------------------
def _spec(tmp_path: Path, **over: Any) -> Path:
    data: dict[str, Any] = {
        "name": "m", "backend": "local", "duration": "2s",
        "topology": {"name": "flat", "sites": {"s": {"lan": {"delay": "1ms"}}},
                     "hosts": [{"name": "h1", "site": "s"}, {"name": "h2", "site": "s"}]},
        "node": {"program": ["python3", "node.py"], "speaks": "maelstrom"},
        "workload": {"maelstrom": "broadcast", "rate": "10/s"},
    }
    data.update(over)
    (tmp_path / "node.py").write_text("")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _problem(path: Path) -> str:
    with pytest.raises(SpecError) as info:
        load_experiment(path)
    return str(info.value)


def test_spec_takes_a_program_and_a_workload(tmp_path: Path) -> None:
    exp, topo = load_experiment(_spec(tmp_path))
    assert exp.maelstrom and exp.protocol.name == "maelstrom"
    assert exp.node is not None
    assert exp.node.program == ["python3", str((tmp_path / "node.py").resolve())]
    assert exp.workload.maelstrom == "broadcast" and exp.workload.topology == "grid"


@pytest.mark.parametrize(("over", "field", "says"), [
    ({"protocol": {"name": "sequencer"}}, "protocol", "leave `protocol` out"),
    ({"backend": "sim"}, "backend", "run on local"),
    ({"workload": {"rate": "10/s"}}, "workload.maelstrom", "needs a workload"),
    ({"node": {"program": ["./nope"], "speaks": "maelstrom"}}, "node.program.0", "no program"),
    ({"node": {"program": ["python3"], "speaks": "erlang"}}, "node.speaks", "maelstrom"),
    ({"workload": {"maelstrom": "datomic", "rate": "1/s"}}, "workload.maelstrom",
     "broadcast"),
    ({"faults": [{"kind": "pause", "host": "h1", "at": "1s"}]}, "faults.0.kind",
     "not built yet"),
    ({"management": {"tls": True}}, "management.tls", "HTTP only"),
    ({"transport": "tls"}, "transport", "udp only"),
])
def test_spec_errors_are_located(tmp_path: Path, over: dict[str, Any], field: str,
                                 says: str) -> None:
    text = _problem(_spec(tmp_path, **over))
    assert f": {field}: " in text and says in text, text
    assert text.startswith(str(tmp_path / "exp.yaml") + ":")


def test_a_maelstrom_workload_needs_a_program(tmp_path: Path) -> None:
    path = _spec(tmp_path, protocol={"name": "sequencer"})
    data = yaml.safe_load(path.read_text())
    del data["node"]
    path.write_text(yaml.safe_dump(data))
    assert ": workload.maelstrom: a Maelstrom workload needs `node:" in _problem(path)


# -- the CLI -----------------------------------------------------------------------------------
def test_bad_input_exits_2_and_dry_run_prints_the_experiment(tmp_path: Path) -> None:
    bin_ = str(NODES / "broadcast.py")
    for args in (["-w", "datomic"], ["-w", "echo", "--nemesis", "clocks"],
                 ["-w", "echo", "--latency-dist", "poisson"],
                 ["-w", "echo", "--concurrency", "x"]):
        r = run_cli("maelstrom", "test", "--bin", bin_, "--out", str(tmp_path), *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
    # --latency-dist exponential: delay = jitter, exponential jitter (docs/link-model.md)
    r = run_cli("maelstrom", "test", "-w", "echo", "--bin", bin_, "--latency", "20",
                "--latency-dist", "exponential", "--dry-run", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    lan = yaml.safe_load(r.stdout.split("dry run")[0])["topology"]["sites"]["net"]["lan"]
    assert lan == {"delay": "20ms", "jitter": "20ms", "jitter_dist": "exponential"}
    # The docker node image has no Node.js: refused before anything runs.
    r = run_cli("maelstrom", "test", "-w", "echo", "--bin", str(NODES / "echo.js"),
                "--backend", "docker", "--out", str(tmp_path))
    assert r.returncode == 2 and "no Node.js" in r.stdout + r.stderr, r.stdout + r.stderr
    r = run_cli("maelstrom", "test", "-w", "broadcast", "--bin", bin_, "--node-count", "5",
                "--time-limit", "20", "--rate", "10", "--concurrency", "2n", "--latency",
                "30", "--latency-dist", "uniform", "--topology", "line", "--nemesis",
                "partition,kill", "--nemesis-interval", "4", "--dry-run", "--out",
                str(tmp_path), "--", "--no-forward")
    assert r.returncode == 0, r.stdout + r.stderr
    spec = yaml.safe_load(r.stdout.split("dry run")[0])
    assert spec["node"]["program"] == [bin_, "--no-forward"]
    assert spec["workload"] == {"maelstrom": "broadcast", "rate": "10/s", "concurrency": 10,
                                "topology": "line"}
    assert spec["topology"]["sites"]["net"]["lan"] == {"delay": "30ms", "jitter": "30ms",
                                                       "jitter_dist": "uniform"}
    kinds = [(f["kind"], f.get("exec")) for f in spec["faults"]]
    # kills every interval; partitions drawn as Maelstrom's nemesis draws them (below)
    assert [k for k in kinds if k[0] == "mgmt"] == [("mgmt", ["kill"]), ("mgmt", ["start"])] * 4
    assert ("partition", None) in kinds
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_partitions_are_drawn_as_maelstroms_nemesis_draws_them() -> None:
    """Jepsen's combined partition package with Maelstrom's defaults: targets one node, a
    minority third, majority halves, a majorities ring; start and heal each after a delay
    drawn from [0, 2 x interval); one at a time, healed by the workload's end."""
    from testbed.cli.maelstrom import _partitions

    hosts = [f"n{i}" for i in range(7)]
    seen: set[str] = set()
    for seed in range(200):
        parts = _partitions(10.0, 60.0, hosts, random.Random(seed))
        ends = 0.0
        for p in parts:
            at, lasts = float(p["at"].rstrip("s")), float(p["for"].rstrip("s"))
            assert ends <= at and at < 60 and at + lasts <= 60.0 + 1e-9
            assert at - ends < 20 + 1e-9 and lasts < 20
            ends = at + lasts
            if "isolate" in p:
                seen.add("one")
            elif "groups" in p:
                assert sorted(len(g) for g in p["groups"]) == [2, 5]  # (7 - 1) // 3 = 2
                seen.add("minority-third")
            else:
                seen.add(p["shape"])
    assert seen == {"one", "minority-third", "majority", "majorities-ring"}
    # with three nodes a minority third is empty: never drawn as a partition
    assert all("groups" not in p for seed in range(50)
               for p in _partitions(2.0, 30.0, hosts[:3], random.Random(seed)))


def test_maelstroms_flags_node_names_and_one_line_errors(tmp_path: Path) -> None:
    bin_ = str(NODES / "echo.js")

    def cli(*args: str) -> Any:
        return run_cli("maelstrom", "test", "--bin", bin_, "--out", str(tmp_path), *args)

    def hosts(*args: str) -> list[str]:
        r = cli("-w", "echo", "--dry-run", *args)
        assert r.returncode == 0, r.stdout + r.stderr
        return [h["name"] for h in yaml.safe_load(r.stdout.split("dry run")[0])["topology"]
                ["hosts"]]

    assert hosts("--node-count", "3") == ["n0", "n1", "n2"]  # Maelstrom numbers from 0
    assert hosts("--nodes", "n1,n2,n3") == ["n1", "n2", "n3"]
    assert hosts() == ["n1", "n2", "n3", "n4", "n5"]  # Maelstrom's default nodes
    # Every flag of Maelstrom's test command parses; --rate 0 makes no operations.
    r = cli("-w", "broadcast", "--dry-run", "--availability", "total", "--log-stderr",
            "--log-net-send", "--log-net-recv", "--test-count", "2", "--key-count", "3",
            "--max-txn-length", "4", "--max-writes-per-key", "8", "--rate", "0", "--topology",
            "tree", "--nemesis", "partition", "--nemesis-interval", "3", "--time-limit", "5",
            "--concurrency", "2n", "--latency", "10", "--node-count", "2", "--", "--verbose")
    assert r.returncode == 0, r.stdout + r.stderr
    spec = yaml.safe_load(r.stdout.split("dry run")[0])
    assert spec["workload"] == {"maelstrom": "broadcast", "concurrency": 4, "topology": "tree"}
    assert spec["node"]["program"] == [bin_, "--verbose"]
    errors = {
        ("--frobnicate",): "--frobnicate",
        ("--node-count", "0"): "--node-count 0: must be positive",
        ("--nodes", "a,b"): "--nodes a,b",
        ("--consistency-models", "linearizable"): "--consistency-models 'linearizable'",
        ("--availability", "most"): "--availability 'most'",
        ("-w", "datomic"): "-w 'datomic': not a workload; known: echo, broadcast",
    }
    for args, words in errors.items():
        r = cli(*(args if args[0] == "-w" else ("-w", "echo", *args)))
        lines = (r.stdout + r.stderr).strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and words in lines[0], (args, lines)
    r = cli("-w", "datomic")
    assert r.returncode == 2 and "txn-rw-register" in r.stdout + r.stderr, r.stdout + r.stderr
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []  # nothing created


def test_a_program_that_cannot_start_fails_at_once(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("#!/usr/bin/env python3\nimport nosuchmodule_x\n")
    broken.chmod(0o755)
    out = tmp_path / "runs"
    r = run_cli("maelstrom", "test", "-w", "echo", "--bin", str(broken), "--out", str(out))
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, lines
    assert "cannot start" in lines[0] and "ModuleNotFoundError" in lines[0], lines
    plain = tmp_path / "plain.txt"  # not executable
    plain.write_text("x")
    r = run_cli("maelstrom", "test", "-w", "echo", "--bin", str(plain), "--out", str(out))
    assert r.returncode == 2 and "Permission denied" in r.stdout + r.stderr
    assert not out.exists()


def test_refusals_make_echo_invalid_and_broadcast_unknown(tmp_path: Path) -> None:
    """Maelstrom's verdicts: an echo refused is an echo checker error (invalid, exit 1); a
    broadcast that never succeeds leaves nothing to lose, and Jepsen's stats make it
    unknown (exit 2); results.json carries Maelstrom's keys."""
    kv = str(NODES / "kv.py")
    code, s, run, out = _test(tmp_path / "echo", "-w", "echo", "--bin", kv, "--node-count",
                              "2", "--time-limit", "6", "--rate", "20", "--", "--refuse")
    res = json.loads((run / "results.json").read_text())
    assert code == 1 and res["valid?"] is False, out
    assert s["checks"]["maelstrom_echo"]["violations"] == s["maelstrom"]["ops"]["fail"] > 0
    assert out.rstrip().splitlines()[-1].startswith("Analysis invalid!")
    code, s, run, out = _test(tmp_path / "bc", "-w", "broadcast", "--bin", kv,
                              "--node-count", "2", "--time-limit", "6", "--rate", "20", "--",
                              "--refuse")
    res = json.loads((run / "results.json").read_text())
    assert code == 2 and res["valid?"] == "unknown", out
    assert set(res) >= {"valid?", "stats", "net", "workload", "availability"}
    assert res["stats"]["by-f"]["broadcast"]["valid?"] == "unknown"
    assert res["stats"]["by-f"]["read"]["valid?"] is True
    assert res["workload"]["valid?"] is True and res["net"]["servers"]["msgs-per-op"] == 0
    assert out.rstrip().splitlines()[-1].startswith("Errors occurred during analysis")


def test_results_availability_and_the_merge_of_verdicts() -> None:
    from analysis.maelstrom import results

    summary = {"ok": True, "checks": {}, "maelstrom": {
        "ops": {"total": 10, "ok": 8, "fail": 2, "info": 0}, "availability": 0.8,
        "by_f": {"add": {"ok": 4, "fail": 2, "info": 0}, "read": {"ok": 4, "fail": 0,
                                                                  "info": 0}}}}
    assert results(summary)["valid?"] is True
    assert results(summary, 0.8)["valid?"] is True
    low = results(summary, 1.0)
    assert low["valid?"] is False and low["availability"]["valid?"] is False
    summary["maelstrom"]["by_f"]["add"]["ok"] = 0
    assert results(summary)["valid?"] == "unknown"  # an f that never succeeded
    assert results(summary, 1.0)["valid?"] is False  # false beats unknown
    assert results({**summary, "ok": False})["valid?"] is False


def test_maelstrom_test_on_remote_needs_an_inventory_and_names_its_hosts(tmp_path: Path
                                                                         ) -> None:
    """`--backend remote` without `--inventory`: one line, exit 2, nothing created; with
    one, a flat network's nodes are the inventory's first hosts and the experiment records
    the inventory (so `testbed run` of its lock finds the same hosts)."""
    bin_ = str(NODES / "broadcast.py")
    out = tmp_path / "runs"
    r = run_cli("maelstrom", "test", "-w", "echo", "--bin", bin_, "--backend", "remote",
                "--out", str(out))
    assert r.returncode == 2 and "--inventory" in r.stdout + r.stderr, r.stdout + r.stderr
    inv = tmp_path / "hosts.yaml"
    inv.write_text(yaml.safe_dump({"hosts": {
        name: {"address": f"198.19.9.{k}", "user": "root", "key": "id", "data_interface": "e1",
               "control_address": f"198.19.9.{k}", "data_address": f"198.18.9.{k}"}
        for k, name in enumerate(["alpha", "beta", "gamma"], 1)}}))
    r = run_cli("maelstrom", "test", "-w", "echo", "--bin", bin_, "--backend", "remote",
                "--node-count", "4", "--inventory", str(inv), "--out", str(out))
    assert r.returncode == 2 and "has 3 hosts" in r.stdout + r.stderr, r.stdout + r.stderr
    r = run_cli("maelstrom", "test", "-w", "echo", "--bin", bin_, "--backend", "remote",
                "--node-count", "2", "--inventory", str(inv), "--dry-run", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    spec = yaml.safe_load(r.stdout.split("dry run")[0])
    assert spec["inventory"] == str(inv) and spec["backend"] == "remote"
    assert [h["name"] for h in spec["topology"]["hosts"]] == ["alpha", "beta"]
    assert not out.exists()


def test_the_remote_backend_ships_the_program_and_points_its_command_at_the_copy(
        tmp_path: Path) -> None:
    """What `--backend remote` copies (docs/maelstrom.md, remote): the program's directory
    (its modules beside it, modes kept, no __pycache__), a file named in a top-level directory
    alone; the command rewritten into the copy; the command the host must have."""
    import tarfile

    from testbed.maelstrom import interpreter, program_sources, program_tarball, remote_argv

    prog = tmp_path / "prog"
    (prog / "__pycache__").mkdir(parents=True)
    (prog / "__pycache__" / "x.pyc").write_bytes(b"x")
    (prog / "lib").mkdir()
    (prog / "lib" / "util.py").write_text("X = 1\n")
    main = prog / "node.py"
    main.write_text("#!/usr/bin/env -S python3 -u\nimport sys\n")
    main.chmod(0o755)
    data = tmp_path / "data.json"
    data.write_text("{}")
    argv = [str(main), "--data", str(data), "--flag"]
    sources = program_sources(argv)
    assert sources == [tmp_path]  # prog/ is inside tmp_path: copied with it
    sources = program_sources([str(main), "--data", str(prog / "lib" / "util.py")])
    assert sources == [prog]
    remote = remote_argv([str(main), str(prog / "lib"), "-v"], sources, "/var/tmp/tb-x/program")
    assert remote == ["/var/tmp/tb-x/program/0/node.py", "/var/tmp/tb-x/program/0/lib", "-v"]
    assert interpreter([str(main)], sources) == "python3"
    assert interpreter(["node", str(main)], sources) == "node"
    tar = program_tarball(sources, tmp_path / "out" / "p.tar.gz")
    with tarfile.open(tar) as t:
        members = {m.name: m for m in t.getmembers()}
    assert set(members) == {"0", "0/node.py", "0/lib", "0/lib/util.py"}, set(members)
    assert members["0/node.py"].mode & 0o111 and members["0/node.py"].uid == 0
    top = Path("/tmp") / f"tb-test-node-{tmp_path.name}.py"  # a file in a top-level dir
    top.write_text("print()\n")
    try:
        assert program_sources(["python3", str(top)]) == [top]
        assert remote_argv(["python3", str(top)], [top], "/r") == ["python3",
                                                                    f"/r/0/{top.name}"]
    finally:
        top.unlink()
    assert program_sources(["/usr/bin/python3", "-u"]) == []  # the host's own


def test_maelstrom_logs_are_moved_onto_the_orchestrators_clock(tmp_path: Path) -> None:
    """A remote host's clock offset (spec.lock.yaml `clocks`) comes off its events' `t`, as
    for protocol nodes: otherwise a message would arrive before it was sent."""
    from analysis.maelstrom import read_logs, transit

    for host, rows in {"h1": [("nsend", 1_000_000_000, "n1", "n2")],
                       "h2": [("nrecv", 1_250_000_000, "n1", "n2")]}.items():
        d = tmp_path / "nodes" / host
        d.mkdir(parents=True)
        d.joinpath("events.jsonl").write_text("".join(json.dumps(
            {"t": t, "lt": t, "node": host, "i": 0, "ev": ev, "src": src, "dest": dst,
             "type": "gossip", "msg_id": 7, "in_reply_to": None, "size": 10}) + "\n"
            for ev, t, src, dst in rows))
    assert transit(read_logs(read_record(tmp_path))[0])["n1->n2"]["p50"] == 250.0
    (tmp_path / "spec.lock.yaml").write_text(yaml.safe_dump(
        {"clocks": {"h2": {"offset_ms": 240.0}}}))  # h2's clock runs 240 ms ahead
    assert transit(read_logs(read_record(tmp_path))[0])["n1->n2"]["p50"] == 10.0


def _test(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any], Path, str]:
    # A short settle before the final reads (Maelstrom's 10 s): these programs gossip often.
    r = run_cli("maelstrom", "test", "--out", str(tmp_path), "--settle", "1", *args)
    runs = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert runs, r.stdout + r.stderr
    run = runs[-1]
    summary = json.loads((run / "summary.json").read_text())
    return r.returncode, summary, run, r.stdout


# -- end to end, with this project's node programs ------------------------------------------
def test_broadcast_with_retries_is_valid_under_partition(tmp_path: Path) -> None:
    code, s, run, out = _test(tmp_path, "-w", "broadcast", "--bin",
                              str(NODES / "broadcast.py"), "--node-count", "4",
                              "--time-limit", "3", "--rate", "20", "--nemesis", "partition",
                              "--nemesis-interval", "2", "--latency", "2")
    m = s["maelstrom"]
    assert code == 0, out
    assert out.rstrip().splitlines()[-1].startswith("Everything looks good!")
    assert m["valid"] and m["lost"] == 0 and m["unexpected"] == 0
    assert m["acknowledged"] > 5 and m["stable_latency_ms"]["max"] > 0
    assert m["msgs_per_op"]["servers"] > 0
    faults = [json.loads(x) for x in (run / "faults.jsonl").read_text().splitlines()]
    assert [(f["kind"], f["phase"]) for f in faults] == [("partition", "start"),
                                                         ("partition", "stop")]
    stops = [json.loads(x) for h in ("n0", "n1", "n2", "n3")
             for x in (run / "nodes" / h / "events.jsonl").read_text().splitlines()
             if '"ev":"stop"' in x]
    # The partition really cut messages that the retries then carried across.
    assert sum(st["counters"].get("blocked_out", 0) for st in stops) > 0
    lock = yaml.safe_load((run / "spec.lock.yaml").read_text())
    assert lock["experiment"]["node"]["speaks"] == "maelstrom"
    report = (run / "report.html").read_text()
    for part in ("Maelstrom workload", "Client operation latency over time", "partition",
                 "Node-to-node messages"):
        assert part in report, part


def test_broadcast_that_never_forwards_loses_values(tmp_path: Path) -> None:
    code, s, _, out = _test(tmp_path, "-w", "broadcast", "--bin", str(NODES / "broadcast.py"),
                            "--node-count", "3", "--time-limit", "2", "--rate", "20", "--",
                            "--no-forward")
    assert code == 1
    assert out.rstrip().splitlines()[-1].startswith("Analysis invalid!")
    assert s["maelstrom"]["lost"] > 0 and s["checks"]["maelstrom_lost"]["violations"] > 0
    assert s["checks"]["maelstrom_unexpected"]["violations"] == 0


def test_total_order_in_arrival_order_is_invalid_under_jitter(tmp_path: Path) -> None:
    code, s, _, _ = _test(tmp_path, "-w", "total-order", "--bin", str(NODES / "total_order.py"),
                          "--node-count", "3", "--time-limit", "2", "--rate", "40",
                          "--latency", "30", "--latency-dist", "uniform", "--", "--mode",
                          "arrival")
    assert code == 1
    assert s["checks"]["total_order"]["violations"] > 0  # the testbed's own checker
    assert s["checks"]["maelstrom_lost"]["violations"] == 0  # nothing lost: only the order


def test_total_order_with_a_sequencer_is_valid(tmp_path: Path) -> None:
    code, s, _, out = _test(tmp_path, "-w", "total-order", "--bin",
                            str(NODES / "total_order.py"), "--node-count", "3",
                            "--time-limit", "2", "--rate", "40", "--latency", "30",
                            "--latency-dist", "uniform", "--", "--mode", "sequencer")
    assert code == 0, out
    for name in ("total_order", "agreement", "validity", "integrity", "read_prefix"):
        assert s["checks"][name]["violations"] == 0 and s["checks"][name]["claimed"], name
    assert s["maelstrom"]["acknowledged"] > 10


@pytest.mark.timing
def test_messages_between_nodes_follow_the_wan(tmp_path: Path) -> None:
    """--net two-sites: 0.5 ms within a site, 10 ms between the sites (one way)."""
    net = Path(__file__).resolve().parents[1] / "topologies" / "two-sites.yaml"
    code, s, _, out = _test(tmp_path, "-w", "broadcast", "--bin", str(NODES / "broadcast.py"),
                            "--net", str(net), "--time-limit", "2", "--rate", "40")
    assert code == 0, out
    transit = s["maelstrom"]["transit_ms"]
    assert s["maelstrom"]["names"] == {"h1": "n0", "h2": "n1", "h3": "n2", "h4": "n3"}
    sites = {"n0": "a", "n1": "a", "n2": "b", "n3": "b"}
    wan = [q["p50"] for pair, q in transit.items()
           if sites[pair[:2]] != sites[pair[-2:]]]
    lan = [q["p50"] for pair, q in transit.items()
           if sites[pair[:2]] == sites[pair[-2:]]]
    assert len(wan) == 8 and len(lan) == 4, transit
    assert min(wan) >= 10.0  # never faster than the WAN's delay
    assert max(lan) < 5.0  # and the agents add little to a LAN hop


@needs_node
def test_g_counter_in_javascript(tmp_path: Path) -> None:
    code, s, _, out = _test(tmp_path, "-w", "g-counter", "--bin", str(NODES / "g_counter.js"),
                            "--node-count", "3", "--time-limit", "2", "--rate", "20",
                            "--latency", "5")
    m = s["maelstrom"]
    assert code == 0, out
    assert m["acknowledged_sum"] > 0
    assert set(m["final_values"].values()) == {m["acknowledged_sum"]}
    assert s["checks"]["maelstrom_read_bounds"]["violations"] == 0


@needs_node
def test_echo_in_javascript_survives_kill_and_pause(tmp_path: Path) -> None:
    run, s = maelstrom_run(tmp_path, "--settle", "1", "-w", "echo", "--bin",
                           str(NODES / "echo.js"), "--node-count", "2", "--time-limit", "3.2",
                           "--rate", "30", "--nemesis", "kill,pause", "--nemesis-interval", "1.5")
    faults = read_faults(run)
    assert agent_ops(faults) == [
        ("kill", "killed"), ("start", "starting"), ("pause", "paused"), ("resume", "running")]
    killed = faults[0]["hosts"][0]
    rows = [json.loads(x) for x in (run / "nodes" / killed / "events.jsonl").read_text()
            .splitlines()]
    evs = [r["ev"] for r in rows if r["ev"] in ("init", "kill", "killed", "restart")]
    assert evs == ["init", "kill", "killed", "restart", "init"]  # a fresh init
    assert [r["code"] for r in rows if r["ev"] == "killed"] == [-9]
    m = s["maelstrom"]
    assert m["restarts"] == 1 and m["program_exits"] == 0 and m["ops"]["ok"] > 10
    assert m["ops"]["info"] > 0  # operations while the program was down
    # An echo waiting on the stopped program took about as long as the pause (0.75 s).
    assert m["latency_ms"]["max"] > 300


@pytest.mark.skipif(libfaketime() is None, reason="libfaketime not installed (make installs it)")
def test_clock_nemesis_skews_the_programs_wall_clock(tmp_path: Path) -> None:
    run, s = maelstrom_run(tmp_path, "--settle", "1", "-w", "echo", "--bin",
                           str(NODES / "clock.py"), "--node-count", "2", "--time-limit", "3",
                           "--rate", "40", "--nemesis", "clock", "--nemesis-interval", "2")
    faults = read_faults(run)
    assert [f["params"]["exec"][0] for f in faults] == ["skew", "skew"]
    skew_ms = faults[0]["params"]["exec"][1]
    assert abs(skew_ms) >= 1000 and faults[1]["params"]["exec"][1] == 0
    host = faults[0]["hosts"][0]
    # The program's wall clock minus its monotonic clock: constant but for the skew.
    offsets = [float(w) - float(m) for line in (run / "nodes" / host / "node.log")
               .read_text().splitlines() if line.startswith("clock ")
               for _, w, m in [line.split()]]
    assert len(offsets) > 8
    # The last requests came after the fault (true time again): the others, relative to them.
    shifts = [round((o - offsets[-1]) * 1000) for o in offsets]
    assert any(abs(d - skew_ms) < 100 for d in shifts), (skew_ms, shifts)  # skewed ...
    assert all(abs(d - skew_ms) < 100 or abs(d) < 100 for d in shifts), shifts  # ... or not
    other = next(h for h in ("n0", "n1") if h != host)
    theirs = [float(w) - float(m) for line in (run / "nodes" / other / "node.log")
              .read_text().splitlines() if line.startswith("clock ")
              for _, w, m in [line.split()]]
    assert theirs and max(theirs) - min(theirs) < 0.1  # the other program kept true time
    assert s["maelstrom"]["clock"]["skews"] == 2 and s["maelstrom"]["clock"]["faked"] == [host]
    assert "Go&#x27;s runtime" in (run / "report.html").read_text()  # what is not skewed


def test_a_crash_restarts_the_agent_and_its_program(tmp_path: Path) -> None:
    """A crash of a program's host: SIGKILL to the agent, whose program dies with it
    (PR_SET_PDEATHSIG); the restart is a new incarnation with a fresh init. The unique-ids
    program counts in memory, so the restarted one hands out its ids again: the checker
    must catch that. The test runs the runner's own steps (start_nodes, the crash and restart
    primitives through the backend's controls as the nemesis applies them, the drain's `stop`,
    the judge) and acts on conditions, not times: it crashes h2 once its program has handed
    out ids and stops the run once the restarted one has, so a loaded machine that starts
    programs late changes how long the test takes, not what it proves."""
    import io
    import time as _time

    from rich.console import Console

    from nodes.faults import Crash, FaultHistory, Restart, apply
    from testbed.backends import make_backend
    from testbed.rundir import RunDir
    from testbed.runner import _watch, analyze_run, start_nodes, write_lock
    from testbed.runplan import RunPlan
    from testbed.teardown import teardown

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "name": "crash", "backend": "local", "duration": "60s", "drain": "500ms",
        "topology": {"name": "flat", "sites": {"s": {"lan": {"delay": "1ms"}}},
                     "hosts": [{"name": "h1", "site": "s"}, {"name": "h2", "site": "s"}]},
        "node": {"program": [str(NODES / "unique_ids.py")], "speaks": "maelstrom"},
        "workload": {"maelstrom": "unique-ids", "rate": "20/s"}}))
    exp, topo = load_experiment(path)
    plan = RunPlan.build(exp, topo)
    run = RunDir.create(tmp_path / "runs", exp.name)
    write_lock(run, exp, topo, plan.paths)
    backend = make_backend(exp.backend, run, topo, plan.paths, seed=exp.seed)
    console = Console(file=io.StringIO())

    def rows() -> list[dict[str, Any]]:
        log = run.path / "nodes" / "h2" / "events.jsonl"
        text = log.read_text() if log.exists() else ""
        return [json.loads(x) for x in text.splitlines() if x.endswith("}")]

    def ids(incarnation: int) -> int:  # ids h2's program handed out in that incarnation
        inc, n = -1, 0
        for r in rows():
            inc += r["ev"] == "start"
            n += inc == incarnation and r["ev"] == "op" and r["type"] == "ok"
        return n

    def wait_for(what: str, cond: Any) -> None:
        deadline = _time.monotonic() + 90
        while not cond():
            assert _time.monotonic() < deadline, f"{what}: {rows()}"
            _time.sleep(0.05)

    try:
        plan, _ = start_nodes(plan, run, backend)
        wait_for("the first program's ids", lambda: ids(0) >= 2)
        history = FaultHistory(run.path / "faults.jsonl")
        assert backend.controls is not None
        for prim in (Crash("h2"), Restart("h2")):
            history.append(prim, _time.time_ns(), apply(backend.controls, prim))
        wait_for("the restarted program's ids", lambda: ids(1) >= 2)
        for host in plan.hosts:  # what the drain does once the run is over
            run.mgmt_client(host).exec("testbed:type=Node", "stop")
        _watch(plan, run, backend, console, plan.start_at_ns)
        backend.collect()
    finally:
        backend.down()
        teardown(run)
    result = analyze_run(read_record(run.path), exp.expect, console)
    assert not result.ok
    faults = [json.loads(x) for x in (run.path / "faults.jsonl").read_text().splitlines()]
    assert [(f["kind"], f["phase"], f["measured"]["alive"]) for f in faults] == [
        ("crash", "start", False), ("crash", "stop", True)]
    h2 = rows()
    assert [r["incarnation"] for r in h2 if r["ev"] == "start"] == [0, 1]
    assert sum(1 for r in h2 if r["ev"] == "init" and r["ok"]) == 2
    s = json.loads((run.path / "summary.json").read_text())
    assert s["maelstrom"]["restarts"] == 1 and s["maelstrom"]["program_exits"] == 0
    dup = s["checks"]["maelstrom_unique"]["examples"]
    assert dup and all(str(d).startswith("n1-") for d in dup)  # the restarted node's ids


def test_testbed_run_takes_the_same_experiment(tmp_path: Path) -> None:
    """`testbed run EXP.yaml` with `node:` and `workload.maelstrom` (a program path relative
    to the experiment file), judged like `testbed maelstrom test`."""
    import os

    exp = tmp_path / "exp.yaml"
    program = os.path.relpath(NODES / "unique_ids.py", tmp_path)
    exp.write_text(yaml.safe_dump({
        "name": "ids", "backend": "local", "duration": "2s", "drain": "500ms",
        "topology": {"name": "flat", "sites": {"s": {"lan": {"delay": "1ms"}}},
                     "hosts": [{"name": f"h{i}", "site": "s"} for i in (1, 2, 3)]},
        "node": {"program": ["python3", program], "speaks": "maelstrom"},
        "workload": {"maelstrom": "unique-ids", "rate": "30/s", "concurrency": 6},
        "expect": ["maelstrom.ops.ok > 5"]}))
    r = run_cli("run", str(exp), "--out", str(tmp_path / "runs"))
    assert r.returncode == 0, r.stdout + r.stderr
    run = next((tmp_path / "runs").iterdir())
    s = json.loads((run / "summary.json").read_text())
    assert s["checks"]["maelstrom_unique"]["violations"] == 0 and s["maelstrom"]["ids"] > 5
    assert s["expectations"][0]["ok"]
    config = json.loads((run / "nodes" / "h1" / "node.json").read_text())["maelstrom"]
    assert config["clients"] == ["c1", "c4"] and config["rate"] == 10.0
    assert config["program"][1] == str((NODES / "unique_ids.py").resolve())


def test_a_program_initialised_after_the_planned_start_still_gets_its_time_limit(
        tmp_path: Path) -> None:
    """Maelstrom's workload time starts once the nodes are initialised: a program that
    answers `init` 2.5 s late (a loaded machine) still makes a second of operations."""
    slow = tmp_path / "slow.sh"
    slow.write_text(f"#!/bin/sh\nsleep 2.5\nexec python3 {NODES / 'unique_ids.py'}\n")
    slow.chmod(0o755)
    code, s, run, out = _test(tmp_path / "out", "-w", "unique-ids", "--bin", str(slow),
                              "--node-count", "1", "--time-limit", "1", "--rate", "20")
    assert code == 0, out
    events = [json.loads(x) for x in (run / "nodes" / "n0" / "events.jsonl").read_text()
              .splitlines()]
    shifted = [e for e in events if e["ev"] == "shifted"]
    assert shifted and shifted[0]["by_ms"] >= 1000, events[:5]
    assert not [e for e in events if e["ev"] == "late"]
    first = min(e["t"] for e in events if e["ev"] == "op")
    assert first >= next(e["t"] for e in events if e["ev"] == "init")
    assert s["maelstrom"]["ops"]["ok"] > 5


def test_malformed_output_is_counted_and_large_messages_arrive(tmp_path: Path) -> None:
    # 3 s of workload: a loaded machine starts the agents late, and one that comes up after
    # the workload's end fails the run (maelstrom_workload_ran), whatever the lines were
    code, s, run, out = _test(tmp_path, "-w", "echo", "--bin", str(NODES / "hostile.py"),
                              "--node-count", "2", "--time-limit", "3", "--rate", "10")
    assert code == 0, out
    assert s["maelstrom"]["malformed"] == 8  # four kinds on each of two hosts
    reasons = sorted(json.loads(x)["reason"] for x in
                     (run / "nodes" / "n0" / "events.jsonl").read_text().splitlines()
                     if '"ev":"malformed"' in x)
    assert reasons == ["line over 1 MiB", "no dest", "not JSON", "not a JSON object"]
    assert s["maelstrom"]["unknown_destinations"] == {"messages": 2, "dests": {"zz9": 2}}
    # The 300 kB message went in fragments and reached the program whole.
    assert "got big from n1: 300000 bytes" in (run / "nodes" / "n0" / "node.log").read_text()


# -- checkers on logs they must flag and must not ------------------------------------------
def _log(run: Path, workload: str, hosts: dict[str, list[Any]]) -> None:
    run.mkdir(parents=True)
    (run / "spec.lock.yaml").write_text(yaml.safe_dump(
        {"experiment": {"node": {"program": ["x"], "speaks": "maelstrom"},
                        "protocol": {"name": "maelstrom"},
                        "workload": {"maelstrom": workload}}}))
    for host, ops in hosts.items():
        d = run / "nodes" / host
        d.mkdir(parents=True)
        lines: list[Any] = [{"t": 1, "i": 0, "node": host, "ev": "start", "incarnation": 0}]
        for k, op in enumerate(ops):
            if isinstance(op, str):  # a line cut short, as by a kill
                lines.append(op)
                continue
            kind, f, value, extra = op
            lines.append({"t": 10 + k, "i": k + 1, "node": host, "ev": "op", "client": "c1",
                          "type": kind, "f": f, "value": value, **extra})
        (d / "events.jsonl").write_text("".join(
            (x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))


def test_a_program_that_exits_fails_the_run(tmp_path: Path) -> None:
    _log(tmp_path / "r", "echo", {"h1": [("invoke", "echo", "a", {}), ("ok", "echo", "a", {})]})
    assert judge_run(read_record(tmp_path / "r"))["ok"]
    with (tmp_path / "r" / "nodes" / "h1" / "events.jsonl").open("a") as f:
        f.write(json.dumps({"t": 99, "i": 9, "node": "h1", "ev": "program-exit", "code": 3})
                + "\n")
    s = judge_run(read_record(tmp_path / "r"))
    assert not s["ok"] and s["checks"]["program_exits"]["examples"][0]["code"] == 3


def test_an_agent_up_after_the_workload_fails_the_run(tmp_path: Path) -> None:
    """Only final reads (the agents came up after the workload's end, on an overloaded
    machine): consistent, but nothing was tested."""
    fin = {"final": True}
    _log(tmp_path / "r", "broadcast", {"h1": [("invoke", "read", None, fin),
                                              ("ok", "read", [], fin)]})
    assert judge_run(read_record(tmp_path / "r"))["ok"]
    with (tmp_path / "r" / "nodes" / "h1" / "events.jsonl").open("a") as f:
        f.write(json.dumps({"t": 2, "i": 9, "node": "h1", "ev": "late", "by_ms": 4100.0})
                + "\n")
    s = judge_run(read_record(tmp_path / "r"))
    assert not s["ok"] and s["checks"]["maelstrom_workload_ran"]["examples"] == [
        {"node": "h1", "late_ms": 4100.0}]


def test_unique_ids_checker_flags_a_duplicate_and_passes_distinct_ids(tmp_path: Path) -> None:
    def ids(a: Any, b: Any) -> dict[str, list[Any]]:
        return {"h1": [("invoke", "generate", None, {}), ("ok", "generate", a, {})],
                "h2": [("invoke", "generate", None, {}), ("ok", "generate", b, {})]}

    _log(tmp_path / "bad", "unique-ids", ids(7, 7))
    _log(tmp_path / "good", "unique-ids", ids("n1-0", "n2-0"))
    assert judge_run(read_record(tmp_path / "bad"))["checks"]["maelstrom_unique"]["violations"] == 1
    assert judge_run(read_record(tmp_path / "good"))["ok"]


def test_g_counter_checker_judges_final_values(tmp_path: Path) -> None:
    def run(final: int) -> dict[str, list[Any]]:
        fin = {"final": True}
        return {"h1": [("invoke", "add", 3, {}), ("ok", "add", 3, {}),
                       ("invoke", "add", 2, {}), ("info", "add", 2, {}),
                       ("invoke", "read", None, fin), ("ok", "read", final, fin)]}

    # 3 acknowledged, 2 more that may have happened: a final read of 3 to 5 is valid.
    for final, ok in ((3, True), (4, True), (5, True), (6, False), (2, False)):
        _log(tmp_path / str(final), "g-counter", run(final))
        got = judge_run(read_record(tmp_path / str(final)))["checks"]["maelstrom_final_value"]
        assert (got["violations"] == 0) == ok, final


def test_pn_counter_checker_bounds_reads_by_negative_and_positive_adds(tmp_path: Path) -> None:
    fin = {"final": True}

    def run(mid: int, final: int) -> dict[str, list[Any]]:
        return {"h1": [("invoke", "add", 4, {}), ("ok", "add", 4, {}),
                       ("invoke", "add", -3, {}), ("info", "add", -3, {}),
                       ("invoke", "read", None, {}), ("ok", "read", mid, {}),
                       ("invoke", "read", None, fin), ("ok", "read", final, fin)]}

    # acknowledged 4, maybe -3: a final read of 1 or 4 (or between); any read in [-3, 4]
    for (mid, final), ok in (((-3, 1), True), ((4, 4), True), ((0, 5), False),
                             ((5, 4), False), ((-4, 1), False)):
        path = tmp_path / f"{mid}_{final}"
        _log(path, "pn-counter", run(mid, final))
        assert judge_run(read_record(path))["ok"] == ok, (mid, final)


def test_g_set_checker_flags_a_lost_and_an_invented_element(tmp_path: Path) -> None:
    fin = {"final": True}

    def run(read: list[int]) -> dict[str, list[Any]]:
        return {"h1": [("invoke", "add", 1, {}), ("ok", "add", 1, {}),
                       ("invoke", "add", 2, {}), ("fail", "add", 2, {}),
                       ("invoke", "read", None, fin), ("ok", "read", read, fin)]}

    for read, lost, invented in (([1], 0, 0), ([1, 2], 0, 0), ([], 1, 0), ([1, 7], 0, 1)):
        path = tmp_path / "-".join(map(str, read or [0]))
        _log(path, "g-set", run(read))
        checks = judge_run(read_record(path))["checks"]
        assert checks["maelstrom_lost"]["violations"] == lost, read
        assert checks["maelstrom_unexpected"]["violations"] == invented, read


@pytest.mark.spark
def test_the_spark_job_judges_like_the_in_process_judge(tmp_path: Path, spark: Any) -> None:
    """analysis/job.py on a Maelstrom run: Spark reads the logs, the shared checkers judge
    (TESTBED_CROSSCHECK=1 makes `analyze` compare with judge_run and raise on a difference)."""
    from analysis.job import analyze

    fin = {"final": True}
    for name, final in (("bad", 9), ("good", 3)):
        _log(tmp_path / name, "g-counter", {
            "h1": [("invoke", "add", 3, {}), ("ok", "add", 3, {}),
                   ("invoke", "read", None, fin), ("ok", "read", final, fin)],
            "h2": [("invoke", "read", None, fin), ("ok", "read", 3, fin), "not json"]})
    bad, good = analyze(read_record(tmp_path / "bad")), analyze(read_record(tmp_path / "good"))
    assert bad["checks"]["maelstrom_final_value"]["violations"] == 1 and not bad["ok"]
    assert good["ok"] and good["maelstrom"]["final_values"] == {"h1": 3, "h2": 3}
    assert json.loads((tmp_path / "good" / "summary.json").read_text())["ok"]


def test_agent_in_process_keeps_the_programs_stderr_tail(tmp_path: Path) -> None:
    """The agent alone (no orchestrator): one host, the hostile program, whose 300 kB
    message to itself comes back through the agent; its stderr reaches node.log (the agent's
    stderr) and `StderrTail`. The test waits for what it checks (a loaded machine starts the
    program late), then stops the agent as the drain would (`stop`)."""
    import asyncio
    import socket
    import time as _time

    from nodes.agent import Agent
    from nodes.config import Member, NodeConfig

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = NodeConfig(
        node_id=0, name="h1", members=[Member(0, "h1", "127.0.0.1", port)],
        protocol="maelstrom", params={}, log_path=str(tmp_path / "events.jsonl"), seed=1,
        start_at_ns=_time.time_ns() + 300_000_000, duration_ns=60_000_000_000,
        drain_ns=200_000_000,
        maelstrom={"program": [str(NODES / "hostile.py")], "workload": "echo",
                   "clients": ["c1"], "rate": 20.0})
    seen: dict[str, Any] = {}

    async def main() -> None:
        agent = Agent(cfg)

        async def peek() -> None:
            deadline = _time.monotonic() + 50
            while _time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                seen["tail"] = list(agent.stderr_tail)
                seen["counters"] = dict(agent.counters)
                if (any("got big" in line for line in seen["tail"])
                        and seen["counters"].get("malformed", 0) >= 4
                        and seen["counters"].get("ops_ok", 0) >= 3):
                    break
            await asyncio.sleep(0.2)  # nothing more may come: four malformed lines, not five
            seen["counters"] = dict(agent.counters)
            agent.done.set()  # what the drain's `stop` does

        await asyncio.gather(agent.run(), peek())

    asyncio.run(main())
    assert any("got big from n0: 300000 bytes" in line for line in seen["tail"]), seen
    assert seen["counters"]["malformed"] == 4 and seen["counters"]["ops_ok"] >= 3
    assert seen["counters"]["unknown_dest"] == 1
    rows = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    evs = [r["ev"] for r in rows]
    assert evs[0] == "start" and evs[-1] == "stop" and evs.count("init") == 1
    # the message to itself waited for init_ok, then reached the program
    assert evs.index("nrecv") > evs.index("init")
