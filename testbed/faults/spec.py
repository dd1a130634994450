"""Fault schedule entries in experiments (`faults:`): what to break, when, and for how long.

Jepsen's split (nemesis, generator, checker): this module says *what* (the nemesis
vocabulary); schedule.py says *when*; backends do it; analysis judges the history against
faults.jsonl.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from testbed.spec.topology import Strict
from testbed.spec.units import Duration, Fraction, Ppm, SignedDuration

Shape = Literal["halves", "majority", "minority", "bridge", "majorities-ring"]


class _Timing(Strict):
    at: Duration
    for_: Duration | None = Field(default=None, alias="for", description="auto-heal after this")
    every: Duration | None = Field(default=None, description="repeat with this period")
    jitter: Duration = 0
    seed: int | None = None


class PartitionFault(_Timing):
    kind: Literal["partition"]
    groups: list[list[str]] | None = None
    shape: Shape | None = None
    isolate: str | None = None
    one_way: bool = Field(default=False, description="cut only traffic from the first group")

    @model_validator(mode="after")
    def _one_form(self) -> PartitionFault:
        given = [x is not None for x in (self.groups, self.shape, self.isolate)]
        if sum(given) != 1:
            raise ValueError("a partition names exactly one of `groups`, `shape` or `isolate`")
        return self


class HealFault(_Timing):
    kind: Literal["heal"]


class HostFault(_Timing):
    kind: Literal["crash", "restart", "pause", "resume"]
    host: str
    restart_after: Duration | None = None


class ClockFault(_Timing):
    kind: Literal["clock"]
    host: str
    offset: SignedDuration | None = None
    drift: Ppm | None = None
    jump: SignedDuration | None = None
    strobe: SignedDuration | None = Field(default=None, description="flip by +-this every period")
    period: Duration | None = None

    @model_validator(mode="after")
    def _one_change(self) -> ClockFault:
        if sum(x is not None for x in (self.offset, self.drift, self.jump, self.strobe)) != 1:
            raise ValueError("a clock fault sets exactly one of offset, drift, jump or strobe")
        if self.strobe is not None and (self.period is None or self.for_ is None):
            raise ValueError("a clock strobe needs `period` and `for`")
        return self


class LinkFault(_Timing):
    kind: Literal["link", "loss-burst"]
    between: tuple[str, str] = Field(description="two hosts; both directions change")
    delay: Duration | None = None
    path_jitter: Duration | None = None
    loss: Fraction | None = None


class MgmtFault(_Timing):
    kind: Literal["mgmt"]
    host: str
    mbean: str
    write: dict[str, Any] | None = None
    exec_: list[Any] | None = Field(default=None, alias="exec",
                                    description="[operation, arg, ...]")

    @model_validator(mode="after")
    def _one_request(self) -> MgmtFault:
        if (self.write is None) == (self.exec_ is None):
            raise ValueError("a mgmt fault has either `write: {Attribute: value}` or "
                             "`exec: [operation, args...]`")
        return self


FaultSpec = Annotated[
    PartitionFault | HealFault | HostFault | ClockFault | LinkFault | MgmtFault,
    Field(discriminator="kind"),
]
