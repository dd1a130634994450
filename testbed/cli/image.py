"""`testbed image`: the docker backend's node image."""

from __future__ import annotations

from typing import Annotated

import typer

from testbed.cli.common import console, fail

image_app = typer.Typer(help="Node images for the docker backend.\n\nExample: [bold]sudo testbed "
                        "image build[/]", no_args_is_help=True)


@image_app.command("build")
def image_build(
    base: Annotated[str, typer.Option(help="auto, debootstrap, registry or an image name",
                                      metavar="BASE")] = "auto",
    rebuild: Annotated[bool, typer.Option(help="build even if the tag exists")] = False,
) -> None:
    """Build the node image (no registry needed: the base comes from debootstrap).

    Example: [bold]sudo testbed image build --base debootstrap[/]
    """
    from testbed.engine import EngineError, ensure_engine
    from testbed.images import ImageError, build

    try:
        ensure_engine()
        with console.status("building the node image"):
            info = build(base, rebuild)
    except (ImageError, EngineError) as exc:
        raise fail(str(exc)) from None
    console.print(f"{info['tag']} {info['id']} (base {info['base']})")


