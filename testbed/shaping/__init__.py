"""Link shaping: a per-host plan computed from the topology, then an applier that realises it
(docs/architecture.md decision 3): `netem` (real tc), `userspace` (NFQUEUE daemon), or `auto`."""

from testbed.hosts.base import HostError


class ShapingError(HostError):
    """An applier could not realise a plan; the message names the host."""
