"""Property-based fuzzing of topology and experiment specs (docs/security.md): whatever it holds,
loading it either succeeds or raises SpecError whose every line is `file:line: field: message`;
never a traceback, and nothing is created next to the spec. Bounded: seconds per test."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.spec.loader import SpecError, load_experiment, load_topology

ROOT = Path(__file__).resolve().parents[1]
TOPO = yaml.safe_load((ROOT / "topologies" / "two-sites.yaml").read_text())
EXP = {**yaml.safe_load((ROOT / "experiments" / "quickstart.yaml").read_text()),
       "topology": "topo.yaml"}
LINE = re.compile(r"^.+:\d+: [^\n]+: [^\n]+$")

text_nasty = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["a\x00b", "\x00", "../" * 40, "/dev/zero", "h1", "h9", "1e999s", "-5ms", "10ms", "nan",
     "1/s", "999999999999999999999999/s", "0.5%", "150%", "sequencer", "x" * 5000, "∞"])
scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats()
           | text_nasty)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(text_nasty, inner, max_size=3), max_leaves=8)
SETTINGS = settings(max_examples=200, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def mutated(draw: Any, base: dict[str, Any]) -> Any:
    """The spec with a few of its values replaced, keys dropped or keys added."""
    doc: Any = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        action = draw(st.sampled_from(["replace", "drop", "add"]))
        if not path:
            if action == "replace":
                doc = draw(values)
            continue
        parent = doc
        try:
            for part in path[:-1]:
                parent = parent[part]
            if action == "replace":
                parent[path[-1]] = draw(values)
            elif action == "drop":
                del parent[path[-1]]
            elif isinstance(parent, dict):
                parent[draw(text_nasty)] = draw(values)
        except (KeyError, IndexError, TypeError):
            continue
    return doc


def _check(tmp: Path, load: Any, name: str) -> None:
    before = sorted(p.name for p in tmp.iterdir())
    try:
        load(tmp / name)
    except SpecError as exc:
        lines = str(exc).split("\n")
        assert lines and all(LINE.match(line) for line in lines), str(exc)
        assert all(line.startswith(str(tmp / name)) or line.startswith(str(tmp / "topo.yaml"))
                   for line in lines), str(exc)
    assert sorted(p.name for p in tmp.iterdir()) == before, "loading created files"


def _dump(doc: Any) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


@SETTINGS
@given(doc=mutated(TOPO))
def test_mutated_topologies_load_or_give_located_lines(tmp_path: Path, doc: Any) -> None:
    (tmp_path / "topo.yaml").write_text(_dump(doc))
    _check(tmp_path, load_topology, "topo.yaml")


@SETTINGS
@given(doc=mutated(EXP))
def test_mutated_experiments_load_or_give_located_lines(tmp_path: Path, doc: Any) -> None:
    (tmp_path / "topo.yaml").write_text(_dump(TOPO))
    (tmp_path / "exp.yaml").write_text(_dump(doc))
    _check(tmp_path, load_experiment, "exp.yaml")


@SETTINGS
@given(cut=st.integers(0, 2000), junk=st.binary(max_size=24))
def test_corrupted_spec_bytes_give_located_lines(tmp_path: Path, cut: int, junk: bytes) -> None:
    text = _dump(EXP).encode()
    cut %= len(text) + 1
    (tmp_path / "topo.yaml").write_text(_dump(TOPO))
    (tmp_path / "exp.yaml").write_bytes(text[:cut] + junk + text[cut:])
    _check(tmp_path, load_experiment, "exp.yaml")


def test_a_nul_byte_in_the_topology_path_is_one_located_line(tmp_path: Path) -> None:
    (tmp_path / "exp.yaml").write_text(_dump({**EXP, "topology": "a\x00b.yaml"}))
    try:
        load_experiment(tmp_path / "exp.yaml")
    except SpecError as exc:
        assert str(exc).startswith(f"{tmp_path / 'exp.yaml'}:") and "topology" in str(exc)
        assert "\n" not in str(exc)
    else:
        raise AssertionError("a NUL byte in a path loaded")
