"""How every command's `--help` reads: a flag shows no value type (Typer prints `<bool>` for
it, `--help` included), an argument with a metavar shows that name only, and every other
option its metavar or value type. `plain_help` applies it to an app and its groups."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption


class _Option(TyperOption):
    def display_type_rich(self, ctx: Any) -> str | None:
        return None if self.is_flag else super().display_type_rich(ctx)


class _Argument(TyperArgument):
    def display_type_rich(self, ctx: Any) -> str | None:
        return None if self.metavar else super().display_type_rich(ctx)


def _plain(params: list[Any]) -> list[Any]:
    # Typer makes the parameters (its own classes) from the signature; the display is theirs
    # with the two rules above, so each becomes the subclass that has them.
    for param in params:
        if type(param) is TyperOption:
            param.__class__ = _Option
        elif type(param) is TyperArgument:
            param.__class__ = _Argument
    return params


class Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain(super().get_params(ctx))


class Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain(super().get_params(ctx))


def plain_help(app: typer.Typer) -> None:
    """Every command and group of `app`, nested groups included, reads as the module says."""
    app.info.cls = Group
    for command in app.registered_commands:
        # a command's own class stays when it keeps these rules (a subclass of Command)
        if not (isinstance(command.cls, type) and issubclass(command.cls, Command)):
            command.cls = Command
    for group in app.registered_groups:
        group.cls = Group
        if group.typer_instance is not None:
            plain_help(group.typer_instance)
