"""Removing what the docker backend created: by journaled name (teardown) or, with the journal
gone, by testbed's labels (clean). Never starts an engine: none running means nothing to remove
there, and a container cannot outlive its engine's state on disk anyway."""

from __future__ import annotations

from typing import Any

from testbed.backends.docker_net import LABEL


def _client() -> Any | None:
    try:
        import docker

        c = docker.from_env(timeout=60)
        c.ping()
        return c
    except Exception:  # noqa: BLE001 - no SDK, no engine, bad DOCKER_HOST: nothing to do
        return None


def remove_container(name: str) -> bool:
    """`docker rm -f NAME`; True if it existed."""
    import docker

    c = _client()
    if c is None:
        return False
    try:
        c.api.remove_container(name, force=True)
        return True
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:
        # "removal already in progress" means it is going; anything else is worth a retry.
        return "in progress" in str(exc)
    finally:
        c.close()


def remove_network(name: str) -> bool:
    """`docker network rm NAME`, after disconnecting anything still attached (a container a
    killed run created but never journaled as attached)."""
    import docker

    c = _client()
    if c is None:
        return False
    try:
        net = c.networks.get(name)
        for cid in (net.attrs.get("Containers") or {}):
            try:
                net.disconnect(cid, force=True)
            except docker.errors.APIError:
                continue
        net.remove()
        return True
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
