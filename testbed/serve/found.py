"""What is under the folders `testbed serve` serves: run directories and explorations (the
rows of the runs table) and nightly trend reports, looked for a few levels deep."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.serve.explorations import exploration_row, is_exploration
from testbed.serve.runs import cached_row, is_run

MAX_DEPTH = 4  # how deep under a folder runs, nightlies and explorations are looked for


def walk(root: Path, depth: int = MAX_DEPTH) -> list[Path]:
    """Directories under `root` (itself included), `depth` levels deep, symlinks not
    followed, hidden ones skipped, in name order; the insides of a run directory or an
    exploration are not entered (an exploration's runs are on its own page)."""
    out: list[Path] = []
    stack = [(root, 0)]
    while stack:
        d, level = stack.pop()
        out.append(d)
        if level >= depth or is_run(d) or is_exploration(d):
            continue
        try:
            children = sorted((p for p in d.iterdir() if p.is_dir() and not p.is_symlink()),
                              reverse=True)
        except OSError:
            continue
        stack += [(c, level + 1) for c in children if not c.name.startswith(".")]
    return out


@dataclass(frozen=True)
class Found:
    runs: list[dict[str, Any]]  # runs and explorations, newest first
    nightly: list[dict[str, Any]]


def _join(rel: str, name: str) -> str:
    return name if rel in ("", ".") else f"{rel}/{name}"


def scan(roots: list[Path]) -> Found:
    runs: list[dict[str, Any]] = []
    nightly: list[dict[str, Any]] = []
    seen: set[str] = set()
    for root in roots:
        for d in walk(root):
            rel = d.relative_to(root).as_posix()
            if rel in seen:
                continue
            if is_run(d):
                seen.add(rel)
                runs.append(cached_row(root, d))
            elif is_exploration(d):
                seen.add(rel)
                runs.append(exploration_row(root, d))
            elif (d / "nightly.html").is_file():
                nightly.append({"path": _join(rel, "nightly.html"), "name": rel})
    runs.sort(key=lambda r: (r["date"], r["run"]), reverse=True)
    return Found(runs, nightly)
