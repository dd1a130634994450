"""Fixed, seeded simulator runs whose delivery logs must not change with a speed-up.

`golden_digests()` runs each case of `CASES` on the simulator of the tree it is imported
from and returns one SHA-256 per case over every node's `events.jsonl` (and the fault
history); tests/sim_golden.json holds the digests the simulator of commit 6e9f135 (before
its compiled hot path) wrote, except `cbcast`, `lamport` and `sequencer-faults`, rewritten when a
restarted process got new message ids and joined its peers' streams at a fresh message (their
faulty cases restart host c; docs/protocols.md "Restarts"); all nine were rewritten when
reliable FIFO's heartbeats went to the members still behind, after `heartbeat_after_ms` of
idleness and backing off, and the failure detector's ALIVE began to be skipped in an interval
with a multicast (fewer datagrams, so other link draws: the same checks hold); and the seven
on reliable FIFO again when its ACKs were delayed (`ack_every_ms` 200, at once for a quarter window
or a filled gap), its heartbeats waited for each member's measured ACK round trip, and the
ALIVE went out after a quarter of `fd_timeout_ms` of silence instead of every interval;
`cbcast` again when a restarted sender's old stream was kept one incarnation back (B4): b,
cut off from c while c sent its last messages before crashing, now holds their dependants
(causal order; no liveness is claimed under a crash) instead of delivering them without them;
the five on the sequencer again when members began to report their delivered number to the
sequencer (an empty FETCH every `ack_every_ms`), which keeps its relay store until stable;
`sequencer-faults` again when a restarted sequencer member began to number and log its
broadcasts at once but hold them until it joined the order, and to ask the sequencer for an
ORDER to join at (docs/protocols.md "Restarts"); `token-ring` again when K4's resend was timed
from the pass (a timer armed with it) instead of the next periodic tick; `cbcast` again when a
restarted receiver began to log where it joins each stream (`stream_join`, B5); all again when
the failure detector began to probe (a PING and an ACK a round instead of an ALIVE to every
member: other link draws, the same checks hold); `cbcast` again when a restarted process
began to ask every member for its counts (the join handshake, B6: other link draws, the same
deliveries and join points); `cbcast` again when its messages began to carry OLD_j after t_m
once it counts an old stream, and a range's base entry began to count as met (B4: more bytes
on the wire after c's restart, other link draws).
Regenerate only for an intended change of behaviour:

    python -m tests.sim_golden > tests/sim_golden.json
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from nodes.config import SIM_EPOCH_NS, ClockConfig, Member, NodeConfig, PathConfig, WorkloadConfig
from nodes.sim import Simulator, run_sim_file

S = 10**9
NAMES = ["a", "b", "c", "d"]


def configs(out: Path, protocol: str, params: dict[str, object]) -> list[NodeConfig]:
    """Four hosts: jittered paths, one lossy, one bandwidth-limited, one uniform-jitter,
    one without jitter; host d's clock is offset and drifts."""
    members = [Member(i, n, f"198.18.0.{i + 1}", 7000) for i, n in enumerate(NAMES)]
    special = {(0, 1): {"loss": 0.05}, (1, 2): {"bandwidth_bps": 20_000_000},
               (2, 3): {"distribution": "uniform"}}
    return [NodeConfig(
        node_id=i, name=n, members=members, protocol=protocol, params=dict(params),
        log_path=str(out / n / "events.jsonl"), seed=7, start_at_ns=SIM_EPOCH_NS + S // 10,
        duration_ns=S, drain_ns=S, workload=WorkloadConfig(True, 150.0, 512, "poisson"),
        clock=ClockConfig(offset_ns=2_000_000, drift_ppm=40.0) if n == "d" else ClockConfig(),
        paths={j: PathConfig(delay_ns=3_000_000 + 700_000 * (i + 2 * j),
                             jitter_ns=0 if (i, j) == (3, 0) else 1_500_000,
                             **special.get((i, j), {}))  # type: ignore[arg-type]
               for j in range(len(NAMES)) if j != i})
        for i, n in enumerate(NAMES)]


def faults(sim: Simulator) -> None:
    """A path change, a partition and its heal, a crash and restart, a pause and resume."""
    timeline = [(0.3, "path", {"between": ["a", "c"], "delay_ns": 9_000_000,
                               "jitter_ns": 4_000_000}),
                (0.4, "block", {"cuts": [["b", "c"], ["c", "b"]]}),
                (0.7, "heal", {}),
                (0.5, "crash", {"host": "c"}), (0.9, "restart", {"host": "c"}),
                (0.6, "pause", {"host": "d"}), (0.75, "resume", {"host": "d"})]
    sim.schedule_faults([{"t_ns": SIM_EPOCH_NS + round(t * S), "op": op, "params": p}
                         for t, op, p in timeline], sim_history(sim))


def sim_history(sim: Simulator) -> Path:
    return Path(sim.configs[0].log_path).parents[1] / "faults.jsonl"


Case = tuple[str, dict[str, object], bool]
CASES: dict[str, Case] = {
    "sequencer": ("sequencer", {"sequencer": "a"}, False),
    "sequencer-faults": ("sequencer", {"sequencer": "b"}, True),
    "seto": ("seto", {"sequencer": "a"}, False),
    "fast-seto": ("fast-seto", {"sequencer": "a", "planner": "heuristic"}, False),
    "lamport": ("lamport", {}, True),
    "token-ring": ("token-ring", {}, False),
    "reliable-ack": ("reliable-ack", {}, False),
    "cbcast": ("cbcast", {}, True),
}


def run_case(out: Path, case: Case) -> str:
    protocol, params, faulty = case
    sim = Simulator(configs(out, protocol, params), seed=3)
    if faulty:
        faults(sim)
    sim.run(SIM_EPOCH_NS + 25 * S // 10)
    digest = hashlib.sha256()
    for log in sorted(out.glob("**/*.jsonl")):
        digest.update(log.relative_to(out).as_posix().encode() + b"\0" + log.read_bytes())
    return digest.hexdigest()


def run_bench_case(out: Path) -> str:
    """bench/sim_speed.py's 30-host five-region case, shortened to 0.4 s of workload."""
    from bench.sim_speed import sim_spec

    config = out / "sim.json"
    out.mkdir(parents=True)
    config.write_text(json.dumps(sim_spec(30, 100.0, 1, out / "logs") | {"nodes": [
        n | {"duration_ns": 4 * S // 10, "drain_ns": S // 2}
        for n in sim_spec(30, 100.0, 1, out / "logs")["nodes"]]}))
    run_sim_file(config)
    digest = hashlib.sha256()
    for log in sorted(out.glob("logs/*/events.jsonl")):
        digest.update(log.parent.name.encode() + b"\0" + log.read_bytes())
    return digest.hexdigest()


def golden_digests(only: Callable[[str], bool] = lambda _: True) -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="sim-golden-") as tmp:
        digests = {name: run_case(Path(tmp) / name, case)
                   for name, case in CASES.items() if only(name)}
        if only("five-regions-30"):
            digests["five-regions-30"] = run_bench_case(Path(tmp) / "five-regions-30")
        return digests


if __name__ == "__main__":
    json.dump(golden_digests(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
