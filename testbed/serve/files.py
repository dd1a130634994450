"""The files `testbed serve` hands out: any file under a served folder, by its path relative
to that folder, except what would leave it (`..`, absolute paths, symlinks pointing out) and
the run's secrets (docs/serve.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

# A run's management bearer token and Basic credential, its transport key (testbed/rundir.py),
# `testbed serve`'s own credentials: never served, whatever their mode.
SECRET_NAMES = frozenset({"token", "mgmt.basic", "basic", "transport.key"})
SECRET_SUFFIXES = (".key",)  # private keys of testbed/certs.py (`certs/<host>.key`, `ca.key`)
PRIVATE_KEY_MARK = b"PRIVATE KEY-----"


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`; {} for anything else or nothing."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping from `path`; {} for anything else or nothing."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def is_secret(path: Path) -> bool:
    """A credential or private key: by name (SECRET_NAMES, SECRET_SUFFIXES), by mode (readable
    by its owner only, as testbed writes every secret: 0600) or by content (a PEM private
    key)."""
    if path.name in SECRET_NAMES or path.name.endswith(SECRET_SUFFIXES):
        return True
    try:
        if path.stat().st_mode & 0o077 == 0:
            return True
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return True
    return PRIVATE_KEY_MARK in head


def safe_file(roots: list[Path], rel: str) -> Path | None:
    """The file `rel` names under one of the folders, or None: `..` segments, absolute paths,
    anything resolving outside its folder and secrets (`is_secret`) are refused."""
    if not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel:
        return None
    parts = rel.split("/")
    if any(p in ("..", ".") for p in parts):
        return None
    for root in roots:
        base = root.resolve()
        target = (base / rel).resolve()
        if not target.is_relative_to(base):
            continue
        if target.is_dir() and (target / "index.html").is_file():
            target = target / "index.html"
        if target.is_file():
            return None if is_secret(target) else target
    return None
