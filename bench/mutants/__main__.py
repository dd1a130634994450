"""Explorer mutation score: how many planted protocol bugs `testbed explore` finds.

Run from the repository root: ``python -m bench.mutants [--seeds N] [--only NAME]
[--workers N] [--world]``. Each `bench/mutants/*.patch` plants one realistic bug in one
protocol; its first line, ``# <protocol>: <the bug>``, names the protocol to explore. Per
mutant:

1. a scratch copy of HEAD (`git archive`, under a temporary directory; the real tree is never
   touched) with the patch applied (`git apply`);
2. `python -m testbed explore` of the nightly's base spec
   (experiments/nightly/sim-explore.yaml: two sites, 3 s at 20 msgs/s per host, up to 3
   drawn faults, the nightly's params of the protocol; `--world`: each seed's drawn world
   instead of the fixed set-up) with `--protocol`'s protocol, seeds
   0, 1, ... in growing chunks, `PYTHONPATH` the scratch copy, until a seed fails;
3. a failing seed kills the mutant unless the unmodified code (a second scratch copy of HEAD)
   fails that seed with the same checks: a bug HEAD has already is not the mutant's (the
   table names HEAD's checks when it fails the killing seed with others).

The simulator runs compiled when the patch leaves the compiled modules' sources
(nodes/fastpath.py `closure()`) alone and the real tree has a build for them (linked into the
copy); otherwise pure Python, which delivers the same logs, slower.

Per mutant the table says killed or not, the seeds explored up to the killing one, and the
failing checks (`livelock`, `node_errors`, `error` besides the claimed checks); the figure is
mutants killed / mutants.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BASE_SPEC = Path("experiments/nightly/sim-explore.yaml")
CHUNKS = (10, 30, 60, 100, 150, 150)  # then 150 a chunk: few session starts, early stops


@dataclass
class Mutant:
    name: str
    protocol: str
    bug: str
    patch: Path
    files: tuple[str, ...]

    @classmethod
    def load(cls, patch: Path) -> Mutant:
        lines = patch.read_text().splitlines()
        head = lines[0] if lines else ""
        protocol, _, bug = head.removeprefix("#").partition(":")
        if not head.startswith("#") or not bug.strip():
            raise SystemExit(f"{patch}:1: header: want '# <protocol>: <the bug>'")
        files = tuple(line[6:] for line in lines if line.startswith("+++ b/"))
        return cls(patch.stem, protocol.strip(), bug.strip(), patch, files)


@dataclass
class Result:
    mutant: Mutant
    killed: bool = False
    seeds: int = 0  # explored, up to the killing seed
    seed: int | None = None
    failing: list[str] = field(default_factory=list)
    shared: list[int] = field(default_factory=list)  # failing seeds HEAD fails alike
    head_failing: list[str] = field(default_factory=list)  # HEAD's checks on the killing seed
    compiled: bool = False
    wall_s: float = 0.0
    note: str = ""


def mutants() -> list[Mutant]:
    return [Mutant.load(p) for p in sorted(HERE.glob("*.patch"))]


def chunks(total: int) -> list[tuple[int, int]]:
    """(first seed, count) of each explore session covering seeds 0..total-1."""
    out: list[tuple[int, int]] = []
    first, k = 0, 0
    while first < total:
        n = min(CHUNKS[k] if k < len(CHUNKS) else CHUNKS[-1], total - first)
        out.append((first, n))
        first += n
        k += 1
    return out


def scratch_copy(dest: Path) -> None:
    """HEAD's tree at `dest`."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def link_build(copy: Path, touched: tuple[str, ...]) -> bool:
    """Link the real tree's compiled build into `copy` when the patch leaves its sources
    alone and the build exists; True when the copy runs compiled."""
    sys.path.insert(0, str(ROOT))
    try:
        from nodes import fastpath
    finally:
        sys.path.pop(0)
    compiled = {m.replace(".", "/") + ".py" for m in fastpath.closure(ROOT)}
    if compiled & set(touched):
        return False
    build = ROOT / "build" / "mypyc" / fastpath.key(ROOT)
    if not (build / fastpath.OK).exists():
        return False
    (copy / "build" / "mypyc").mkdir(parents=True, exist_ok=True)
    (copy / "build" / "mypyc" / build.name).symlink_to(build)
    return True


def write_spec(copy: Path, protocol: str, world: bool = False) -> Path:
    """The nightly explore spec for one protocol (its nightly params), next to the original
    so that the topology's relative path holds. Fault schedules on the nightly's fixed set-up
    (`world: false`), the mode the score in docs/benchmarks.md measures, or with `world`
    each seed's drawn world (docs/explore.md "Worlds")."""
    data = yaml.safe_load((copy / BASE_SPEC).read_text())
    nightly = data.pop("nightly", {}) or {}
    data.setdefault("explore", {})["world"] = world
    params = (nightly.get("params") or {}).get(protocol) or {}
    data["protocol"] = {"name": protocol, **({"params": params} if params else {})}
    spec = copy / BASE_SPEC.parent / f"mutant-{protocol}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def explore(copy: Path, spec: Path, first: int, count: int, workers: int, out: Path
            ) -> list[dict[str, object]]:
    """Rows of seeds.parquet of one `testbed explore` session in `copy`, in seed order."""
    import pyarrow.parquet as pq

    env = {**os.environ, "PYTHONPATH": str(copy)}
    cmd = [sys.executable, "-m", "testbed", "explore", str(spec), "--seeds", str(count),
           "--first-seed", str(first), "--workers", str(workers), "--shrink", "0",
           "--out", str(out)]
    proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 1) or not (out / "seeds.parquet").exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        raise RuntimeError(f"explore exited {proc.returncode}: {' '.join(tail)}")
    rows = pq.read_table(out / "seeds.parquet").to_pylist()
    shutil.rmtree(out, ignore_errors=True)
    return sorted(rows, key=lambda r: int(r["seed"]))


def failing_of(row: dict[str, object]) -> list[str]:
    names = [str(c) for c in (row.get("failing") or [])]  # type: ignore[attr-defined]
    return names or (["error"] if row.get("error") else ["?"])


class Baseline:
    """HEAD's verdicts on the seeds a mutant fails, one scratch copy per bench run."""

    def __init__(self, tmp: Path, workers: int, world: bool = False):
        self.copy = tmp / "head"
        scratch_copy(self.copy)
        self.compiled = link_build(self.copy, ())
        self.tmp, self.workers, self.world = tmp, workers, world
        self.cache: dict[tuple[str, int], list[str]] = {}

    def failing(self, protocol: str, seed: int) -> list[str]:
        """[] when HEAD passes the seed."""
        key = (protocol, seed)
        if key not in self.cache:
            spec = write_spec(self.copy, protocol, self.world)
            row = explore(self.copy, spec, seed, 1, 1, self.tmp / "head-out")[0]
            self.cache[key] = [] if row["ok"] else failing_of(row)
        return self.cache[key]


def run_mutant(m: Mutant, seeds: int, workers: int, baseline: Baseline, tmp: Path) -> Result:
    began = time.monotonic()
    res = Result(m)
    copy = tmp / m.name
    scratch_copy(copy)
    try:
        subprocess.run(["git", "apply", str(m.patch)], cwd=copy, check=True,
                       capture_output=True, text=True)
        res.compiled = link_build(copy, m.files)
        spec = write_spec(copy, m.protocol, baseline.world)
        for first, count in chunks(seeds):
            for row in explore(copy, spec, first, count, workers, tmp / "out"):
                seed = int(row["seed"])  # type: ignore[call-overload]
                res.seeds = seed + 1
                if row["ok"]:
                    continue
                failing = failing_of(row)
                head = baseline.failing(m.protocol, seed)
                if head == failing:
                    res.shared.append(seed)
                    continue
                res.killed, res.seed, res.failing, res.head_failing = True, seed, failing, head
                return res
    except (subprocess.CalledProcessError, RuntimeError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        res.note = detail.strip().splitlines()[-1] if detail.strip() else str(exc)
    finally:
        res.wall_s = time.monotonic() - began
        shutil.rmtree(copy, ignore_errors=True)
    return res


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mutants")
    parser.add_argument("--seeds", type=int, default=500, help="seeds per mutant at most")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="this mutant only (repeatable)")
    parser.add_argument("--workers", type=int, default=1, help="explore worker processes")
    parser.add_argument("--world", action="store_true",
                        help="explore drawn worlds (`world: true`), not the fixed set-up")
    args = parser.parse_args()
    todo = mutants()
    if args.only:
        unknown = sorted(set(args.only) - {m.name for m in todo})
        if unknown:
            raise SystemExit(f"--only: no mutant {unknown[0]} in {HERE}")
        todo = [m for m in todo if m.name in args.only]
    tmp = Path(tempfile.mkdtemp(prefix="bench-mutants-"))
    results: list[Result] = []
    try:
        baseline = Baseline(tmp, args.workers, args.world)
        for m in todo:
            res = run_mutant(m, args.seeds, args.workers, baseline, tmp)
            results.append(res)
            mark = (f"killed at seed {res.seed} ({', '.join(res.failing)})" if res.killed
                    else f"survived {res.seeds} seeds {res.note}")
            print(f"  {m.name}: {mark}, {res.wall_s:.0f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'mutant':40} {'protocol':17} {'killed':6} {'seeds':>5}  by")
    for r in results:
        by = ", ".join(r.failing) if r.killed else (r.note or "-")
        if r.head_failing:
            by += f" (HEAD fails this seed too: {', '.join(r.head_failing)})"
        if r.shared:
            by += f" (seeds HEAD fails alike: {', '.join(map(str, r.shared))})"
        print(f"{r.mutant.name:40} {r.mutant.protocol:17} {'yes' if r.killed else 'NO':6} "
              f"{r.seeds:5}  {by}")
    killed = sum(r.killed for r in results)
    print(f"mutants killed within {args.seeds} seeds: {killed} / {len(results)} "
          f"(load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
