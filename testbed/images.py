"""`testbed image build [--base debootstrap]`: the node image of the `docker` backend.

Machines here reach no image registry (docs/platform.md), so the base is built with debootstrap
(`--variant=minbase` plus Python, iproute2, iptables, tcpdump and libnetfilter-queue for the
userspace shaper), imported with `docker import` and cached twice: as the tarball under
/var/cache/testbed/ (survives a wiped engine) and as the image `testbed-base:bookworm-<key>`.
The repository's `Dockerfile` is then built on it, offline: the Debian packages are already
there and the shaper's Python binding arrives as a wheel built here, uvloop as the wheel of
the host venv's own installation (packed back from its files), so docker nodes run uvloop.

The node image is tagged `testbed-node:<project version>-<content hash>`, the hash covering the
Dockerfile, `nodes/`, the shaper daemon, the wheels and the base's name, so an unchanged tree
reuses the image (no rebuild) and a changed one can never run stale node code.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from testbed.engine import EngineError, client, short

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path("/var/cache/testbed")
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-venv", "python3-numpy", "iproute2", "iptables", "tcpdump",
                 "libnetfilter-queue1")
REGISTRY_BASE = "python:3.11-slim"
NODE_REPO = "testbed-node"
SHAPER = ROOT / "testbed" / "shaping" / "userspace_daemon.py"


class ImageError(Exception):
    """The image cannot be built or found; the message is one sentence for the user."""


def version() -> str:
    try:
        return metadata.version("testbed")
    except metadata.PackageNotFoundError:
        text = (ROOT / "pyproject.toml").read_text()
        return text.split('version = "', 1)[1].split('"', 1)[0]


def base_tag() -> str:
    key = hashlib.sha256(" ".join((SUITE, "minbase", *BASE_PACKAGES)).encode()).hexdigest()[:10]
    return f"testbed-base:{SUITE}-{key}"


def _run(argv: list[str], what: str, timeout: float = 900) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        raise ImageError(f"{what} failed: {tail[0][:300]}")


def debootstrap_tarball() -> Path:
    """The base root filesystem as a tarball, built once (about a minute) and kept."""
    tar = CACHE / f"{base_tag().split(':')[1]}.tar"
    if tar.exists():
        return tar
    if not shutil.which("debootstrap"):
        raise ImageError("debootstrap is not installed; run `apt-get install -y debootstrap`")
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix="rootfs-") as d:
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
              SUITE, d, MIRROR], "debootstrap")
        # apt's lists and caches are half the size and never used by a node.
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(Path(d) / junk, ignore_errors=True)
        partial = tar.with_suffix(".partial")
        _run(["tar", "-C", d, "--numeric-owner", "-cf", str(partial), "."], "tar")
        partial.rename(tar)
    return tar


def ensure_base(docker: Any, base: str) -> str:
    """The base image name for `--base`: debootstrap (built and imported here), registry
    (python:3.11-slim, pulled), auto (registry image if already present, else debootstrap) or
    any image name that is present."""
    import docker as sdk

    if base == "auto":
        try:
            docker.images.get(REGISTRY_BASE)
            return REGISTRY_BASE
        except sdk.errors.ImageNotFound:
            base = "debootstrap"
    if base == "registry":
        try:
            docker.images.pull(REGISTRY_BASE)
        except sdk.errors.APIError as exc:
            raise ImageError(f"cannot pull {REGISTRY_BASE} (no registry reachable?); use "
                             f"--base debootstrap: {short(exc)}") from exc
        return REGISTRY_BASE
    if base != "debootstrap":
        try:
            docker.images.get(base)
        except sdk.errors.ImageNotFound as exc:
            raise ImageError(f"base image {base} is not present; use --base debootstrap") from exc
        return base
    tag = base_tag()
    try:
        docker.images.get(tag)
        return tag
    except sdk.errors.ImageNotFound:
        pass
    repo, version_tag = tag.split(":")
    docker.api.import_image_from_file(str(debootstrap_tarball()), repository=repo,
                                      tag=version_tag)
    return tag


def shaper_wheels() -> list[Path]:
    """The NFQUEUE binding (no binary wheel on PyPI) built here once for CPython 3.11, which
    Debian bookworm's python3 also is. Without it the image still runs nodes; the userspace
    applier then runs the daemon from the host inside the container's namespace anyway."""
    out = CACHE / "wheels"
    found = sorted(out.glob("[Nn]etfilter[Qq]ueue-*.whl"))
    if found:
        return found
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    "netfilterqueue"], capture_output=True, timeout=300)
    return sorted(out.glob("[Nn]etfilter[Qq]ueue-*.whl"))


def uvloop_wheel() -> list[Path]:
    """The uvloop the host's venv runs, packed back into its wheel (no registry needed), so
    docker nodes run on uvloop like local ones (nodes/loop.py). Built once per version into
    the cache; empty when the host has no uvloop (nodes then fall back to asyncio's loop)."""
    try:
        dist = metadata.distribution("uvloop")
    except metadata.PackageNotFoundError:
        return []
    info = dist.read_text("WHEEL") or ""
    tag = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                if line.startswith("Tag:")), None)
    if tag is None or not tag.startswith("cp311-"):  # the image's Python is bookworm's 3.11
        return []
    out = CACHE / "wheels" / f"uvloop-{dist.version}-{tag}.whl"
    if out.exists():
        return [out]
    out.parent.mkdir(parents=True, exist_ok=True)
    dist_info = f"uvloop-{dist.version}.dist-info"
    skip = {f"{dist_info}/{n}" for n in ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json")}
    files = sorted(str(f) for f in dist.files or [] if str(f) not in skip
                   and "__pycache__" not in str(f) and not str(f).startswith(".."))
    record = []
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as whl:
        for name in files:
            data = Path(str(dist.locate_file(name))).read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{name},sha256={digest.decode()},{len(data)}")
            # A fixed timestamp: the same installed files give the same wheel, and so the
            # same node image hash.
            whl.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
        record.append(f"{dist_info}/RECORD,,")
        whl.writestr(zipfile.ZipInfo(f"{dist_info}/RECORD", (1980, 1, 1, 0, 0, 0)),
                     "\n".join(record) + "\n")
    tmp.rename(out)
    return [out]


# Debian packages the node image gets beyond its base, as .deb files in its build context:
# libfaketime for the Maelstrom clock nemesis (docs/maelstrom.md). Depends on libc6 only.
NODE_DEBS = ("libfaketime",)


def _suite() -> str:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return ""
    return next((ln.split("=", 1)[1].strip('"') for ln in text.splitlines()
                 if ln.startswith("VERSION_CODENAME=")), "")


def node_debs() -> list[Path]:
    """NODE_DEBS as .deb files, cached in CACHE/debs: from this machine's apt cache (where
    `make` installed them), else downloaded from its Debian mirror (`apt-get download`), only
    when this machine runs the base's suite (the same package the base would get; no
    registry). A package found neither way is left out: the image then lacks it (its nodes
    say so, e.g. `maelstrom.clock.not_faked`)."""
    out = CACHE / "debs"
    if _suite() != SUITE:
        return cached_debs()
    for pkg in NODE_DEBS:
        if list(out.glob(f"{pkg}_*.deb")):
            continue
        with contextlib.suppress(OSError):
            out.mkdir(parents=True, exist_ok=True)
            local = sorted(Path("/var/cache/apt/archives").glob(f"{pkg}_*_amd64.deb"))
            if local:
                shutil.copyfile(local[-1], out / local[-1].name)
                continue
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(["apt-get", "download", "-q", pkg], cwd=out,
                               capture_output=True, timeout=120)
    return cached_debs()


def cached_debs() -> list[Path]:
    """The .deb files the node image installs, as cached here (node_debs)."""
    return sorted(f for pkg in NODE_DEBS for f in (CACHE / "debs").glob(f"{pkg}_*.deb"))


def cached_wheels() -> list[Path]:
    """The wheels the node image installs, as cached here (see shaper_wheels, uvloop_wheel)."""
    found = sorted((CACHE / "wheels").glob("[Nn]etfilter[Qq]ueue-*.whl"))
    return found + sorted((CACHE / "wheels").glob("uvloop-*.whl"))


def node_program() -> list[Path]:
    """The node program's files, as the node image and the remote backend's bundle ship them:
    `nodes/` and the userspace shaper with the package modules it imports (testbed/shaping's
    `__init__` needs the host seam's HostError)."""
    files = sorted((ROOT / "nodes").rglob("*.py"))
    files += [ROOT / "testbed" / "__init__.py", ROOT / "testbed" / "hosts" / "__init__.py",
              ROOT / "testbed" / "hosts" / "base.py", ROOT / "testbed" / "shaping" / "__init__.py",
              SHAPER]
    return files


def _context_files(wheels: list[Path]) -> dict[str, Path]:
    files = {"Dockerfile": ROOT / "Dockerfile"}
    for f in node_program():
        files[f"app/{f.relative_to(ROOT)}"] = f
    for w in wheels:
        files[f"wheels/{w.name}"] = w
    for d in cached_debs():
        files[f"debs/{d.name}"] = d
    return files


def node_tag(base: str, wheels: list[Path]) -> str:
    h = hashlib.sha256(base.encode())
    for name, path in sorted(_context_files(wheels).items()):
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{NODE_REPO}:{version()}-{h.hexdigest()[:12]}"


def expected_tag() -> str:
    """The node image tag for this tree with the default debootstrap base, without an engine:
    what the docker backend runs unless told otherwise."""
    with contextlib.suppress(OSError):  # packed here too, so the tag counts it as build() does
        uvloop_wheel()
    node_debs()
    return node_tag(base_tag(), cached_wheels())


def build(base: str = "auto", rebuild: bool = False) -> dict[str, str]:
    """Build (or find cached) the node image; returns {"tag", "id", "base"}."""
    import docker as sdk

    docker = client(timeout=900)
    try:
        base_name = ensure_base(docker, base)
        wheels = shaper_wheels() + uvloop_wheel()
        node_debs()
        tag = node_tag(base_name, wheels)
        if not rebuild:
            try:
                return {"tag": tag, "id": docker.images.get(tag).id, "base": base_name}
            except sdk.errors.ImageNotFound:
                pass
        with tempfile.TemporaryDirectory(prefix="tb-image-") as ctx:
            for name, src in _context_files(wheels).items():
                dst = Path(ctx) / name
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
            (Path(ctx) / "wheels").mkdir(exist_ok=True)
            (Path(ctx) / "debs").mkdir(exist_ok=True)
            image, _ = docker.images.build(
                path=ctx, tag=tag, buildargs={"BASE_IMAGE": base_name}, rm=True,
                forcerm=True, network_mode="host",
                labels={"org.testbed.image": "node", "org.testbed.version": version()})
        return {"tag": tag, "id": image.id, "base": base_name}
    except sdk.errors.BuildError as exc:
        raise ImageError(f"building the node image failed: {short(exc)}") from exc
    except sdk.errors.APIError as exc:
        raise ImageError(f"the Docker engine refused the image build: {short(exc)}") from exc
    finally:
        docker.close()


def image_id(tag: str) -> str:
    """The id of a present image, or ImageError with what to run."""
    import docker as sdk

    docker = client()
    try:
        return str(docker.images.get(tag).id)
    except sdk.errors.ImageNotFound as exc:
        raise ImageError(f"the node image {tag} is not built; run `testbed image build` (as "
                         "root) first") from exc
    except sdk.errors.APIError as exc:
        raise EngineError(f"the Docker engine did not answer: {short(exc)}") from exc
    finally:
        docker.close()


def record_in_lock(run_path: Path, tag: str, image: str) -> None:
    """Add the image that ran the nodes to the run's spec.lock.yaml (reproducibility)."""
    lock_path = run_path / "spec.lock.yaml"
    lock = yaml.safe_load(lock_path.read_text()) if lock_path.exists() else {}
    lock = lock or {}
    lock["image"] = {"tag": tag, "id": image}
    lock_path.write_text(yaml.safe_dump(lock, sort_keys=False))


def main(argv: list[str] | None = None) -> int:
    """`python -m testbed.images [--base B] [--rebuild]` (what `testbed image build` runs)."""
    import argparse

    from testbed.engine import ensure_engine

    p = argparse.ArgumentParser(prog="python -m testbed.images")
    p.add_argument("--base", default="auto", help="auto, debootstrap, registry or an image")
    p.add_argument("--rebuild", action="store_true")
    args = p.parse_args(argv)
    try:
        ensure_engine()
        info = build(args.base, args.rebuild)
    except (ImageError, EngineError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{info['tag']} {info['id']} (base {info['base']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
