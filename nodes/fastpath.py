"""The simulator's compiled hot path (docs/architecture.md, "Compiled hot path").

The modules in `MODULES` -- the discrete-event loop, the node core, the wire format, the
delivery-log writer and the sequencer-over-reliable-FIFO stack it drives -- are compiled with
mypyc into native extension modules. Safety rules:

- The artefacts never live next to the sources (a stale .so beside an edited .py would
  shadow it): `build()` writes them to `build/mypyc/<key>/`, where the key hashes every
  compiled source, every module of `nodes/` they import (transitively: `closure()`; mypyc
  compiles against those modules' types, so a changed `NodeConfig` field type must not load
  an old build), the Python ABI and the mypyc version; `activate()` loads them only from
  the directory of the *current* sources' key, through an import hook for exactly those
  module names. No such build: pure Python, with a one-line note on stderr.
- `TESTBED_PURE_PYTHON=1` forces the pure path (it also forces asyncio over uvloop,
  nodes/loop.py).
- A build that fails (no compiler, mypyc missing, a type error) leaves the pure path working:
  `python -m nodes.fastpath build` reports it in one line and exits 0 (`make venv` runs it).

`python -m nodes.fastpath build|status`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
# What is compiled: the simulator's per-event path as the 30-host bench case exercises it
# (bench/sim_speed.py). Order matters for nothing; names are module names under ROOT.
MODULES = (
    "nodes.sim",
    "nodes.core",
    "nodes.eventlog",
    "nodes.wire",
    "nodes.clock",
    "nodes.edge",
    "nodes.linkmodel",
    "nodes.protocols.base",
    "nodes.protocols.reliable",
    "nodes.protocols.sequencer",
    "nodes.protocols.failure_detector",
)
GROUP = "testbed_hotpath"  # mypyc's shared library: `testbed_hotpath__mypyc`
LIB = f"{GROUP}__mypyc"
OK = "BUILD_OK"  # written last: a directory without it is an unfinished build
PURE_ENV = "TESTBED_PURE_PYTHON"

_state: dict[str, bool] = {}


def sources(root: Path = ROOT) -> list[Path]:
    return [root / (m.replace(".", "/") + ".py") for m in MODULES]


def _module_file(root: Path, name: str) -> Path | None:
    """The source of module `name` under `root` (a package's `__init__.py`), or None."""
    base = root / name.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


# Import statements, found by a scan rather than a parse: the key is computed at every
# simulator start, and parsing the ~50 modules of the closure with `ast` took 0.2 s; the scan
# takes a few ms. It may see an import where there is none (a docstring line starting with
# `import`): a module more in the key, never one less.
_FROM = re.compile(rb"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]*)", re.M)
_IMPORT = re.compile(rb"^[ \t]*import[ \t]+([^\n#]+)", re.M)


def _imports(root: Path, name: str, path: Path) -> set[str]:
    """The `nodes.*` modules that the source `path` of module `name` imports: every import
    statement, at module level or inside a function or `if TYPE_CHECKING:` (mypyc compiles
    against all of them), with each importing package's `__init__` too."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    data = path.read_bytes()
    targets: list[str] = []
    for m in _IMPORT.finditer(data):
        targets += [w.split()[0] for w in m.group(1).decode().split(",") if w.split()]
    for m in _FROM.finditer(data):
        module = m.group(1).decode()
        level = len(module) - len(module.lstrip("."))
        if level:
            parts = package.split(".")
            parent = ".".join(parts[:len(parts) - level + 1])
            module = f"{parent}.{module[level:]}" if module[level:] else parent
        targets.append(module)
        # `from nodes.protocols import catalogue` imports a module, not a name
        names = re.sub(r"#[^\n]*", "", m.group(2).decode()).strip("()").replace("\\", " ")
        for word in names.split(","):
            alias = word.split()
            if alias and _module_file(root, f"{module}.{alias[0]}") is not None:
                targets.append(f"{module}.{alias[0]}")
    found: set[str] = set()
    for target in targets:
        parts = target.split(".")
        if parts[0] != "nodes":
            continue
        for i in range(1, len(parts) + 1):  # the packages on the way run too
            if _module_file(root, ".".join(parts[:i])) is not None:
                found.add(".".join(parts[:i]))
    return found


def closure(root: Path = ROOT) -> tuple[str, ...]:
    """`MODULES` and every module of `nodes/` they import, directly or not, sorted."""
    compiled = dict(zip(MODULES, sources(root), strict=True))
    seen: set[str] = set()
    todo = list(MODULES)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = compiled.get(name) or _module_file(root, name)
        if path is not None:
            todo.extend(_imports(root, name, path) - seen)
    return tuple(sorted(seen))


def key(root: Path = ROOT) -> str:
    """Hash of the compiled sources, of every `nodes/` module they import (`closure`), of the
    interpreter's ABI and of the compiler's version."""
    h = hashlib.sha256()
    h.update(f"{sys.implementation.cache_tag} {sysconfig.get_config_var('EXT_SUFFIX')}\n"
             .encode())
    h.update(_mypyc_version().encode() + b"\n")
    for name, path in zip(MODULES, sources(root), strict=True):
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    for name in closure(root):
        if name in MODULES:
            continue
        imported = _module_file(root, name)
        assert imported is not None  # closure() keeps only modules with a source
        h.update(name.encode() + b"\0" + imported.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def _mypyc_version() -> str:
    try:
        from mypy.version import __version__
    except ImportError:
        return "none"
    return __version__


def build_dir() -> Path:
    return ROOT / "build" / "mypyc" / key()


def active() -> bool:
    """Whether this process runs the compiled modules."""
    return _state.get("active", False)


def _note(text: str) -> None:
    print(f"nodes.fastpath: {text}", file=sys.stderr, flush=True)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds exactly the compiled modules (and mypyc's shared library) in one build dir."""

    def __init__(self, files: dict[str, Path]):
        self.files = files

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(file))
        return importlib.util.spec_from_file_location(fullname, file, loader=loader)


def activate(quiet: bool = False) -> bool:
    """Load the compiled hot path if it was built from the current sources; call before
    anything imports the modules in `MODULES`. Returns whether it is active; on any
    failure the pure-Python modules run, with a one-line note (unless `quiet`)."""
    if _state.get("active"):
        return True
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return False
    early = [m for m in MODULES if m in sys.modules]
    if early:
        if not quiet:
            _note(f"{early[0]} was imported before activation: pure Python")
        return False
    where = build_dir()
    files = {m: where / (m.replace(".", "/") + _suffix()) for m in (*MODULES, LIB)}
    if not (where / OK).exists() or not all(f.exists() for f in files.values()):
        if not quiet:
            _note("no compiled hot path for the current sources (`make venv` or "
                  "`python -m nodes.fastpath build`): pure Python")
        return False
    finder = _Finder(files)
    sys.meta_path.insert(0, finder)
    try:
        for m in MODULES:
            importlib.import_module(m)
    except Exception as exc:  # a broken or foreign build: forget it, run pure
        sys.meta_path.remove(finder)
        for m in (*MODULES, LIB):
            sys.modules.pop(m, None)
        if not quiet:
            _note(f"compiled hot path failed to load ({type(exc).__name__}: {exc}): "
                  "pure Python")
        return False
    _state["active"] = True
    return True


def build(jobs: int = 2) -> bool:
    """Compile `MODULES` into `build/mypyc/<key>/` (nothing to do if it exists). Never raises:
    a failure is one line on stderr and the pure path stays."""
    where = build_dir()
    if (where / OK).exists():
        print(f"nodes.fastpath: compiled hot path up to date ({where.relative_to(ROOT)})")
        return True
    try:
        import mypyc  # noqa: F401
    except ImportError:
        _note("mypyc is not installed: the simulator runs pure Python")
        return False
    if shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var(
            "CC") else "cc") is None:
        _note("no C compiler: the simulator runs pure Python")
        return False
    where.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tmp-", dir=where.parent) as tmp:
        # mypyc reads the sources in place (it type-checks them against the rest of the
        # repository); its C files, objects and the built modules all go to `tmp`, and only
        # a complete build is moved to its key's directory.
        work = Path(tmp)
        script = work / "setup_mypyc.py"
        script.write_text(SETUP.format(files=[str(p.relative_to(ROOT)) for p in sources()],
                                       group=GROUP, c_dir=str(work / "c")))
        out = work / "out"
        cmd = [sys.executable, str(script), "build_ext", "--build-lib", str(out),
               "--build-temp", str(work / "obj"), "-j", str(jobs)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not all(
                (out / (m.replace(".", "/") + _suffix())).exists() for m in (*MODULES, LIB)):
            tail = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
            (where.parent / "last-failure.log").write_text(proc.stdout + proc.stderr)
            _note(f"mypyc build failed ({tail[-1] if tail else 'no output'}; see "
                  "build/mypyc/last-failure.log): the simulator runs pure Python")
            return False
        (out / OK).write_text(key() + "\n")
        if where.exists():
            shutil.rmtree(where)
        shutil.move(str(out), str(where))
    print(f"nodes.fastpath: compiled hot path built ({where.relative_to(ROOT)})")
    return True


# Run inside the temporary copy: mypyc type-checks with the repository's mypy settings.
SETUP = """
import sys
from setuptools import setup
from mypyc.build import mypycify
setup(name="testbed-hotpath", script_args=sys.argv[1:], ext_modules=mypycify(
    {files!r}, group_name={group!r}, multi_file=True, target_dir={c_dir!r}))
"""


def _suffix() -> str:
    return str(sysconfig.get_config_var("EXT_SUFFIX") or ".so")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["build"]:
        build()
        return 0  # never fail a set-up: the pure path works without the build
    if args[:1] == ["status"]:
        on = activate()
        print(f"compiled hot path: {'active' if on else 'not active'} ({build_dir()})")
        return 0
    print("usage: python -m nodes.fastpath build|status", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
