"""The `udp-aead` transport (nodes/aead.py) and nodes under a flood of forged datagrams.

Unit: sealing round-trips, any changed byte or forged sender fails authentication, replays and
datagrams older than the window are refused, restarts never reuse a nonce. End to end: the
quickstart's topology and protocol on the local backend while this test sends 4,000 forged
datagrams/s to two of the nodes for the whole run: over udp-aead every forgery is counted and
the group's total order is intact; over plain udp nothing crashes (0 ev=error, 0 tracebacks),
whatever the order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.forged_flood import RATE, flood
from nodes.aead import INCARNATION_SHIFT, REPLAY_WINDOW, Sealer, SealError
from nodes.wire import HEADER_SIZE, Header, Message, MsgType, encode
from testbed.rundir import RunDir
from tests.eventlogs import fnl_sequences, read_events

ROOT = Path(__file__).resolve().parents[1]
KEY = bytes(range(32))


def _datagram(sender: int = 1, payload: bytes = b"hello") -> bytes:
    return encode(Message(Header(MsgType.DATA, sender=sender, origin=sender, mno=1, rseq=1),
                          payload))


def test_seal_open_round_trip_and_header_stays_readable() -> None:
    a, b = Sealer(KEY), Sealer(KEY)
    plain = _datagram(payload=b"x" * 1000)
    sealed = a.seal(plain)
    assert sealed[:HEADER_SIZE] == plain[:HEADER_SIZE]  # dissectors still read the header
    assert b"x" * 16 not in sealed  # the payload is not
    assert len(sealed) == len(plain) + 24
    assert b.open(sealed) == plain


def test_any_changed_byte_or_forged_sender_fails_authentication() -> None:
    a, b = Sealer(KEY), Sealer(KEY)
    sealed = a.seal(_datagram())
    for i in range(len(sealed)):
        bad = bytearray(sealed)
        bad[i] ^= 0x40
        with pytest.raises(SealError) as err:
            Sealer(KEY).open(bytes(bad))
        assert err.value.reason in ("auth", "replay")
    with pytest.raises(SealError, match="does not authenticate"):
        Sealer(bytes(32)).open(sealed)  # another run's key
    assert b.open(sealed) == _datagram()  # the genuine one still opens afterwards


def test_replays_and_datagrams_older_than_the_window_are_refused() -> None:
    a, b = Sealer(KEY), Sealer(KEY)
    first = a.seal(_datagram())
    later = [a.seal(_datagram()) for _ in range(10)]
    for s in reversed(later):  # reordering inside the window is fine
        b.open(s)
    b.open(first)
    for s in (first, later[3]):
        with pytest.raises(SealError) as err:
            b.open(s)
        assert err.value.reason == "replay"
    assert REPLAY_WINDOW == 4096  # docs/security.md
    kept = a.seal(_datagram())
    for _ in range(REPLAY_WINDOW - 1):
        b.open(a.seal(_datagram()))
    assert b.open(kept) == _datagram()  # 4,095 newer ones later: still inside the window
    old = a.seal(_datagram())
    for _ in range(REPLAY_WINDOW + 1):
        b.open(a.seal(_datagram()))
    with pytest.raises(SealError, match="replayed or too old"):
        b.open(old)


def test_a_restarted_sender_uses_fresh_nonces_that_are_accepted() -> None:
    before, after, receiver = Sealer(KEY, 0), Sealer(KEY, 1), Sealer(KEY)
    for _ in range(5):
        receiver.open(before.seal(_datagram()))
    restarted = after.seal(_datagram())
    assert int.from_bytes(restarted[HEADER_SIZE:HEADER_SIZE + 8]) > 1 << INCARNATION_SHIFT
    assert receiver.open(restarted) == _datagram()


# -- end to end ---------------------------------------------------------------------------------
TOPO = (ROOT / "topologies" / "two-sites.yaml").read_text()
EXP = """\
name: forged
topology: topo.yaml
backend: local
duration: 6s
drain: 2s
seed: 3
transport: {transport}
protocol: {{name: sequencer, params: {{sequencer: h1}}}}
workload: {{rate: 50/s, size: 1KiB, arrival: poisson}}
"""
# Over plain udp, forged headers that pass as the group's own messages leave the nodes'
# progress counters unreconcilable, so the run is never quiescent (testbed/drain.py) and would
# drain to the 30 s default cap: that variant only proves that nothing crashes, 4 s will do.
UDP_DRAIN_MAX = "drain_max: 4s\n"


def test_the_run_key_is_made_once_per_run_and_private(tmp_path: Path) -> None:
    """docs/security.md: a 256-bit key per run in `runs/<run>/transport.key`, mode 0600."""
    run, other = RunDir.create(tmp_path, "a"), RunDir.create(tmp_path, "b")
    key = run.transport_key
    assert len(bytes.fromhex(key)) == 32 and run.transport_key == key
    assert (run.path / "transport.key").stat().st_mode & 0o777 == 0o600
    assert other.transport_key != key


@pytest.mark.timing
@pytest.mark.parametrize("transport", ["udp-aead", "udp"])
def test_local_run_under_a_flood_of_forged_datagrams(tmp_path: Path, transport: str) -> None:
    (tmp_path / "topo.yaml").write_text(TOPO)
    (tmp_path / "exp.yaml").write_text(EXP.format(transport=transport)
                                       + (UDP_DRAIN_MAX if transport == "udp" else ""))
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "run", str(tmp_path / "exp.yaml"),
                             "--out", str(out), "--no-analyze"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "COLUMNS": "200"})
    try:
        sent = flood(out, proc, ("h1", "h2"))
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output
    run = next(p for p in out.iterdir() if p.is_dir())
    events = read_events(run)
    for host in ("h1", "h2", "h3", "h4"):
        log = (run / "nodes" / host / "node.log").read_text()
        assert "Traceback" not in log, log[-3000:]
        assert not [e for e in events[host] if e["ev"] == "error"], host
    stops = {h: evs[-1] for h, evs in events.items()}
    assert all(s["ev"] == "stop" and s["errors"] == 0 for s in stops.values()), stops
    for host in ("h1", "h2"):
        refused = stops[host]["malformed"] + stops[host]["rejected"]
        # a second's worth at its nominal rate at least (a loaded machine floods slower)
        assert sent[host] > RATE, sent
        if transport == "udp-aead":
            # Every forgery is counted (loopback drops nothing at this rate), none got in.
            assert refused >= 0.98 * sent[host], (host, sent, stops[host])
            assert set(stops[host]["drops"]) <= {"rejected:auth", "rejected:short",
                                                 "rejected:replay"}, stops[host]
        else:
            assert refused > 0.5 * sent[host], (host, sent, stops[host])
    if transport == "udp-aead":
        assert all(stops[h]["rejected"] == 0 for h in ("h3", "h4")), stops
        # The group's own messages pass: one total order, every sent message delivered.
        seqs = fnl_sequences(events)
        sent_mids = {e["mid"] for evs in events.values() for e in evs if e["ev"] == "send"}
        # Each host sends 50/s from when it is up until the workload ends (a loaded machine
        # starts some nodes late, 3 s on average with one core busy, and they do not burst what
        # they missed).
        cfg = json.loads((run / "nodes" / "h1" / "node.json").read_text())
        end = cfg["start_at_ns"] + cfg["duration_ns"]
        up_s = sum(max(0, end - max(cfg["start_at_ns"], evs[0]["t"])) / 1e9
                   for evs in events.values())
        assert up_s > 4 and len(sent_mids) > 50 * up_s * 0.7, (len(sent_mids), up_s)
        assert all(s == seqs["h1"] for s in seqs.values())
        assert set(seqs["h1"]) == sent_mids


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.binary(max_size=200), st.booleans())
def test_random_input_only_ever_gives_seal_errors(data: bytes, as_header: bool) -> None:
    receiver = Sealer(KEY)
    if as_header:  # a genuine header in front, garbage behind
        data = _datagram()[:HEADER_SIZE] + data
    with pytest.raises(SealError) as err:
        receiver.open(data)
    assert err.value.reason in ("short", "auth", "replay")
