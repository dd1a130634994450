# The node image of the `docker` backend: `python -m nodes` plus what a host of the emulated
# WAN needs (iproute2/tc, iptables, tcpdump) and the userspace shaper (NFQUEUE delay line) for
# kernels without sch_netem. `testbed image build` builds it; with no registry reachable it
# passes a debootstrap base (testbed/images.py) as BASE_IMAGE, which already holds the Debian
# packages, so no step below needs the network then.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# python:3.11-slim lacks the tools; a debootstrap base has them (the test keeps builds offline).
RUN if ! command -v tc >/dev/null || ! command -v iptables >/dev/null \
        || ! command -v tcpdump >/dev/null; then \
      apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        iproute2 iptables tcpdump libnetfilter-queue1 && rm -rf /var/lib/apt/lists/*; \
    fi

# Debian packages beyond the base, as .deb files in the context (testbed/images.py NODE_DEBS):
# libfaketime, preloaded into a Maelstrom program for the clock nemesis (docs/maelstrom.md).
COPY debs/ /opt/testbed/debs/
RUN if ls /opt/testbed/debs/*.deb >/dev/null 2>&1; then \
      dpkg -i /opt/testbed/debs/*.deb >/dev/null; \
    fi; rm -rf /opt/testbed/debs

# A venv that sees the system site-packages (Debian's numpy in the debootstrap base) and
# provides the `python` command the backend runs.
COPY wheels/ /opt/testbed/wheels/
RUN (command -v python3 || ln -s "$(command -v python)" /usr/local/bin/python3) \
    && python3 -m venv --system-site-packages /opt/testbed/venv \
    && if ls /opt/testbed/wheels/*.whl >/dev/null 2>&1; then \
         /opt/testbed/venv/bin/pip install --no-index --no-cache-dir /opt/testbed/wheels/*.whl; \
       fi \
    && /opt/testbed/venv/bin/python -c "import numpy" 2>/dev/null \
       || /opt/testbed/venv/bin/pip install --no-cache-dir numpy

COPY app/ /opt/testbed/app/
# Bytecode compiled here: the nodes run with PYTHONDONTWRITEBYTECODE, and compiling `nodes/` at
# every container start cost seconds of a loaded machine (the workload began without them).
RUN python3 -m compileall -q /opt/testbed/app
ENV PATH=/opt/testbed/venv/bin:$PATH \
    PYTHONPATH=/opt/testbed/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
LABEL org.testbed.image=node
WORKDIR /run/testbed
CMD ["python", "-m", "nodes", "--help"]
