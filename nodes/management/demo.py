"""A demo registry for manual checks (``python -m nodes.management``) and for tests.

Its MBeans mirror what a node exposes (docs/architecture.md, "Management API") with plain
in-memory state instead of a running protocol: a skewed clock, a failure detector whose
timeout can be tuned at run time (GORDA D3.5 section 4.2: a wrong timeout causes false
suspicions and needless view changes) and SETO delivery counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nodes.management.mbeans import MBean, MBeanRegistry


@dataclass
class DemoClock:
    offset_ms: float = 0.0
    drift_ppm: float = 0.0
    jumps: int = 0

    def jump(self, ms: float) -> float:
        """Step the clock by ``ms``; returns the new offset."""
        self.offset_ms += ms
        self.jumps += 1
        return self.offset_ms


@dataclass
class DemoFailureDetector:
    timeout_ms: int = 500
    suspected: list[str] = field(default_factory=list)

    def set_timeout(self, value: int) -> None:
        if value <= 0:
            raise ValueError(f"TimeoutMs must be positive, got {value}")
        self.timeout_ms = value

    def suspect(self, member: str) -> bool:
        """Mark ``member`` suspected; False if it already was."""
        if member in self.suspected:
            return False
        self.suspected.append(member)
        return True


@dataclass
class DemoTotalOrder:
    alpha: float = 0.5
    opt_delivered: int = 0
    fnl_delivered: int = 0
    config: dict[str, object] = field(default_factory=lambda: {"window": 16, "adaptive": True})


def build_demo_registry() -> tuple[MBeanRegistry, DemoClock, DemoFailureDetector, DemoTotalOrder]:
    clock, detector, seto = DemoClock(), DemoFailureDetector(), DemoTotalOrder()
    registry = MBeanRegistry()
    registry.register(
        MBean("testbed:type=Clock", "The node's skewed local clock")
        .attribute(
            "OffsetMs",
            "float",
            lambda: clock.offset_ms,
            lambda v: setattr(clock, "offset_ms", v),
            "Offset from true time, ms",
        )
        .attribute(
            "DriftPpm",
            "float",
            lambda: clock.drift_ppm,
            lambda v: setattr(clock, "drift_ppm", v),
            "Drift rate, parts per million",
        )
        .attribute("Jumps", "int", lambda: clock.jumps, description="Clock jumps injected")
        .operation("jump", clock.jump, [("ms", "float")], "float", "Step the clock by ms")
    )
    registry.register(
        MBean("testbed:type=FailureDetector", "Timeout-based failure detector")
        .attribute(
            "TimeoutMs",
            "int",
            lambda: detector.timeout_ms,
            detector.set_timeout,
            "Silence after which a member is suspected, ms",
        )
        .attribute(
            "SuspectedMembers",
            "list",
            lambda: list(detector.suspected),
            description="Members currently suspected",
        )
        .operation(
            "suspect", detector.suspect, [("member", "str")], "bool", "Suspect a member by hand"
        )
    )
    registry.register(
        MBean("testbed:type=TotalOrder,protocol=seto", "SETO optimistic total order")
        .attribute(
            "Alpha",
            "float",
            lambda: seto.alpha,
            lambda v: setattr(seto, "alpha", v),
            "Inertia factor of the delay estimate (paper 000, Fig. 4)",
        )
        .attribute(
            "OptDelivered", "int", lambda: seto.opt_delivered, description="Messages opt-delivered"
        )
        .attribute(
            "FnlDelivered",
            "int",
            lambda: seto.fnl_delivered,
            description="Messages final-delivered",
        )
        .attribute(
            "Config",
            "dict",
            lambda: seto.config,
            lambda v: setattr(seto, "config", v),
            "Tuning knobs",
        )
    )
    return registry, clock, detector, seto
