"""Link shaping: a per-host plan computed from the topology, then an applier that realises it
(docs/architecture.md decision 3): `netem` (real tc), `userspace` (NFQUEUE daemon), or `auto`."""
