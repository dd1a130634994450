"""Load YAML specs and report every problem as `file:line: field: message`.

YAML is composed into a node tree first so each pydantic error location can be mapped back to
the line it came from; nothing is created until a spec loads cleanly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from analysis.expect import parse_expectation, schema_problem
from nodes.protocols import catalogue
from testbed.spec import messages
from testbed.spec.experiment import BACKENDS, ExperimentSpec, check_experiment
from testbed.spec.qos import check_model
from testbed.spec.topology import Loc, TopologySpec, check_link_model, check_topology

M = TypeVar("M", bound=BaseModel)


class SpecError(Exception):
    """One or more located problems in a spec; str() gives one line per problem."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Document:
    path: Path
    data: Any
    root: yaml.Node | None

    def line_of(self, loc: Loc) -> int:
        node = self.root
        line = node.start_mark.line + 1 if node is not None else 1
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    if key.value == str(part):
                        node = value
                        line = key.start_mark.line + 1
                        break
                else:
                    return line
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
                if part >= len(node.value):
                    return line
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                return line
        return line

    def error(self, loc: Loc, message: str, prefix: Loc = ()) -> str:
        full = prefix + loc
        field = _one_line(".".join(str(p) for p in full)) if full else "(top)"
        return f"{self.path}:{self.line_of(full)}: {field}: {_one_line(message)}"


def read_document(path: Path) -> Document:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SpecError([f"{path}:1: (file): no such file"]) from None
    except OSError as exc:
        raise SpecError([f"{path}:1: (file): cannot read: {exc.strerror}"]) from None
    except UnicodeDecodeError as exc:
        raise SpecError([f"{path}:1: (file): not UTF-8 text ({exc.reason} at byte "
                         f"{exc.start})"]) from None
    except ValueError as exc:  # a NUL byte in the path
        raise SpecError([f"{path!r}:1: (file): bad path: {exc}"]) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.load(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise SpecError([f"{path}:{line}: (yaml): {_one_line(str(exc.problem or exc.context))}"]
                        ) from None
    except yaml.YAMLError as exc:
        raise SpecError([f"{path}:1: (yaml): {_one_line(str(exc))}"]) from None
    except RecursionError:
        raise SpecError([f"{path}:1: (yaml): nested too deeply"]) from None
    if not isinstance(data, dict):
        raise SpecError([f"{path}:1: (top): expected a mapping of fields, got "
                         f"{type(data).__name__}"])
    return Document(path, data, root)


def _one_line(text: str) -> str:
    """A message on one line (YAML and pydantic messages may quote multi-line input)."""
    return " ".join(text.split()) or "invalid"


def validate(doc: Document, model: type[M], data: Any, prefix: Loc = ()) -> M:
    try:
        return model.model_validate(data, context={"defer_checks": True})
    except ValidationError as exc:
        problems = []
        seen = set()
        for loc, message in messages.problems(model, data, exc):
            line = doc.error(loc, message, prefix)
            if line not in seen:
                seen.add(line)
                problems.append(line)
        raise SpecError(problems) from None


def load_topology(path: Path) -> TopologySpec:
    doc = read_document(path)
    topo = validate(doc, TopologySpec, doc.data)
    problems = check_topology(topo)
    if problems:
        raise SpecError([doc.error(loc, msg) for loc, msg in problems])
    return topo


def load_experiment(
    path: Path, backend: str | None = None, engine: str = "spark"
) -> tuple[ExperimentSpec, TopologySpec]:
    """Load an experiment and its topology (inline, or a path relative to the experiment);
    `backend` (`--backend`) overrides the spec's. `engine`: how the run is to be judged
    (analysis/judge.py `ENGINES`): an `expect:` line it cannot judge is an error now, before
    anything starts."""
    if backend is not None and backend not in BACKENDS:  # the flag's error, not the file's
        raise SpecError([f"--backend: {backend!r} is not one of {', '.join(BACKENDS)}"])
    doc = read_document(path)
    data = dict(doc.data)
    if backend is not None:
        data["backend"] = backend
    expect_errors(doc, data.get("expect"), spark=True)
    exp = validate(doc, ExperimentSpec, data)
    if engine != "spark" or exp.maelstrom:  # judged in-process (analysis/judge.py)
        expect_errors(doc, exp.expect, spark=False)
    if isinstance(exp.topology, TopologySpec):
        topo = exp.topology
        located = [doc.error(loc, msg, ("topology",)) for loc, msg in check_topology(topo)]
        if located:
            raise SpecError(located)
    else:
        try:
            topo_path = (path.parent / exp.topology).resolve()
            found = topo_path.is_file()
        except (OSError, ValueError) as exc:  # a NUL byte, a name too long, a symlink loop
            raise SpecError([doc.error(("topology",), f"bad topology path {exp.topology!r}: "
                                       f"{_one_line(str(exc))}")]) from None
        if not found:
            raise SpecError([doc.error(("topology",), f"topology file {exp.topology} not "
                                       f"found (looked at {topo_path})")])
        topo_doc = read_document(topo_path)
        topo = load_topology(topo_path)
    cross = [doc.error(loc, msg) for loc, msg in check_experiment(exp, topo)]
    # Link keys the backend cannot realise, located in whichever file holds the topology.
    unrealisable = check_link_model(topo, exp.backend, exp.transport)
    # A bound's model (catalogue `Model`): the topology's part located like the link keys.
    entry = catalogue.find(exp.protocol.name)
    if entry is not None and not exp.outside_model and not cross and not unrealisable:
        topo_model, exp_model = check_model(entry, exp.protocol.params, topo, exp.faults,
                                            exp.workload.size)
        unrealisable = unrealisable + topo_model
        cross += [doc.error(loc, msg) for loc, msg in exp_model]
    if isinstance(exp.topology, TopologySpec):
        cross += [doc.error(loc, msg, ("topology",)) for loc, msg in unrealisable]
    else:
        cross += [topo_doc.error(loc, msg) for loc, msg in unrealisable]
    if exp.node is not None and not cross:
        exp, problems = _resolve_program(doc, exp)
        cross += problems
    if cross:
        raise SpecError(cross)
    return exp, topo


def expect_errors(doc: Document, lines: Any, spark: bool) -> None:
    """Raise SpecError with one `file:line: expect[i]: ...` per `expect:` line that cannot be
    judged: not `PATH OP NUMBER`, a path summary.json never has, a value that cannot compare
    (analysis/expect.py `schema_problem`)."""
    if not isinstance(lines, list):
        return  # not a list: the model's validation says so
    problems = []
    for i, text in enumerate(lines):
        if not isinstance(text, str):
            continue
        try:
            problem = schema_problem(parse_expectation(text), spark)
        except ValueError as exc:
            problem = str(exc)
        if problem is not None:
            problems.append(f"{doc.path}:{doc.line_of(('expect', i))}: expect[{i}]: "
                            f"{_one_line(problem)}")
    if problems:
        raise SpecError(problems)


def _resolve_program(doc: Document, exp: ExperimentSpec) -> tuple[ExperimentSpec, list[str]]:
    """`node.program` arguments that name files next to the experiment become absolute (the
    program runs from the run's working directory); the program itself must exist, as a file
    there or as a command on PATH (docs/maelstrom.md)."""
    import shutil

    assert exp.node is not None
    argv = list(exp.node.program)
    for i, arg in enumerate(argv):
        try:
            near = (doc.path.parent / arg)
            if not Path(arg).is_absolute() and arg and near.is_file():
                argv[i] = str(near.resolve())
        except (OSError, ValueError):
            continue
    exe = argv[0]
    if not (Path(exe).is_file() if "/" in exe else shutil.which(exe)):
        return exp, [doc.error(("node", "program", 0), f"no program {exe!r} (not a file "
                               "next to the experiment, not a command on PATH)")]
    if exp.backend == "docker":
        from testbed.maelstrom import is_nodejs

        if is_nodejs(argv):
            return exp, [doc.error(("node", "program", 0), "the docker backend's node image "
                                   "has no Node.js; run JavaScript programs on local or "
                                   "mininet")]
    node = exp.node.model_copy(update={"program": argv})
    return exp.model_copy(update={"node": node}), []
