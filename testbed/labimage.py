"""The lab's images (testbed/lab.py): the SSH host image on top of the node image, and
`build_once`, which testbed/spark.py also uses for the lab's Spark image. Apart from the lab
itself, so that the lab and Spark need not import each other."""

from __future__ import annotations

import tempfile
from pathlib import Path

from testbed.engine import client, short
from testbed.images import build

LAB_REPO = "testbed-lab"
LAB_DOCKERFILE = """\
ARG NODE_IMAGE
FROM ${NODE_IMAGE}
# sshd for the remote backend's lab (testbed/lab.py); Debian's package, nothing else.
RUN command -v sshd >/dev/null || (apt-get update \\
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
       openssh-server && rm -rf /var/lib/apt/lists/*)
RUN mkdir -p /run/sshd /root/.ssh && chmod 700 /root/.ssh
# What `prepare` would otherwise install on a fresh host (it still checks): the node program's
# venv with the NFQUEUE binding from the node image's wheel. Saves minutes on a loaded machine.
RUN python3 -m venv --system-site-packages /opt/testbed-remote/venv \
    && if ls /opt/testbed/wheels/*.whl >/dev/null 2>&1; then \
         /opt/testbed-remote/venv/bin/pip install -q --no-index --no-cache-dir \
           /opt/testbed/wheels/*.whl; fi
LABEL org.testbed.image=lab
"""


class LabError(Exception):
    """The lab cannot be built or brought up; one sentence for the user."""


def lab_image() -> str:
    """The lab image's tag (built on first use on top of the node image)."""
    import hashlib

    node = build("debootstrap")
    recipe = hashlib.sha256(LAB_DOCKERFILE.encode()).hexdigest()[:8]
    tag = f"{LAB_REPO}:{node['tag'].split(':', 1)[1]}-{recipe}"
    return build_once(tag, LAB_DOCKERFILE, {"NODE_IMAGE": node["tag"]}, "lab")


def build_once(tag: str, dockerfile: str, buildargs: dict[str, str], label: str,
               files: dict[str, Path] | None = None, timeout: int = 900) -> str:
    """The image `tag`, built from `dockerfile` (plus `files` in its context, hard-linked
    when possible) unless the engine already holds it: images are tagged by content, so a
    tag that exists is the right image."""
    import shutil

    import docker as sdk

    docker = client(timeout=timeout)
    try:
        try:
            docker.images.get(tag)
            return tag
        except sdk.errors.ImageNotFound:
            pass
        with tempfile.TemporaryDirectory(prefix=f"tb-{label}-image-") as ctx:
            (Path(ctx) / "Dockerfile").write_text(dockerfile)
            for name, src in (files or {}).items():
                try:
                    (Path(ctx) / name).hardlink_to(src)
                except OSError:
                    shutil.copyfile(src, Path(ctx) / name)
            docker.images.build(path=ctx, tag=tag, buildargs=buildargs, rm=True, forcerm=True,
                                network_mode="host", labels={"org.testbed.image": label})
        return tag
    except (sdk.errors.BuildError, sdk.errors.APIError) as exc:
        raise LabError(f"building the {label} image failed: {short(exc)}") from None
    finally:
        docker.close()
