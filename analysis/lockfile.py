"""spec.lock.yaml of a run directory (testbed/runner.py `write_lock`), parsed once.

Judging one run reads the lock from several places (the verdict's fault model, the QoS
section's protocol and backend, the host clocks); `testbed explore` judges thousands of runs,
and the pure-Python YAML loader took ~0.03 s per parse of a quickstart lock. `read_lock`
parses with libyaml's loader when PyYAML has it and caches the document by path,
modification time and size, so a rewritten lock is read again. The document is shared:
callers must not modify it.

`lock_paths` reads the configured paths of a lock in either form: `paths_by_site_ms` (by site
pair, testbed/pathcheck.py `lock_paths`) or, in older locks, `paths_ms` (one entry per host
pair).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

LOCK_FILE = "spec.lock.yaml"
Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_lock(run_dir: Path) -> dict[str, Any]:
    """The run's spec.lock.yaml as a dict; {} when there is none (or it is not a mapping).
    A malformed file raises yaml.YAMLError."""
    path = Path(run_dir) / LOCK_FILE
    try:
        st = path.stat()
    except OSError:
        return {}
    return _parse(str(path), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=16)
def _parse(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError:
        return {}
    doc = yaml.load(text, Loader=Loader)  # noqa: S506 -- a safe loader (C or Python)
    return doc if isinstance(doc, dict) else {}


def lock_paths(lock: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Every ordered host pair's configured path (`delay`, `jitter` in ms, `loss`,
    `bandwidth_bps`) from a lock document; malformed entries are left out."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    old = lock.get("paths_ms")
    if isinstance(old, dict):
        for key, p in old.items():
            a, sep, b = str(key).partition("->")
            if sep and isinstance(p, dict):
                out[(a, b)] = p
    compact = lock.get("paths_by_site_ms")
    if not isinstance(compact, dict):
        return out
    hosts, sites, pairs = (compact.get(k) for k in ("hosts", "sites", "pairs"))
    if not isinstance(hosts, dict) or not isinstance(sites, dict):
        return out
    for a, sa in hosts.items():
        for b, sb in hosts.items():
            p = sites.get(f"{sa}->{sb}")
            if a != b and isinstance(p, dict):
                out[(str(a), str(b))] = p
    for key, p in (pairs if isinstance(pairs, dict) else {}).items():
        a, sep, b = str(key).partition("->")
        if sep and isinstance(p, dict):
            out[(a, b)] = p
    return out
