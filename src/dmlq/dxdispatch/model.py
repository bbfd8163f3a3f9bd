"""A whole model: its resources, dispatchables and commands, parsed from a file or from text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import DmlError
from .commands import Command, parse_command
from .dispatchables import Dispatchable, parse_dispatchable
from .reading import read_document
from .resources import Resource, parse_resource


@dataclass(frozen=True)
class Model:
    """A parsed DxDispatch model; running it changes its resources' bytes."""

    resources: Mapping[str, Resource]
    dispatchables: Mapping[str, Dispatchable]
    commands: Sequence[Command]


def load_model(path: str | Path) -> Model:
    """Read and parse a model file; ``sourcePath`` files resolve next to it, then in the working folder."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DmlError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise DmlError(f"{path}: not a UTF-8 text file") from None
    except OSError as error:
        raise DmlError(f"{path}: cannot read: {error.strerror or error}") from None
    return parse_model(text, base=path.parent, source=str(path))


def parse_model(text: str, base: str | Path = ".", source: str = "model") -> Model:
    """Parse a model's JSON text (comments and trailing commas allowed); ``base`` is its folder."""
    root = read_document(text, source)
    fields = root.fields(("$schema", "resources", "dispatchables", "commands"),
                         ("resources", "dispatchables", "commands"))  # fmt: skip
    resources = {
        name: parse_resource(name, node, Path(base)) for name, node in fields["resources"].entries().items()
    }
    dispatchables = {
        name: parse_dispatchable(name, node, resources)
        for name, node in fields["dispatchables"].entries().items()
    }
    commands = [parse_command(node, resources, dispatchables) for node in fields["commands"].elements()]
    return Model(resources, dispatchables, commands)
