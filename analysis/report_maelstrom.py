"""The report's part for a run of a user's Maelstrom program (docs/maelstrom.md): the
workload's figures, client-operation latency over time with the fault windows shaded, and a
spacetime diagram of node-to-node messages. analysis/report.py renders it instead of the
delivery-log plots, which such a run does not have."""

from __future__ import annotations

from html import escape
from typing import Any

from analysis import plots
from analysis import report_data as rd
from analysis.maelstrom import history, read_logs
from analysis.plots import Arrow, Band, Series

BINS = 120
ARROWS = 24


def _row(name: str, value: Any) -> str:
    return f'<tr><td>{escape(name)}</td><td class="l">{escape(str(value))}</td></tr>'


def _table(m: dict[str, Any]) -> str:
    ops = m.get("ops") or {}
    rows = [("workload", m.get("workload")),
            ("operations", f"{ops.get('total', 0)} ({ops.get('ok', 0)} ok, "
                           f"{ops.get('fail', 0)} fail, {ops.get('info', 0)} info)"),
            ("availability", m.get("availability")),
            ("latency ms", m.get("latency_ms")),
            ("messages per operation", m.get("msgs_per_op")),
            ("lost", m.get("lost")), ("unexpected", m.get("unexpected")),
            ("stable latency ms", m.get("stable_latency_ms") or "-"),
            ("malformed lines", m.get("malformed")),
            ("program exits", m.get("program_exits")), ("restarts", m.get("restarts")),
            ("node names", m.get("names"))]
    if "keys" in m:  # lin-kv
        rows[5:8] = [("keys (not linearizable, unknown)",
                      f"{m['keys']} ({m.get('not_linearizable', 0)}, "
                      f"{m.get('unknown_keys', 0)})")]
    elif "error_types" in m:  # kafka
        rows[5:8] = [("acknowledged sends", m.get("acknowledged_sends")),
                     ("anomalies", ", ".join(m["error_types"]) or "none")]
    elif "txns" in m:  # txn-list-append, txn-rw-register
        txns = m["txns"]
        rows[5:8] = [("transactions", f"{txns.get('ok', 0)} ok, {txns.get('fail', 0)} "
                                      f"fail, {txns.get('info', 0)} info"),
                     ("anomalies", ", ".join(m.get("anomaly_types") or []) or "none")]
    clock = m.get("clock")
    if clock:  # the clock nemesis: which programs it skewed, and what it cannot reach
        faked = ", ".join(clock.get("faked") or []) or "no program"
        missed = ", ".join(clock.get("not_faked") or [])
        rows += [("clock skews", f"{clock.get('skews', 0)} on {faked}"
                  + (f"; not skewed (no libfaketime): {missed}" if missed else "")),
                 ("clock note", clock.get("note"))]
    return ("<h2>Maelstrom workload</h2><table>" + "".join(_row(k, v) for k, v in rows)
            + "</table>")


def _bands(data: rd.RunData, t0: int) -> list[Band]:
    shift = (data.t0 - t0) / 1e9
    return [Band(f.start + shift, (f.start if f.stop is None else f.stop) + shift, f.label,
                 f.kind) for f in data.faults]


def maelstrom_html(summary: dict[str, Any], data: rd.RunData | None) -> str:
    """The section; the plots need the run's logs (`data.record`)."""
    m = summary.get("maelstrom") or {}
    parts = [_table(m)]
    if data is None:
        return "".join(parts)
    logs, _ = read_logs(data.record)
    ops = [op for op in history(logs) if op.complete_t is not None]
    rows = [r for rs in logs.values() for r in rs]
    if not rows:
        return "".join(parts)
    t0 = min(int(r["t"]) for r in rows)
    end = max(1e-3, (max(int(r["t"]) for r in rows) - t0) / 1e9)
    bands = _bands(data, t0)
    if ops:
        w = rd.bin_width(end, BINS)
        n = int(end / w) + 1
        xs = [(k + 0.5) * w for k in range(n)]
        series = []
        for k, kind in enumerate(("ok", "fail", "info")):
            ys: list[float | None] = [None] * n
            for op in ops:
                if op.type != kind or op.complete_t is None:
                    continue
                b = min(n - 1, int((op.complete_t - t0) / 1e9 / w))
                ms = (op.complete_t - op.invoke_t) / 1e6
                ys[b] = max(ys[b] or 0.0, ms)
            if any(y is not None for y in ys):
                series.append(Series(kind, xs, ys, plots.color(k), dots=True))
        chart = plots.line_chart("maelstrom-latency", "Client operation latency over time",
                                 series, xlabel="completion time since start (s)",
                                 ylabel="latency ms", x_range=(0, end), bands=bands)
        parts.append('<h2>Client operations over time</h2><p class="cap">Per completion-time '
                     "bin: the slowest operation by outcome (ok, fail, info: timeout or "
                     "indefinite error). Shaded: fault periods.</p>" + chart)
    parts.append(_spacetime(logs, t0, end, data))
    return "".join(parts)


def _spacetime(logs: dict[str, list[dict[str, Any]]], t0: int, end: float,
               data: rd.RunData) -> str:
    sent: dict[tuple[str, str, int], int] = {}
    for rows in logs.values():
        for r in rows:
            if r.get("ev") == "nsend" and isinstance(r.get("msg_id"), int):
                sent.setdefault((r["src"], r["dest"], r["msg_id"]), int(r["t"]))
    pairs = []
    for rows in logs.values():
        for r in rows:
            key = (r.get("src"), r.get("dest"), r.get("msg_id"))
            if r.get("ev") == "nrecv" and key in sent:
                pairs.append((sent.pop(key), int(r["t"]), str(key[0]), str(key[1]),
                              str(r.get("type"))))
    if not pairs:
        return ""
    pairs.sort()
    mid = len(pairs) // 2
    sample = pairs[max(0, mid - ARROWS // 2):mid + ARROWS // 2]
    lanes = sorted({p[2] for p in pairs} | {p[3] for p in pairs},
                   key=lambda n: (len(n), n))
    kinds = sorted({p[4] for p in sample})
    arrows = [Arrow(src, (a - t0) / 1e6, dst, (b - t0) / 1e6,
                    f"{kind} {src} → {dst}: {(b - a) / 1e6:.2f} ms",
                    plots.color(kinds.index(kind)))
              for a, b, src, dst, kind in sample]
    x0 = min(x.t0 for x in arrows)
    x1 = max(x.t1 for x in arrows)
    chart = plots.spacetime("maelstrom-spacetime", "Node-to-node messages", lanes, arrows,
                            x0=x0, x1=max(x1, x0 + 1e-3))
    return ('<h2>Spacetime diagram (sample)</h2><p class="cap">'
            f"{len(sample)} consecutive node-to-node messages from mid-run (of {len(pairs)} "
            "matched by msg_id), from the sender's agent to the receiver's; colour: message "
            f"type ({escape(', '.join(kinds))}).</p>" + chart)
