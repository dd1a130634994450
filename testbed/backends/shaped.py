"""What backends with real interfaces share (mininet, docker): each host is a network
namespace whose egress an applier shapes from the host's plan, and link faults change one
class of that plan while the run goes on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from testbed.backends.base import Backend
from testbed.shaping.hostns import HostNs
from testbed.shaping.plan import HostPlan, with_path
from testbed.spec.topology import Path as PathSpec


class ShapedHosts(Backend):
    applier: Any
    ns: Mapping[str, HostNs]
    plans: dict[str, HostPlan]

    def set_path(self, src: str, dst: str, path: PathSpec) -> None:
        """Change one one-way path while the run goes on (tc change / daemon control)."""
        plan = with_path(self.plans[src], dst, path)
        self.plans[src] = plan
        self.applier.change(self.ns[src], plan, plan.class_for(dst))

    def path_fault(self, p: dict[str, Any]) -> dict[str, Any]:
        """A link fault: each end's shaper changes its class for the other end (or, with
        `reset`, goes back to the planned path)."""
        a, b = p["between"]
        out = {}
        for src, dst in ((a, b), (b, a)):
            base = self.paths.get(src, dst)
            path = base if p.get("reset") else PathSpec(
                p.get("delay_ns", base.delay_ns), p.get("jitter_ns", base.jitter_ns),
                base.distribution, p.get("loss", base.loss), base.bandwidth_bps)
            self.set_path(src, dst, path)
            c = self.plans[src].class_for(dst)
            out[src] = {"delay_ms": c.delay_ns / 1e6, "jitter_ms": c.jitter_ns / 1e6,
                        "loss": c.loss}
        return {"paths": out}
