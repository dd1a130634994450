"""The node's skewed local clock (docs/architecture.md decision 6).

Nodes on one machine share the host's true clock t; each sees
`local(t) = t + offset + drift * (t - t0) + sum(jumps)`. Protocols only ever see local time;
the delivery log records both.
"""

from __future__ import annotations


class SkewedClock:
    def __init__(self, t0_ns: int, offset_ns: int = 0, drift_ppm: float = 0.0):
        self.t0 = t0_ns
        self.offset_ns = offset_ns
        self.drift_ppm = drift_ppm

    def local(self, true_ns: int) -> int:
        if not self.drift_ppm:
            return true_ns + self.offset_ns
        return true_ns + self.offset_ns + round(self.drift_ppm * 1e-6 * (true_ns - self.t0))

    def duration_to_true(self, local_ns: int) -> int:
        """A local-clock interval expressed in true time (timers run at the local rate)."""
        if not self.drift_ppm:
            return local_ns
        return round(local_ns / (1.0 + self.drift_ppm * 1e-6))

    def jump(self, delta_ns: int) -> None:
        self.offset_ns += delta_ns

    def set_drift(self, true_now_ns: int, drift_ppm: float) -> None:
        """Change the rate without a discontinuity at true_now."""
        before = self.local(true_now_ns)
        self.drift_ppm = drift_ppm
        self.offset_ns += before - self.local(true_now_ns)
