"""The sequencer's duplicate suppression (nodes/protocols/sequencer.py SeenMessages): exact
against a plain set, in memory bounded by the reordering, not by the messages seen."""

from __future__ import annotations

import random

from nodes.protocols.sequencer import INCARNATION_SPAN, SeenMessages


def test_seen_matches_a_plain_set_and_stays_small() -> None:
    rng = random.Random(18)
    seen, plain = SeenMessages(), set()
    keys: list[tuple[int, int]] = []
    for origin in range(1, 6):
        # Two incarnations per origin; the first one's stream stops with a gap (a crash).
        keys += [(origin, m) for m in range(1, 3001)]
        keys += [(origin, INCARNATION_SPAN + m) for m in range(1, 3001)]
    # FIFO per origin, streams interleaved; a relayed copy now and then, ahead or behind.
    keys.sort(key=lambda k: (k[1] % INCARNATION_SPAN) + rng.random() * 3)
    arrivals = []
    for k in keys:
        arrivals.append(k)
        if rng.random() < 0.05:
            o, m = k
            arrivals.append((o, m + rng.randint(-40, 40)))
    biggest = 0
    for k in arrivals:
        if k[1] <= 0:
            continue
        assert (k in seen) == (k in plain), k
        seen.add(k)
        plain.add(k)
        assert k in seen
        biggest = max(biggest, len(seen))
    probes = [(o, m) for o in range(0, 7) for m in range(-5, 3100)]
    probes += [(o, INCARNATION_SPAN + m) for o in range(0, 7) for m in range(-5, 3100)]
    assert all((p in seen) == (p in plain) for p in probes)
    assert len(plain) > 30_000
    assert biggest < 400, biggest  # ranges + stragglers, against 30,000+ keys


def test_a_straggler_below_the_first_seen_extends_the_range_down() -> None:
    seen = SeenMessages()
    seen.add((1, 10))  # a relayed copy first
    for m in (7, 8, 9):
        seen.add((1, m))
    assert seen.extra == set() and seen.ranges and len(seen) == 1
    assert (1, 7) in seen and (1, 6) not in seen and (1, 11) not in seen
