"""`agent-rl sandbox ...`: build the Docker sandbox's image without an image registry."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

app = typer.Typer(help="The sandbox's Docker image.", no_args_is_help=True)
image_app = typer.Typer(help="Build and inspect the Docker sandbox image.", no_args_is_help=True)
app.add_typer(image_app, name="image")


@image_app.command("build")
def build(
    force: Annotated[bool, typer.Option(help="Build even if the image is current.")] = False,
    show_packages: Annotated[bool, typer.Option(help="Print every package with its version.")
                             ] = False,
) -> None:
    """Build agent-rl/sandbox-python:3.11 from Debian's packages (debootstrap; needs root and a
    running dockerd). Skipped when the image was built from the same recipe."""
    from sandbox.backends.docker_backend import docker_client
    from sandbox.docker_image import IMAGE, RECIPE, build_image, recipe_hash

    console = Console()
    console.print(f"recipe {recipe_hash()}: {RECIPE}")
    with console.status(f"building {IMAGE} (about a minute)"):
        packages = build_image(docker_client(), force=force, log=console.print)
    if show_packages:
        for package in packages:
            console.print(package)
