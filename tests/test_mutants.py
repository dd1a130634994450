"""The explorer's mutants (bench/mutants/): every patch applies to the tree as it is, names a
protocol of the catalogue, and plants its bug in protocol code only; the bench's seed chunks
cover the seeds asked for exactly once."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.mutants.__main__ import HERE, Mutant, chunks, mutants
from nodes.protocols import catalogue

ROOT = Path(__file__).resolve().parents[1]


def test_every_mutant_applies_cleanly_to_the_tree() -> None:
    for m in mutants():
        proc = subprocess.run(["git", "apply", "--check", str(m.patch)], cwd=ROOT,
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, f"{m.patch.name}: {proc.stderr.strip()}"


def test_mutants_name_their_protocol_and_touch_protocol_code_only() -> None:
    ms = mutants()
    assert len(ms) >= 15
    assert len({m.protocol for m in ms}) >= 8
    for m in ms:
        assert catalogue.find(m.protocol) is not None, m.name
        assert m.bug and "\n" not in m.bug
        assert m.files and all(f.startswith("nodes/protocols/") for f in m.files), m.name


def test_a_patch_without_its_header_line_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.patch"
    bad.write_text((HERE / "fifo-duplicate-delivered.patch").read_text().split("\n", 1)[1])
    try:
        Mutant.load(bad)
    except SystemExit as exc:
        assert "bad.patch:1: header" in str(exc)
    else:
        raise AssertionError("a patch without '# <protocol>: <bug>' was accepted")


def test_chunks_cover_each_seed_once() -> None:
    for total in (1, 10, 11, 500, 1234):
        seeds = [s for first, n in chunks(total) for s in range(first, first + n)]
        assert seeds == list(range(total))
