"""`--help` of every command and group: an example of its own, value names that say what to
give (never Typer's `<bool>`/`<str>`), one default statement, no path of this machine."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner

from testbed.cli import app
from tests.inproc import ROOT, run_cli


def commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command and group under `cmd`, with the words that name it."""
    yield path, cmd
    if hasattr(cmd, "list_commands"):
        ctx = typer._click.Context(cmd)
        for name in cmd.list_commands(ctx):
            yield from commands(cmd.get_command(ctx, name), (*path, name))


def help_of(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, (path, result.output)
    return result.output


ALL = list(commands(typer.main.get_command(app)))


def test_the_walk_sees_every_group_and_its_commands() -> None:
    paths = {" ".join(p) for p, _ in ALL}
    for name in ("run", "fault", "fault partition", "topology import", "maelstrom test",
                 "lab down", "spark down", "image build", "nightly"):
        assert name in paths
    assert len(paths) > 35


def test_every_command_and_group_has_an_example_of_its_own() -> None:
    missing = []
    for path, cmd in ALL:
        own = cmd.help or ""  # the command's own text, not a subcommand's summary
        if not re.search(r"Examples?:", own) or not re.search(r"Examples?:", help_of(path)):
            missing.append(" ".join(path) or "(testbed)")
    assert not missing, missing


def test_no_value_is_named_bool_or_str() -> None:
    bad = {}
    for path, _ in ALL:
        found = sorted(set(re.findall(r"<(?:bool|str)>", help_of(path))))
        if found:
            bad[" ".join(path)] = found
    assert not bad, bad


def test_run_backend_lists_its_choices_and_explore_workers_has_one_default() -> None:
    run_help = help_of(("run",))
    assert "--backend" in run_help and "sim, local, mininet, docker or remote" in run_help
    workers = next(line for line in help_of(("explore",)).splitlines() if "--workers" in line)
    assert workers.count("default") == 1, workers


def test_no_help_shows_a_path_of_this_clone() -> None:
    for path, _ in ALL:
        assert str(ROOT) not in help_of(path), path
    assert "[default: (experiments/nightly)]" in help_of(("nightly",))


def test_a_bad_backend_flag_is_blamed_on_the_flag() -> None:
    r = run_cli("run", "experiments/quickstart.yaml", "--backend", "mininet2", "--dry-run")
    assert r.returncode == 2
    assert r.stderr.strip() == ("--backend: 'mininet2' is not one of sim, local, mininet, "
                                "docker, remote")


def test_explore_overrides_are_blamed_on_their_flags() -> None:
    r = run_cli("explore", "experiments/quickstart.yaml", "--protocol", "fast-set")
    assert (r.returncode, r.stderr.strip()) == (
        2, "error: --protocol: unknown protocol 'fast-set' (did you mean 'fast-seto'?)")
    r = run_cli("explore", "experiments/quickstart.yaml", "--duration", "10")
    assert r.returncode == 2 and r.stderr.startswith("error: --duration: "), r.stderr
