"""Backends: one topology model, many ways to realise it (docs/architecture.md decision 2)."""

from __future__ import annotations

from typing import Any

from testbed.backends.base import Backend, BackendError, Capabilities, HostAddress, Realised
from testbed.rundir import RunDir
from testbed.spec.topology import PathMatrix, TopologySpec

__all__ = ["Backend", "BackendError", "Capabilities", "HostAddress", "Realised",
           "backend_class", "make_backend"]


def backend_class(name: str) -> type[Backend]:
    """The class of a backend by its spec name (imported only when asked for)."""
    if name == "sim":
        from testbed.backends.sim import SimBackend

        return SimBackend
    if name == "local":
        from testbed.backends.local import LocalBackend

        return LocalBackend
    if name == "mininet":
        from testbed.backends.mininet import MininetBackend

        return MininetBackend
    if name == "docker":
        from testbed.backends.docker import DockerBackend

        return DockerBackend
    if name == "remote":
        from testbed.backends.remote import RemoteBackend

        return RemoteBackend
    raise BackendError(f"the {name} backend is not available; use --backend local, sim, "
                       "mininet, docker or remote")


def make_backend(name: str, run: RunDir, topology: TopologySpec, paths: PathMatrix,
                 **options: Any) -> Backend:
    """`options` reach backends that take them (mininet and docker: applier="auto"|"netem"|
    "userspace", capture=CaptureOptions(...) or None, seed=int; docker also image=str,
    cpus=float, memory="512m"; remote also inventory=Path, docs/remote.md); others ignore
    them."""
    cls = backend_class(name)
    return cls(run, topology, paths, **options) if cls.takes_options else cls(run, topology, paths)
