"""The checkers of Maelstrom workloads (docs/maelstrom.md), over the host agents' logs.

The agents (nodes/agent.py) log each client operation as `ev=op` lines (`client`, `type`
invoke/ok/fail/info, `f`, `value`, `final` for the read after the network settled) and each
node-to-node message as `ev=nsend` / `ev=nrecv`. `maelstrom_checks(record)` rebuilds the
history (an invoke without a completion, as when its host was killed, is `info`), judges it by
the workload's rules and returns the `checks` entries (all claimed) and the summary's
`maelstrom` section. `total-order` is judged by the testbed's own checkers (total order,
agreement, validity, integrity: analysis/checks.py) over the nodes' final reads taken as
deliveries, plus one rule of its own: every read is a prefix of its node's final read.

The in-process judge (analysis/judge.py) calls it for a run whose spec runs a Maelstrom
program; it never imports pyspark.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis import elle_list_append, elle_rw_register
from analysis.deliverylog import parse_line
from analysis.elle import DEFAULT_MODELS, Txn, prohibited, txns_of
from analysis.kafka import check_kafka
from analysis.linearizability import TIME_LIMIT_S, RegisterOp
from analysis.linearizability import check as check_register
from analysis.record import RunRecord

MAX_EXAMPLES = 5


@dataclass
class Operation:
    node: str  # the testbed host whose agent ran the client
    inc: int
    client: str
    f: str
    value: Any  # what the client asked (broadcast's message, add's delta, echo's text)
    invoke_t: int
    type: str = "info"  # ok, fail or info
    result: Any = None  # what the node answered (read's messages or value, generate's id)
    complete_t: int | None = None
    final: bool = False
    error: str = ""


# What the clock nemesis can and cannot reach; the summary and the report say it.
CLOCK_NOTE = ("clocks skewed through libfaketime: a program that reads the time without libc "
              "(Go's runtime) is not skewed; monotonic clocks are never skewed")

def parse_lines(lines: list[bytes] | list[str], node: str = ""
                ) -> tuple[list[dict[str, Any]], int]:
    """The intact events of log lines and how many were not, by the delivery log's one
    parsing (analysis/deliverylog.py `parse_line`)."""
    rows, bad = [], 0
    for line in lines:
        rec = parse_line(line, node)
        if rec is None:
            bad += 1
        else:
            rows.append(rec)
    return rows, bad


def by_ordinal(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One host's events by ordinal, each with `inc` (its `start` lines so far, less one)."""
    rows.sort(key=lambda r: r["i"])
    inc = -1
    for r in rows:
        if r.get("ev") == "start":
            inc += 1
        r["inc"] = max(inc, 0)
    return rows


def read_logs(record: RunRecord) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Each host's events by ordinal, with `inc` (the record's `node_logs`), and the count of
    unreadable lines."""
    logs = record.node_logs()
    return (_on_our_clock(record, {h: log.events for h, log in logs.items()}),
            sum(log.malformed for log in logs.values()))


def _on_our_clock(record: RunRecord, logs: dict[str, list[dict[str, Any]]]
                  ) -> dict[str, list[dict[str, Any]]]:
    """Each host's `t` moved onto the orchestrator's clock: minus the offset the remote
    backend measured before the run (spec.lock.yaml `clocks`; analysis/ingest.py does the same
    for protocol nodes), so that transit times and the history's order hold across hosts."""
    offsets = record.clock_offsets_ns()
    for host, rows in logs.items():
        off = offsets.get(host, 0)
        if off:
            for r in rows:
                if isinstance(r.get("t"), int):
                    r["t"] -= off
    return logs


def spark_logs(record: RunRecord, master: str | None = None
               ) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """`read_logs` with Spark (the Spark job's driver, analysis/job.py): every host's log read
    and parsed by the executors, the rows the checkers read (client operations, node
    messages, lifecycle) collected; what the checkers then do is this module's, shared with
    the in-process judge."""
    from analysis.session import spark_session

    paths = sorted(str(p) for _, p in record.log_paths() if p.stat().st_size)
    if not paths:
        return {}, 0
    spark = spark_session(master, app=f"testbed-maelstrom-{record.name}")
    wanted = {"op", "nsend", "nrecv", "start", "stop", "malformed", "program-exit", "error",
              "clock", "late", "unknown-dest"}

    def parse(rows: Any) -> Any:
        for row in rows:
            host = Path(row.path.removeprefix("file:")).parent.name
            got, bad = parse_lines([row.value], host)
            if bad:
                yield host, None
            elif got[0].get("ev") in wanted:
                yield host, json.dumps(got[0])

    from pyspark.sql.functions import input_file_name

    frame = spark.read.text(paths).withColumn("path", input_file_name())
    out: dict[str, list[dict[str, Any]]] = {Path(p).parent.name: [] for p in paths}
    bad = 0
    for host, text in frame.rdd.mapPartitions(parse).collect():
        if text is None:
            bad += 1
        else:
            out[host].append(json.loads(text))
    return _on_our_clock(record, {h: by_ordinal(rows) for h, rows in out.items()}), bad


def history(logs: dict[str, list[dict[str, Any]]]) -> list[Operation]:
    """Client operations, paired per (host, incarnation, client): each completion closes the
    client's open invoke; an invoke left open is info."""
    ops: list[Operation] = []
    for node, rows in logs.items():
        open_: dict[tuple[int, str], Operation] = {}
        for r in rows:
            if r.get("ev") != "op":
                continue
            key = (r["inc"], str(r.get("client")))
            if r.get("type") == "invoke":
                op = Operation(node, r["inc"], key[1], str(r.get("f")), r.get("value"),
                               int(r["t"]), final=bool(r.get("final")))
                ops.append(op)
                open_[key] = op
            else:
                got = open_.pop(key, None)
                if got is not None:
                    got.type = str(r.get("type"))
                    got.result = r.get("value")
                    got.complete_t = int(r["t"])
                    got.error = str(r.get("error", ""))
    return ops


def quantiles_ms(values_ns: list[int]) -> dict[str, float]:
    if not values_ns:
        return {}
    s = sorted(values_ns)

    def q(p: float) -> float:
        return round(s[min(len(s) - 1, max(0, math.ceil(p * len(s)) - 1))] / 1e6, 3)

    return {"p0": q(0), "p50": q(0.5), "p95": q(0.95), "p99": q(0.99), "max": q(1.0)}


def _check(violations: int, examples: list[Any], **extra: Any) -> dict[str, Any]:
    return {"violations": violations, "claimed": True, "examples": examples[:MAX_EXAMPLES],
            **extra}


def _final_reads(ops: list[Operation], hosts: list[str]) -> tuple[dict[str, Operation],
                                                                   list[str]]:
    """Each host's last final read that succeeded, and the hosts without one."""
    finals: dict[str, Operation] = {}
    for op in ops:
        if op.final and op.f == "read" and op.type == "ok" and (
                op.node not in finals or op.invoke_t > finals[op.node].invoke_t):
            finals[op.node] = op
    return finals, [h for h in hosts if h not in finals]


def _every_final_read(ops: list[Operation]) -> list[Operation]:
    """Every client's final read that succeeded (Maelstrom: one per client)."""
    return [op for op in ops if op.final and op.f == "read" and op.type == "ok"]


def _as_list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, list) else []


def check_broadcast(ops: list[Operation], hosts: list[str], write: str = "broadcast"
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
    """broadcast (and g-set, whose `add` writes an element): nothing acknowledged lost,
    nothing read that was never written, every node's final read, stable latency."""
    attempted = {op.value for op in ops if op.f == write}
    acked = {op.value: op for op in ops if op.f == write and op.type == "ok"}
    _, missing = _final_reads(ops, hosts)
    lost: dict[Any, set[str]] = defaultdict(set)
    for read in _every_final_read(ops):
        have = set(_hashable(v) for v in _as_list(read.result))
        for v in acked:
            if v not in have:
                lost[v].add(f"{read.node}/{read.client}")
    reads = sorted((op for op in ops if op.f == "read" and op.type == "ok"),
                   key=lambda o: o.invoke_t)
    unexpected = sorted({_hashable(v) for op in reads for v in _as_list(op.result)}
                        - {_hashable(v) for v in attempted}, key=str)
    stable = []
    never_stable = 0
    read_sets = [set(_hashable(v) for v in _as_list(op.result)) for op in reads]
    for v, op in acked.items():
        if v in lost or op.complete_t is None:
            continue
        last_without = -1
        for k, s in enumerate(read_sets):
            if v not in s:
                last_without = k
        if last_without + 1 >= len(reads):
            never_stable += 1
            continue
        stable.append(max(0, reads[last_without + 1].invoke_t - op.complete_t))
    checks = {
        "maelstrom_lost": _check(len(lost), [{"value": v, "missing_at": sorted(h)}
                                             for v, h in sorted(lost.items(), key=str)]),
        "maelstrom_unexpected": _check(len(unexpected), unexpected),
        "maelstrom_final_reads": _check(len(missing), missing),
    }
    section = {"attempted": len(attempted), "acknowledged": len(acked), "lost": len(lost),
               "unexpected": len(unexpected), "never_stable": never_stable,
               "stable_latency_ms": quantiles_ms(stable)}
    return checks, section


def _hashable(v: Any) -> Any:
    return json.dumps(v, sort_keys=True) if isinstance(v, list | dict) else v


def check_total_order(ops: list[Operation], hosts: list[str],
                      record: RunRecord) -> tuple[dict[str, Any], dict[str, Any]]:
    checks, section = check_broadcast(ops, hosts)
    finals, _ = _final_reads(ops, hosts)
    bad_prefix = []
    for op in ops:
        if op.f != "read" or op.type != "ok" or op.node not in finals:
            continue
        mine = _as_list(op.result)
        final = _as_list(finals[op.node].result)
        if op.inc == finals[op.node].inc and final[:len(mine)] != mine:
            bad_prefix.append({"node": op.node, "read": mine[:20], "final": final[:20]})
    checks["read_prefix"] = _check(len(bad_prefix), bad_prefix)
    checks.update(_testbed_checks(ops, finals, hosts, record))
    return checks, section


def _testbed_checks(ops: list[Operation], finals: dict[str, Operation], hosts: list[str],
                    record: RunRecord) -> dict[str, Any]:
    """The testbed's total order, agreement, validity and integrity checkers over the final
    reads taken as deliveries: each acknowledged broadcast is a message `send` by the host
    that took it, each value in a final read a final delivery at that host, in read order."""
    import pyarrow as pa

    from analysis.checks import table_check_suite
    from analysis.fault_history import fault_history
    from analysis.ingest import ARROW_SCHEMA

    mid_of: dict[Any, str] = {}
    rows: list[dict[str, Any]] = []
    counter: Counter[str] = Counter()
    ordinal: Counter[str] = Counter()
    for op in sorted(ops, key=lambda o: o.invoke_t):
        if op.f == "broadcast" and op.type == "ok" and op.complete_t is not None:
            counter[op.node] += 1
            mid = mid_of[op.value] = f"{op.node}:{counter[op.node]}"
            rows.append({"t": op.complete_t, "lt": op.complete_t, "i": ordinal[op.node],
                         "node": op.node, "ev": "send", "mid": mid, "proto": "maelstrom",
                         "size": 0, "inc": 0})
            ordinal[op.node] += 1
    unknown = 0
    for host, read in finals.items():
        for pos, v in enumerate(_as_list(read.result)):
            known = mid_of.get(_hashable(v))
            if known is None:
                unknown += 1
            mid = known if known is not None else f"unknown:{_hashable(v)}"
            rows.append({"t": read.complete_t or read.invoke_t, "lt": 0, "i": ordinal[host],
                         "node": host, "ev": "fnl", "mid": mid, "seq": pos + 1,
                         "proto": "maelstrom", "size": 0, "inc": 0})
            ordinal[host] += 1
    table = pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)
    hist = fault_history(hosts, list(record.faults))
    # Reads after a kill come from a fresh program: judged as the host's one process.
    hist.crashed = set()
    found = table_check_suite(table, hist)
    keep = ("total_order", "agreement", "validity", "integrity")
    return {name: {**found[name], "claimed": True} for name in keep if name in found}


def check_counter(ops: list[Operation], hosts: list[str]) -> tuple[dict[str, Any],
                                                                    dict[str, Any]]:
    """g-counter and pn-counter: a final read counts every acknowledged add and any subset
    of those of unknown outcome, so it lies between the acknowledged sum plus the negative
    unknown ones and the acknowledged sum plus the positive ones."""
    acked = sum(int(op.value) for op in ops if op.f == "add" and op.type == "ok")
    unknown = [int(op.value) for op in ops if op.f == "add" and op.type == "info"]
    lower = acked + sum(d for d in unknown if d < 0)
    upper = acked + sum(d for d in unknown if d > 0)
    finals, missing = _final_reads(ops, hosts)
    wrong_final = [{"node": r.node, "client": r.client, "value": r.result,
                    "expected": [lower, upper]} for r in _every_final_read(ops)
                   if not (isinstance(r.result, int) and lower <= r.result <= upper)]
    # Any read (the counter is only eventually consistent): between the negative and the
    # positive adds (ok or info) invoked before the read completed.
    adds = [op for op in ops if op.f == "add" and op.type in ("ok", "info")]
    bad_reads = []
    for op in ops:
        if op.f != "read" or op.type != "ok" or op.final:
            continue
        end = op.complete_t or op.invoke_t
        before = [int(a.value) for a in adds if a.invoke_t <= end]
        lo, hi = sum(d for d in before if d < 0), sum(d for d in before if d > 0)
        if not (isinstance(op.result, int) and lo <= op.result <= hi):
            bad_reads.append({"node": op.node, "value": op.result, "expected": [lo, hi]})
    checks = {"maelstrom_final_value": _check(len(wrong_final), wrong_final),
              "maelstrom_read_bounds": _check(len(bad_reads), bad_reads),
              "maelstrom_final_reads": _check(len(missing), missing)}
    return checks, {"acknowledged_sum": acked, "possible": [lower, upper],
                    "final_values": {h: r.result for h, r in sorted(finals.items())}}


def check_echo(ops: list[Operation]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every echo answered with its text: a refused echo (a definite error, `fail`) is a
    violation too, as in Maelstrom's checker; one of unknown outcome (`info`: a timeout, or
    the kill nemesis, which Maelstrom does not have) is not."""
    bad = [{"node": op.node, "sent": op.value, "got": op.result, "type": op.type,
            **({"error": op.error} if op.error else {})} for op in ops
           if op.f == "echo" and (op.type == "fail" or op.type == "ok" and
                                  op.result != op.value)]
    return {"maelstrom_echo": _check(len(bad), bad)}, {}


def check_unique_ids(ops: list[Operation]) -> tuple[dict[str, Any], dict[str, Any]]:
    seen: Counter[Any] = Counter(_hashable(op.result) for op in ops
                                 if op.f == "generate" and op.type == "ok")
    dup = sorted((k for k, n in seen.items() if n > 1), key=str)
    return ({"maelstrom_unique": _check(len(dup), dup, duplicated_ids=len(dup))},
            {"ids": sum(seen.values()), "duplicated": len(dup)})


def check_lin_kv(ops: list[Operation], time_limit_s: float = TIME_LIMIT_S
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """lin-kv: each key an independent compare-and-set register (locality, `005` §3.1),
    linearizable (analysis/linearizability.py); the section's `workload_results` is
    Jepsen's independent checker's map: `valid?` (false beats unknown beats true),
    `results` per key with its `linearizable` result, `failures` (the keys not
    linearizable)."""
    per_key: dict[Any, list[RegisterOp]] = defaultdict(list)
    for op in ops:
        if op.f not in ("read", "write", "cas") or not isinstance(op.value, list) \
                or len(op.value) != 2:
            continue
        key = _hashable(op.value[0])
        value = op.result[1] if op.f == "read" and op.type == "ok" and \
            isinstance(op.result, list) and len(op.result) == 2 else op.value[1]
        if op.f == "cas" and not (isinstance(value, list) and len(value) == 2):
            continue
        per_key[key].append(RegisterOp(op.f, value, op.invoke_t, op.complete_t, op.type,
                                       label=_label(op)))
    results_: dict[str, Any] = {}
    failures, unknown = [], []
    for key, reg in sorted(per_key.items(), key=lambda x: str(x[0])):
        got = check_register(reg, time_limit_s=time_limit_s)
        lin: dict[str, Any] = {"valid?": got.valid, "analyzer": "wgl",
                               "explored": got.explored}
        if got.valid is False:
            failures.append(key)
            lin.update({"op": got.op.label if got.op else None,
                        "previous-ok": got.previous_ok.label if got.previous_ok else None,
                        "final-state": got.state})
        elif got.valid == "unknown":
            unknown.append(key)
            lin["cause"] = "timeout"
        results_[str(key)] = {"valid?": got.valid, "linearizable": lin}
    valid: bool | str = False if failures else "unknown" if unknown else True
    bad = [{"key": k, **results_[str(k)]["linearizable"]} for k in failures]
    checks = {"maelstrom_linearizable": _check(len(failures), bad, unknown=len(unknown))}
    section = {"keys": len(per_key), "not_linearizable": len(failures),
               "unknown_keys": len(unknown),
               "workload_results": {"valid?": valid, "results": results_,
                                    "failures": failures}}
    return checks, section


def _label(op: Operation) -> dict[str, Any]:
    """An operation as a report shows it: process (host/client), type, f, value, times."""
    return {"process": f"{op.node}/{op.client}", "type": op.type, "f": op.f,
            "value": op.result if op.type == "ok" else op.value, "invoke_t": op.invoke_t,
            "complete_t": op.complete_t, **({"error": op.error} if op.error else {})}


def check_kafka_workload(ops: list[Operation]) -> tuple[dict[str, Any], dict[str, Any]]:
    """kafka (analysis/kafka.py); the section's `workload_results` is Jepsen's kafka
    checker's map."""
    got = check_kafka(ops)
    kinds = got["error-types"]
    checks = {"maelstrom_kafka": _check(len(kinds), [{"type": k, **(
        {"count": got[k]["count"], "first": got[k]["errs"][:1]} if "count" in got[k]
        else {"unseen": got[k]["unseen"]})} for k in kinds])}
    sent = sum(1 for op in ops if op.f == "send" and op.type == "ok")
    return checks, {"acknowledged_sends": sent, "error_types": kinds,
                    "workload_results": got}


# The transactional workloads' checkers, Elle's inference for each kind of object: which
# values are transactions of the workload, and the checker of a history of them.
TxnChecker = tuple[Callable[[Any], bool], Callable[[list[Txn], tuple[str, ...]], dict[str, Any]]]
TXN_CHECKERS: dict[str, TxnChecker] = {
    "txn-list-append": (elle_list_append.is_txn, elle_list_append.check),
    "txn-rw-register": (elle_rw_register.is_txn, elle_rw_register.check)}


def check_txn(ops: list[Operation], workload: str, models: tuple[str, ...] = DEFAULT_MODELS
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """txn-list-append and txn-rw-register (analysis/elle.py and TXN_CHECKERS); the
    section's `workload_results` is Elle's map (`valid?`, `anomaly-types`, `anomalies`,
    `not`). Every anomaly type that `models` prohibits is a violation."""
    is_txn, check_elle = TXN_CHECKERS[workload]
    txns, malformed = txns_of(ops, is_txn)
    got = check_elle(txns, models)
    got["consistency-models"] = list(models)
    bad = [k for k in got["anomaly-types"] if k in prohibited(models)]
    checks = {"maelstrom_txn": _check(len(bad), [{"type": k, "count": len(
        got["anomalies"][k]), "first": got["anomalies"][k][:1]} for k in bad])}
    by_type = Counter(t.type for t in txns)
    return checks, {"txns": {"ok": by_type["ok"], "fail": by_type["fail"],
                             "info": by_type["info"], "malformed": malformed},
                    "anomaly_types": got["anomaly-types"], "workload_results": got}


def maelstrom_checks(record: RunRecord, workload: str,
                     read: tuple[dict[str, list[dict[str, Any]]], int] | None = None
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(checks, the summary's `maelstrom` section) of a Maelstrom run, from its logs as
    `read_logs` (default) or `spark_logs` gives them."""
    logs, bad = read if read is not None else read_logs(record)
    hosts = sorted(logs)
    ops = history(logs)
    if workload == "broadcast":
        checks, section = check_broadcast(ops, hosts)
    elif workload == "total-order":
        checks, section = check_total_order(ops, hosts, record)
    elif workload == "g-set":
        checks, section = check_broadcast(ops, hosts, write="add")
    elif workload in ("g-counter", "pn-counter"):
        checks, section = check_counter(ops, hosts)
    elif workload == "echo":
        checks, section = check_echo(ops)
    elif workload == "unique-ids":
        checks, section = check_unique_ids(ops)
    elif workload == "lin-kv":
        checks, section = check_lin_kv(ops)
    elif workload == "kafka":
        checks, section = check_kafka_workload(ops)
    elif workload in TXN_CHECKERS:
        models = (record.experiment.get("workload") or {}).get("consistency_models")
        checks, section = check_txn(ops, workload, tuple(models or DEFAULT_MODELS))
    else:
        raise ValueError(f"no checker for Maelstrom workload {workload!r}")
    # A program that exits on its own crashed (the agent's stop and a `kill` end it without
    # an `ev=program-exit`): Maelstrom reports that as an error of the test, so do we.
    exits = [{"node": h, "code": r.get("code"), "error": r.get("error")}
             for h, rows in logs.items() for r in rows if r.get("ev") == "program-exit"]
    checks["program_exits"] = _check(len(exits), exits)
    # An agent that came up after the workload's end ran none of its clients' operations.
    late = [{"node": h, "late_ms": r.get("by_ms")}
            for h, rows in logs.items() for r in rows if r.get("ev") == "late"]
    checks["maelstrom_workload_ran"] = _check(len(late), late)
    by_type = Counter(op.type for op in ops)
    nsend = sum(1 for rows in logs.values() for r in rows if r.get("ev") == "nsend")
    malformed = sum(1 for rows in logs.values() for r in rows if r.get("ev") == "malformed")
    counted: dict[str, int] = {}
    for rows in logs.values():  # the agents' own counts, from each incarnation's stop line
        for r in rows:
            if r.get("ev") == "stop":
                for k, v in (r.get("counters") or {}).items():
                    counted[k] = counted.get(k, 0) + int(v)
    latencies = [op.complete_t - op.invoke_t for op in ops
                 if op.type == "ok" and op.complete_t is not None]
    n = max(1, len(ops))
    by_f: dict[str, Counter[str]] = defaultdict(Counter)
    for op in ops:
        by_f[op.f][op.type] += 1
    services: Counter[str] = Counter()
    for rows in logs.values():
        for r in rows:
            if r.get("ev") == "stop":
                services.update({str(k): int(v) for k, v in (r.get("services") or {}).items()})
    unknown_dest = Counter(str(r.get("dest")) for rows in logs.values() for r in rows
                           if r.get("ev") == "unknown-dest")
    section = {
        "valid": not any(c["violations"] for c in checks.values()),
        "workload": workload,
        "ops": {"total": len(ops), "ok": by_type["ok"], "fail": by_type["fail"],
                "info": by_type["info"]},
        "by_f": {f: {"ok": c["ok"], "fail": c["fail"], "info": c["info"]}
                 for f, c in sorted(by_f.items())},
        # Maelstrom's services (nodes/maelstrom_services.py): "service type" -> messages,
        # requests and replies, as the service host counted them
        "services": dict(sorted(services.items())),
        # messages to a destination that does not exist (answered with error 1)
        "unknown_destinations": {"messages": max(sum(unknown_dest.values()),
                                                 counted.get("unknown_dest", 0)),
                                 "dests": dict(sorted(unknown_dest.items()))},
        "availability": round(by_type["ok"] / n, 4),
        "latency_ms": quantiles_ms(latencies),
        "msgs_per_op": {"servers": round(nsend / n, 3),
                        "all": round((nsend + 2 * len(ops)) / n, 3)},
        "server_messages": nsend,
        "transit_ms": transit(logs),
        # the hosts' Maelstrom names (n0..n(N-1) or as given), as transit_ms uses them
        "names": {h: r["node_id"] for h, rows in sorted(logs.items()) for r in rows[:1]
                  if r.get("ev") == "start" and "node_id" in r},
        "malformed": max(malformed, counted.get("malformed", 0)),
        "program_exits": len(exits),
        # programs started again: by their agent (the kill nemesis) or with it (a crash)
        "restarts": sum(max(0, rows[-1]["inc"]) for rows in logs.values() if rows)
        + sum(1 for rows in logs.values() for r in rows if r.get("ev") == "restart"),
        "unreadable_log_lines": bad,
        **{k: v for k, v in section.items()},
    }
    clocks = [(h, r) for h, rows in logs.items() for r in rows if r.get("ev") == "clock"]
    if clocks:  # the clock nemesis ran (docs/maelstrom.md)
        section["clock"] = {
            "skews": sum(1 for _, r in clocks if r.get("faked")),
            "faked": sorted({h for h, r in clocks if r.get("faked")}),
            "not_faked": sorted({h for h, r in clocks if not r.get("faked")}),
            "note": CLOCK_NOTE}
    section.setdefault("lost", 0)
    section.setdefault("unexpected", 0)
    section.setdefault("stable_latency_ms", {})
    return checks, section


def transit(logs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """One-way node-to-node latency per ordered pair (`nsend` at the sender to `nrecv` at the
    receiver, matched by source, destination and `msg_id`; messages without one, and
    repeated ids after a restart beyond the first, are not matched): quantiles in ms."""
    sent: dict[tuple[str, str, int], int] = {}
    for rows in logs.values():
        for r in rows:
            if r.get("ev") == "nsend" and isinstance(r.get("msg_id"), int):
                sent.setdefault((str(r["src"]), str(r["dest"]), r["msg_id"]), int(r["t"]))
    per: dict[str, list[int]] = defaultdict(list)
    for rows in logs.values():
        for r in rows:
            if r.get("ev") != "nrecv" or not isinstance(r.get("msg_id"), int):
                continue
            t0 = sent.pop((str(r["src"]), str(r["dest"]), r["msg_id"]), None)
            if t0 is not None:
                per[f"{r['src']}->{r['dest']}"].append(int(r["t"]) - t0)
    return {pair: quantiles_ms(v) for pair, v in sorted(per.items())}


def emulation_records(logs: dict[str, list[dict[str, Any]]]
                      ) -> dict[str, list[dict[str, Any]]]:
    """The agents' node-to-node messages as the `ev=emulation` records analysis/fidelity.py
    judges (nodes/emulation.py's fields), per host: `transit` per sending host (`nsend` at
    the sender to `nrecv` here, matched as `transit` matches them, in µs bins), `received`
    per sending host and `sent` per destination host. As a node counts them, a destination
    counts from the first message heard from it (what was sent before it was up is not the
    network's loss); services' traffic is left out (no configured path names a service)."""
    from nodes.emulation import bin_us

    host_of = {str(r["node_id"]): h for h, rows in logs.items() for r in rows[:1]
               if r.get("ev") == "start" and "node_id" in r}
    sent_at: dict[tuple[str, str, int], int] = {}
    sent: dict[str, Counter[str]] = defaultdict(Counter)
    for host, rows in logs.items():
        heard: set[str] = set()
        for r in rows:
            ev = r.get("ev")
            if ev == "nrecv" and str(r.get("src")) in host_of:
                heard.add(host_of[str(r["src"])])
            elif ev == "nsend" and str(r.get("dest")) in host_of and str(r.get("src")) \
                    in host_of:
                dst = host_of[str(r["dest"])]
                if dst in heard:
                    sent[host][dst] += 1
                if isinstance(r.get("msg_id"), int) and isinstance(r.get("t"), int):
                    sent_at.setdefault((str(r["src"]), str(r["dest"]), r["msg_id"]), r["t"])
    out: dict[str, list[dict[str, Any]]] = {}
    for host, rows in logs.items():
        hist: dict[str, Counter[str]] = defaultdict(Counter)
        received: Counter[str] = Counter()
        for r in rows:
            if r.get("ev") != "nrecv" or str(r.get("src")) not in host_of:
                continue
            src = host_of[str(r["src"])]
            received[src] += 1
            msg_id = r.get("msg_id")
            t0 = sent_at.pop((str(r["src"]), str(r.get("dest")), msg_id), None) \
                if isinstance(msg_id, int) else None
            if t0 is not None and isinstance(r.get("t"), int):
                hist[src][str(bin_us(int(r["t"]) - t0))] += 1
        out[host] = [{"ev": "emulation", "transit": {s: dict(h) for s, h in hist.items()},
                      "received": dict(received), "sent": dict(sent.get(host, {}))}]
    return out


def agent_errors(record: RunRecord, logs: dict[str, list[dict[str, Any]]] | None = None
                 ) -> dict[str, Any]:
    """`ev=error` lines of the agents (a bug of the agent: fails the verdict)."""
    logs = logs if logs is not None else read_logs(record)[0]
    per = {h: sum(1 for r in rows if r.get("ev") == "error") for h, rows in logs.items()}
    per = {h: n for h, n in per.items() if n}
    return {"total": sum(per.values()), "per_node": per}


def results(summary: dict[str, Any], availability: float | None = None) -> dict[str, Any]:
    """Maelstrom's results map (its results.edn) of a judged run, as `results.json`:
    `valid?` (true, false or "unknown"; false beats unknown beats true, as Jepsen's
    composed checkers merge), `stats` (Jepsen's: unknown when some operation never
    succeeded), `availability` (with `availability`, the fraction of operations that must
    succeed), `net` (message counts, `msgs-per-op`), `workload` (the workload's checks),
    and `notes` (what the verdict says beyond `valid?`)."""
    m = summary.get("maelstrom") or {}
    ops = m.get("ops") or {}
    by_f = m.get("by_f") or {}
    stats_valid: bool | str = "unknown" if any(not c.get("ok") for c in by_f.values()) \
        else True
    stats = {"valid?": stats_valid, "count": ops.get("total", 0),
             "ok-count": ops.get("ok", 0), "fail-count": ops.get("fail", 0),
             "info-count": ops.get("info", 0),
             "by-f": {f: {"valid?": bool(c.get("ok")) or "unknown", "count": sum(c.values()),
                          "ok-count": c.get("ok", 0), "fail-count": c.get("fail", 0),
                          "info-count": c.get("info", 0)} for f, c in by_f.items()}}
    avail: dict[str, Any] = {"valid?": True, "ok-fraction": m.get("availability", 0)}
    if availability is not None:
        avail["expected"] = availability
        avail["valid?"] = bool(m.get("availability", 0) >= availability)
    checks = summary.get("checks") or {}
    # a harness that did not keep up decides nothing: what held may not hold on the network
    # configured, and what failed may have failed for the harness
    fid = summary.get("fidelity") or {}
    verdict = summary.get("verdict") or {}
    saturated = (not summary.get("ok") and fid.get("status") == "degraded"
                 and verdict.get("safety") == "held"
                 and all(r.startswith("emulation degraded") for r in verdict.get("reasons", [])))
    # lin-kv and kafka: the checker's own map, Maelstrom's keys; its `valid?` may be unknown
    own = m.get("workload_results") or {}
    workload = {"checks": {k: c.get("violations") for k, c in checks.items()},
                **{k: m[k] for k in ("lost", "unexpected", "stable_latency_ms",
                                     "acknowledged_sum", "possible", "final_values", "ids",
                                     "duplicated") if k in m},
                **own,
                "valid?": "unknown" if saturated else False if not summary.get("ok")
                else own.get("valid?", True)}
    servers = m.get("server_messages", 0)
    net = {"valid?": True,
           "servers": {"msg-count": servers,
                       "msgs-per-op": (m.get("msgs_per_op") or {}).get("servers", 0)},
           "all": {"msg-count": servers + 2 * ops.get("total", 0),
                   "msgs-per-op": (m.get("msgs_per_op") or {}).get("all", 0)},
           "services": m.get("services", {}),
           "unknown-destinations": m.get("unknown_destinations", {})}
    parts = [workload["valid?"], stats_valid, avail["valid?"]]
    valid: bool | str = False if False in parts else "unknown" if "unknown" in parts \
        else True
    notes = []
    unknown = (m.get("unknown_destinations") or {})
    if unknown.get("messages"):
        notes.append(f"{unknown['messages']} messages to destinations that do not exist "
                     f"({', '.join(sorted(unknown.get('dests') or {})) or '?'}), answered "
                     "with error 1 node-not-found")
    if saturated:
        notes.append(f"the harness was saturated ({fid.get('cause')}): valid? is unknown, "
                     "the program's result may not mean what it says")
    if stats_valid == "unknown":
        notes.append("no successful " + ", ".join(f for f, c in by_f.items() if not
                                                   c.get("ok")) + ": valid? is unknown")
    if not avail["valid?"]:
        notes.append(f"availability {avail['ok-fraction']} below {availability}")
    return {"valid?": valid, "stats": stats, "availability": avail, "net": net,
            "workload": workload, "notes": notes}
