"""The numbers behind the report's plots, computed from one run record with pandas.

Reads `parquet/events/` when the analysis job wrote it, else the record's delivery logs, plus
its fault history, spec lock and pcaps/. No Spark: a report must render in a second or two,
also for runs analysed elsewhere. Every series is binned or sampled to a few hundred points, so
the report's size does not grow with the run's length or rate.

Definitions follow the analysis job: latency is the first fnl of a message at a node minus its
send, in true time (analysis/metrics.py); optimistic accuracy is the share of messages whose
rank among a node's opt events equals their rank among its fnl events (analysis/optimistic.py,
000 sec. 2.2).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.dataset as ds

from analysis.ingest import EVENTS_PARQUET
from analysis.record import RunRecord

COLUMNS = ["t", "i", "node", "ev", "mid", "seq"]
_NS_PER_S = 1e9


@dataclass(frozen=True)
class FaultSpan:
    """One fault from faults.jsonl, in seconds since the run's start; stop None: never healed
    (or instant, like a clock jump)."""

    fault: int
    kind: str
    hosts: list[str]
    start: float
    stop: float | None
    label: str
    measured: dict[str, Any]


@dataclass
class RunData:
    """A run's events as a DataFrame (t in ns), its nodes, time origin (`t0`: the workload's
    start, as the spec's fault times count; the first event for a run without a plan) and
    faults."""

    record: RunRecord
    events: pd.DataFrame
    nodes: list[str]
    t0: int
    end: float
    faults: list[FaultSpan]
    spec: dict[str, Any]
    #: faults the run planned but did not apply (faults.skipped.jsonl: `measured.skipped` says
    #: why); never shaded, never part of the run's fault history
    skipped: list[FaultSpan] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.record.path


def read_events(record: RunRecord) -> pd.DataFrame:
    """Delivery-log rows (COLUMNS and `inc`); Parquet if present, else the jsonl, skipping
    broken lines."""
    pq = record.path / EVENTS_PARQUET
    if pq.is_dir() and any(pq.rglob("*.parquet")):
        dataset = ds.dataset(pq, format="parquet", partitioning="hive")
        wanted = [*COLUMNS, *(["inc"] if "inc" in dataset.schema.names else [])]
        df = dataset.to_table(columns=wanted).to_pandas()
        df["node"] = df["node"].astype(str)
        return df if "inc" in df.columns else with_incarnations(df)
    # the plain reader applies what the ingest applies: intact lines, incarnations, revoked
    # deliveries dropped (analysis/deliverylog.py)
    rows = [{k: e.get(k) for k in (*COLUMNS, "inc")}
            for e in record.iter_events(revoke=True)]
    return pd.DataFrame(rows, columns=[*COLUMNS, "inc"]).astype({"inc": "int64"})


def with_incarnations(df: pd.DataFrame) -> pd.DataFrame:
    """`inc` per row as analysis/ingest.py gives it: how many `start` lines of its node come
    at or before it by ordinal `i`, less one (0 before the first)."""
    if df.empty:
        return df.assign(inc=pd.Series(dtype="int64"))
    order = df.sort_values(["node", "i"], kind="stable")
    starts = (order["ev"] == "start").astype("int64").groupby(order["node"]).cumsum()
    df = df.copy()
    df["inc"] = (starts - 1).clip(lower=0).reindex(df.index)
    return df


def load_run(record: RunRecord) -> RunData:
    """Everything the report plots, for the run of `record`. Its times count from the
    workload's start (the record's `start_ns`, the origin of the spec's fault times), from
    the first event for a run without a plan."""
    events = read_events(record)
    nodes = sorted(set(record.nodes) | set(events["node"].dropna().unique()))
    t0 = record.start_ns or (int(events["t"].min()) if len(events) else 0)
    end = (int(events["t"].max()) - t0) / _NS_PER_S if len(events) else 1.0
    faults = fault_spans(record.faults, t0, end, nodes)
    skipped = fault_spans(record.skipped_faults, t0, end, nodes)
    return RunData(record, events, nodes, t0, max(end, 1e-3), faults, dict(record.lock),
                   skipped)


def _partition_label(params: dict[str, Any], nodes: list[str]) -> str:
    """'partition h4 | h1 h2 h3': the sides are the groups still connected once the cuts hold."""
    from analysis.topology_view import groups_after

    parts = groups_after({(str(a), str(b)) for a, b in params.get("cuts", [])}, nodes)
    return "partition " + " | ".join(" ".join(g) for g in parts) if len(parts) > 1 \
        else "partition"


def fault_spans(entries: Sequence[dict[str, Any]], t0: int, end: float, nodes: list[str]
                ) -> list[FaultSpan]:
    """Pair the start and stop records of a fault history (the record's `faults` or
    `skipped_faults`) by fault id."""
    records = [rec for rec in entries if "t" in rec and "kind" in rec]
    starts: dict[Any, dict[str, Any]] = {}
    stops: dict[Any, dict[str, Any]] = {}
    for k, rec in enumerate(records):
        key = rec.get("fault", f"#{k}")
        (stops if rec.get("phase") == "stop" else starts).setdefault(key, rec)
    spans = []
    for key, rec in starts.items():
        kind, hosts = str(rec["kind"]), list(rec.get("hosts") or [])
        params = rec.get("params") or {}
        label = (_partition_label(params, nodes) if kind == "partition"
                 else f"{kind} {' '.join(hosts)}".strip())
        stop = stops.get(key)
        instant = kind == "clock"
        spans.append(FaultSpan(
            fault=key if isinstance(key, int) else -1, kind=kind, hosts=hosts,
            start=(rec["t"] - t0) / _NS_PER_S,
            stop=None if instant else ((stop["t"] - t0) / _NS_PER_S if stop else end),
            label=label, measured=rec.get("measured") or {}))
    return sorted(spans, key=lambda s: s.start)


def latencies(ev: pd.DataFrame, t0: int) -> pd.DataFrame:
    """Per (node, mid) first fnl with a known send: send_s (since start), fnl_s, latency_ms."""
    sends = ev[ev["ev"] == "send"].groupby("mid")["t"].min().rename("send_t")
    fnl = ev[(ev["ev"] == "fnl") & ev["mid"].notna()].sort_values("i")
    first = fnl.drop_duplicates(["node", "mid"])[["node", "mid", "t"]]
    lat = first.join(sends, on="mid", how="inner")
    return pd.DataFrame({
        "node": lat["node"].to_numpy(), "mid": lat["mid"].to_numpy(),
        "send_s": (lat["send_t"].to_numpy() - t0) / _NS_PER_S,
        "fnl_s": (lat["t"].to_numpy() - t0) / _NS_PER_S,
        "latency_ms": (lat["t"].to_numpy() - lat["send_t"].to_numpy()) / 1e6,
    })


def bin_width(span_s: float, bins: int) -> float:
    """A round bin width (1, 2, 2.5, 5 x 10^k s) giving about `bins` bins over the span."""
    raw = max(span_s, 1e-3) / bins
    mag = 10 ** np.floor(np.log10(raw))
    return float(next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw))


def latency_over_time(lat: pd.DataFrame, end: float, bins: int = 200
                      ) -> tuple[list[float], dict[str, list[float | None]]]:
    """Bin centres (s) and per send-time bin p50, p99 and max latency (ms; None in empty bins,
    so that lines break there)."""
    w = bin_width(end, bins)
    b = np.floor(lat["send_s"].to_numpy() / w).astype(int)
    g = pd.Series(lat["latency_ms"].to_numpy()).groupby(b)
    stats = pd.DataFrame({"p50": g.quantile(0.5), "p99": g.quantile(0.99), "max": g.max()})
    idx = np.arange(0, int(np.ceil(end / w)) + 1)
    stats = stats.reindex(idx)
    out = {col: [None if pd.isna(v) else float(v) for v in stats[col]]
           for col in ("p50", "p99", "max")}
    return [float(x) for x in (idx + 0.5) * w], out


def rate_per_node(ev: pd.DataFrame, t0: int, nodes: list[str], kind: str, end: float,
                  bins: int) -> tuple[float, dict[str, list[float]]]:
    """(bin width s, {node: `kind` events per second in each bin})."""
    w = bin_width(end, bins)
    n = int(np.ceil(end / w)) + 1
    sel = ev[ev["ev"] == kind]
    out = {}
    for node in nodes:
        ts = (sel.loc[sel["node"] == node, "t"].to_numpy() - t0) / _NS_PER_S
        ts = ts[ts >= 0]  # before the workload's start (t0): nothing to rate
        counts = np.bincount(np.floor(ts / w).astype(int), minlength=n)[:n]
        out[node] = [float(c) / w for c in counts]
    return w, out


def accuracy_per_node(ev: pd.DataFrame) -> dict[str, tuple[float, int, int]]:
    """{node: (accuracy, matched, count)} for nodes with both opt and fnl deliveries.
    Positions are per process, as analysis/optimistic.py counts them (a restarted host's
    incarnation `inc` is a new process, 000 sec. 2.2); a host pools its incarnations."""
    keys = ["node", "inc"] if "inc" in ev.columns else ["node"]

    def ranks(kind: str) -> pd.DataFrame:
        d = ev[(ev["ev"] == kind) & ev["mid"].notna()].sort_values("i")
        d = d.drop_duplicates([*keys, "mid"])[[*keys, "mid"]].copy()
        d[f"{kind}_pos"] = d.groupby(keys).cumcount()
        return d
    both = ranks("opt").merge(ranks("fnl"), on=[*keys, "mid"])
    out = {}
    for node, g in both.groupby("node"):
        matched = int((g["opt_pos"] == g["fnl_pos"]).sum())
        out[str(node)] = (matched / len(g), matched, len(g))
    return dict(sorted(out.items()))


def spacetime_sample(lat: pd.DataFrame, end: float, avoid: Sequence[tuple[float, float]] = (),
                     messages: int = 6) -> tuple[float, float, pd.DataFrame]:
    """A short window of `messages` consecutive sends from about the middle of the run, away
    from the `avoid` intervals (faults, in s) when possible, with their deliveries:
    (start ms, end ms, rows of `lat` in it)."""
    if lat.empty:
        return 0.0, 1.0, lat
    sends = lat.groupby("mid")["send_s"].first().sort_values()
    t = sends.to_numpy()
    # One second after a fault heals, delivery is usually back to its steady state.
    calm = np.ones(len(t), dtype=bool)
    for a, b in avoid:
        calm &= (t < a) | (t > b + 1.0)
    start = int(np.searchsorted(t, end / 2))
    ok = np.flatnonzero(calm[: max(len(t) - messages, 0) + 1])
    if len(ok):
        start = int(ok[np.argmin(np.abs(ok - start))])
    pick = sends.iloc[max(0, min(start, len(sends) - messages)):][:messages]
    rows = lat[lat["mid"].isin(pick.index)]
    x0, x1 = float(rows["send_s"].min()) * 1e3, float(rows["fnl_s"].max()) * 1e3
    pad = max((x1 - x0) * 0.04, 0.05)
    return x0 - pad, x1 + pad, rows


def cdf(values: np.ndarray, points: int = 200) -> tuple[list[float], list[float]]:
    """The empirical CDF at `points` evenly spaced quantiles (x values, y in [0, 1])."""
    if len(values) == 0:
        return [], []
    qs = np.linspace(0, 1, points)
    return [float(v) for v in np.quantile(values, qs)], [float(q) for q in qs]


def reservations(spec: dict[str, Any]) -> dict[str, float]:
    """{host: reserved bit/s} from the locked topology's `qos.rate`, for hosts that have one."""
    hosts = (spec.get("topology") or {}).get("hosts") or []
    return {h["name"]: float(h["qos"]["rate"]) for h in hosts
            if isinstance(h, dict) and isinstance((h.get("qos") or {}).get("rate"), int | float)}


def pcap_bandwidth(run_dir: Path, t0: int, end: float, bins: int = 120
                   ) -> tuple[float, dict[str, list[float]]]:
    """(bin width s, {host: egress Mbit/s per bin}) from each host's own capture.

    A host's address is the one on most of its capture's IPv4 packets (every unicast packet
    a host sees is to or from it); egress is the frames it sent, as HTB meters them.
    """
    from analysis.pcap import read_pcap

    manifest = run_dir / "pcaps" / "manifest.json"
    if not manifest.is_file():
        return 0.0, {}
    w = bin_width(end, bins)
    n = int(np.ceil(end / w)) + 1
    out: dict[str, np.ndarray] = {}
    for entry in json.loads(manifest.read_text()):
        path = run_dir / "pcaps" / str(entry.get("file", ""))
        if not path.is_file() or not path.stat().st_size:
            continue
        tab = read_pcap(path).select(["ts_ns", "src", "dst", "frame_len", "ip_version"])
        df = tab.to_pandas()
        df = df[(df["ip_version"] == 4) & df["ts_ns"].notna()]
        if df.empty:
            continue
        seen = pd.concat([df["src"].astype(str), df["dst"].astype(str)])
        own = seen.value_counts().index[0]
        sent = df[df["src"].astype(str) == own]
        ts = (sent["ts_ns"].to_numpy(dtype=np.int64) - t0) / _NS_PER_S
        keep = (ts >= 0) & (ts < n * w)
        b = np.floor(ts[keep] / w).astype(int)
        bits = np.bincount(b, weights=sent["frame_len"].to_numpy()[keep] * 8.0, minlength=n)[:n]
        host = str(entry.get("host", path.stem))
        out[host] = out.get(host, np.zeros(n)) + bits
    return w, {h: [float(v) / w / 1e6 for v in bits] for h, bits in sorted(out.items())}


def run_date(name: str) -> str:
    """The UTC start a run directory's name begins with (`20261129T043041Z-...`, testbed/
    rundir.py), as `2026-11-29 04:30:41 UTC`; "" for any other name."""
    m = re.match(r"^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z-", name)
    return "{}-{}-{} {}:{}:{} UTC".format(*m.groups()) if m else ""


def pair_matrix(summary: dict[str, Any]) -> tuple[list[str], list[str],
                                                   dict[tuple[str, str], dict[str, Any]]]:
    """(senders, receivers, (sender, receiver) -> latency stats) of the summary's
    `latency.fnl.per_pair` ("s->r" keys)."""
    per_pair = ((summary.get("latency") or {}).get("fnl") or {}).get("per_pair") or {}
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for key, stats in per_pair.items():
        sender, sep, receiver = str(key).partition("->")
        if sep and isinstance(stats, dict):
            cells[(sender, receiver)] = stats
    return (sorted({s for s, _ in cells}), sorted({r for _, r in cells}), cells)
