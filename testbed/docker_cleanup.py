"""Removing what the docker backend created: by journaled name (teardown) or, with the journal
gone, by testbed's labels (clean). Never starts an engine: none running means nothing to remove
there, and a container cannot outlive its engine's state on disk anyway."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from testbed.backends.docker_net import LABEL

#: Removals in flight at once: the engine serves them side by side (as `docker rm -f A B ...`
#: does, ten at a time), and on two cores more than this only queues inside dockerd.
REMOVE_WORKERS = 8
#: how long a network whose endpoints the engine still holds is retried before its removal fails
NETWORK_BUSY_S = 10.0
SANDBOX_SUFFIX = "-net"  # a host's network sandbox: removed after the node that shares it

_cached: Any | None = None
_cached_lock = threading.Lock()


def _client() -> Any | None:
    try:
        import docker

        c = docker.from_env(timeout=60)
        c.ping()
        return c
    except Exception:  # noqa: BLE001 - no SDK, no engine, bad DOCKER_HOST: nothing to do
        return None


def _shared() -> Any | None:
    """One client for this process's removals: a teardown of a hundred hosts removes two
    hundred containers, and a new connection and ping for each was most of its time. It is
    pinged once and dropped when a call fails to reach the engine."""
    global _cached
    with _cached_lock:
        if _cached is None:
            _cached = _client()
        return _cached


def _drop() -> None:
    global _cached
    with _cached_lock:
        if _cached is not None:
            _cached.close()
        _cached = None


def _remove_one(c: Any, name: str) -> bool:
    import docker

    try:
        c.api.remove_container(name, force=True)
        return True
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:
        # "removal already in progress" means it is going; anything else is worth a retry.
        return "in progress" in str(exc)


def remove_container(name: str) -> bool:
    """`docker rm -f NAME`; True if it existed."""
    c = _shared()
    if c is None:
        return False
    try:
        return _remove_one(c, name)
    except Exception:  # noqa: BLE001 - the engine restarted under the cached client
        _drop()
    c = _shared()
    return False if c is None else _remove_one(c, name)


def remove_containers(names: list[str]) -> dict[str, bool]:
    """`docker rm -f` of many containers side by side; for each name, True if it existed."""
    c = _shared()
    if c is None or not names:
        return dict.fromkeys(names, False)
    def one(name: str) -> bool | None:
        try:
            return _remove_one(c, name)
        except Exception:  # noqa: BLE001 - connection lost: retried below on a new client
            return None

    with ThreadPoolExecutor(min(REMOVE_WORKERS, len(names))) as pool:
        gone = list(pool.map(one, names))
    return {n: remove_container(n) if g is None else g for n, g in zip(names, gone, strict=True)}


def container_waves(names: list[str]) -> list[list[str]]:
    """The order to remove a run's containers in: the nodes (and any other container) first,
    then the sandboxes (`...-net`, testbed/backends/docker.py) whose network namespaces they
    share; each wave side by side."""
    return [w for w in ([n for n in names if not n.endswith(SANDBOX_SUFFIX)],
                        [n for n in names if n.endswith(SANDBOX_SUFFIX)]) if w]


def remove_network(name: str) -> bool:
    """`docker network rm NAME`, after disconnecting anything still attached (a container a
    killed run created but never journaled as attached)."""
    import docker

    c = _client()
    if c is None:
        return False
    try:
        deadline = time.monotonic() + NETWORK_BUSY_S
        while True:
            net = c.networks.get(name)
            for cid in (net.attrs.get("Containers") or {}):
                try:
                    net.disconnect(cid, force=True)
                except docker.errors.APIError:
                    continue
            try:
                net.remove()
                return True
            except docker.errors.NotFound:
                raise
            except docker.errors.APIError as exc:
                # A container whose removal was still in progress (`_remove_one` counts that
                # as gone) holds its endpoint a moment longer: the engine says so, and the
                # network goes once it is released.
                if "active endpoints" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    except docker.errors.NotFound:
        return False
    finally:
        c.close()


def clean_labelled(dry_run: bool) -> list[str]:
    """Every container, then every network, carrying a testbed run label."""
    import docker

    c = _client()
    if c is None:
        return []
    done = []
    try:
        for ct in c.api.containers(all=True, filters={"label": LABEL}):
            name = ct["Names"][0].lstrip("/")
            if not dry_run:
                try:
                    c.api.remove_container(ct["Id"], force=True)
                except docker.errors.NotFound:
                    continue
            done.append(f"container {name} (run {ct['Labels'].get(LABEL)})")
        for net in c.api.networks(filters={"label": LABEL}):
            if not dry_run:
                try:
                    c.api.remove_network(net["Id"])
                except docker.errors.NotFound:
                    continue
            done.append(f"docker network {net['Name']} (run {net['Labels'].get(LABEL)})")
    finally:
        c.close()
    return done
