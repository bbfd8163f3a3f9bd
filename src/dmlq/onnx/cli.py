"""``dmlq run|check|compare MODEL.onnx``: the ONNX front end on the command line.

``compare`` is one of ``dmlq``'s subcommands (:func:`add_compare`); ``run`` and ``check`` of a
``.onnx`` model come here through :func:`names_an_onnx_model` and :func:`main`, the DxDispatch
front end keeping them for ``.json`` models. Nothing here imports ``onnx`` until a command runs, so
``dmlq --help`` lists ``compare`` without the extra. Errors are one line on stderr and exit status
2, as for dmlq's other commands; nothing is written unless the whole run succeeded. ``check``
exits 1 when a node is invalid at the feature level.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from ..errors import DmlError
from ..types import FeatureLevel

if TYPE_CHECKING:
    from .checking import Verdict
    from .loading import Model

__all__ = ["add_compare", "main", "names_an_onnx_model"]

COMMANDS = {
    "run": "compute the model's outputs (mapped nodes on dmlq, others on onnxruntime CPU)",
    "check": "name each node's DirectML operator and whether the feature level accepts it",
    "compare": "compare with onnxruntime's CPU provider, per graph output and per node",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def names_an_onnx_model(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is ``run`` or ``check`` of a ``.onnx`` model: this front end's, not DxDispatch's."""
    return bool(argv) and argv[0] in ("run", "check") and any(arg.endswith(".onnx") for arg in argv[1:])


def main(argv: Sequence[str]) -> int:
    """Run ``dmlq run|check MODEL.onnx ...``; return the exit status."""
    parser = _Parser(prog="dmlq", description="Run and check ONNX models as DirectML computes them.")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for name in ("run", "check"):
        _add_command(commands, name)
    args = parser.parse_args(argv)
    try:
        status: int = args.handler(args)
        return status
    except DmlError as error:
        print(f"dmlq: error: {error}", file=sys.stderr)
        return 2


def add_compare(subcommands: argparse._SubParsersAction[Any]) -> None:
    """``dmlq compare``, as one of the command line's subcommands."""
    _add_command(subcommands, "compare")


def _feature_level(text: str) -> FeatureLevel:
    try:
        return FeatureLevel.parse(text)
    except DmlError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _add_command(subcommands: argparse._SubParsersAction[Any], name: str) -> None:
    command = subcommands.add_parser(name, help=f"ONNX: {COMMANDS[name]}", description=COMMANDS[name])
    command.add_argument("model", type=Path, metavar="MODEL.onnx")
    command.add_argument(
        "--feature-level",
        "-l",
        type=_feature_level,
        default=FeatureLevel.newest(),
        metavar="L",
        help=f"DirectML feature level (default: {FeatureLevel.newest()})",
    )
    add_model_options(command, name)
    command.set_defaults(handler={"run": _run, "check": _check, "compare": _compare}[name])


def add_model_options(command: argparse.ArgumentParser | argparse._ArgumentGroup, name: str) -> None:
    """The options ``name`` (run, check or compare) takes for an ONNX model beyond its feature level;
    ``dmlq run --help`` lists run's too, as a group of the DxDispatch run's parser."""
    if name != "check":
        command.add_argument(
            "--input",
            "-i",
            action="append",
            default=[],
            metavar="NAME=FILE.npy",
            help="an input from a .npy file (repeat for each input)",
        )
    if name == "run":
        command.add_argument(
            "--output-dir",
            "-o",
            type=Path,
            metavar="DIR",
            help="write each output to DIR/NAME.npy (default: print them)",
        )
    if name == "compare":
        command.add_argument("--seed", type=int, default=0, help="seed for inputs not given (default: 0)")
    command.add_argument(
        "--qdq-int8-allowed",
        action="store_true",
        help="onnxruntime's session.qdqisint8allowed: fuse QDQ groups with int8 activations too",
    )
    command.add_argument(
        "--disable-quant-qdq",
        action="store_true",
        help="onnxruntime's session.disable_quant_qdq: no QDQ fusion at all",
    )


def _front_end(module: str) -> ModuleType:
    """A module of dmlq.onnx, imported when a command runs (it needs the onnx extra)."""
    try:
        return importlib.import_module(f"{__package__}.{module}")
    except ImportError as error:
        raise DmlError(
            f"ONNX models need the onnx extra (python -m pip install '.[onnx]' in dmlq's checkout): {error}"
        ) from None


def _inputs(pairs: list[str]) -> dict[str, np.ndarray]:
    inputs = {}
    for pair in pairs:
        name, sep, file = pair.partition("=")
        if not sep or not name or not file:
            raise DmlError(f"--input: {pair!r} is not NAME=FILE.npy")
        try:
            inputs[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as error:
            raise DmlError(f"--input {name}: cannot read {file!r} as .npy ({error})") from None
    return inputs


def _load(args: argparse.Namespace) -> Model:
    """The model, prepared once for the whole command."""
    model: Model = _front_end("preparing").load(
        args.model, qdq_int8_allowed=args.qdq_int8_allowed, disable_quant_qdq=args.disable_quant_qdq
    )
    return model


def _run(args: argparse.Namespace) -> int:
    model = _load(args)
    outputs = _front_end("running").run(model, _inputs(args.input), args.feature_level)
    if args.output_dir is None:
        for name, value in outputs.items():
            print(f"{name}: {value.dtype} {list(value.shape)}")
            print(np.array2string(value, threshold=64))
        return 0
    files = {name: args.output_dir / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.npy" for name in outputs}
    try:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        for name, value in outputs.items():
            np.save(files[name], value, allow_pickle=False)
    except OSError as error:
        raise DmlError(
            f"--output-dir: cannot write {str(args.output_dir)!r}: {error.strerror or error}"
        ) from None
    for name, file in files.items():
        print(f"{name} -> {file}")
    return 0


def _check(args: argparse.Namespace) -> int:
    verdicts = _front_end("checking").check(_load(args), args.feature_level)
    rows = [_verdict_row(verdict) for verdict in verdicts]
    print(
        _table(
            ("NODE", "ONNX", "DIRECTML OPERATOR", f"VALID AT {args.feature_level.label}", "LOWEST LEVEL"),
            rows,
        )
    )
    for verdict in verdicts:
        if verdict.valid is False:
            print(f"{verdict.node}: {verdict.reason}")
        if verdict.warning:
            print(f"{verdict.node}: warning: {verdict.warning}")
    mapped = [verdict for verdict in verdicts if verdict.operator]
    valid = sum(verdict.valid is not False for verdict in mapped)
    missing = sum(bool(verdict.missing) for verdict in verdicts)
    refused = sum(verdict.valid is False for verdict in verdicts if not verdict.operator)
    others = f"{len(verdicts) - len(mapped)} other step(s) computed by onnxruntime CPU"
    if missing:
        others += f", {missing} of them DirectML operators dmlq does not have yet"
    level = args.feature_level.label
    print(f"{valid} of {len(mapped)} DirectML operators valid at feature level {level}; {others}")
    return 0 if valid == len(mapped) and not refused else 1


SHORT = {"QuantizeLinear": "Q", "DequantizeLinear": "DQ"}


def _op_types(verdict: Verdict) -> str:
    """The node's ONNX operator; a group's as ``DQ+DQ+Add+Q``."""
    if len(verdict.op_types) == 1:
        return verdict.op_types[0]
    return "+".join(SHORT.get(op_type, op_type) for op_type in verdict.op_types)


def _verdict_row(verdict: Verdict) -> tuple[str, ...]:
    if verdict.operator is None:
        computed = (
            f"({verdict.missing}: not in dmlq yet, onnxruntime CPU)"
            if verdict.missing
            else "(not a DirectML operator of dmlq: onnxruntime CPU)"
        )
        return (verdict.node, _op_types(verdict), computed, "NO" if verdict.valid is False else "-", "-")
    valid = {True: "yes", False: "NO", None: "when run"}[verdict.valid]
    lowest = verdict.lowest_level.label if verdict.lowest_level else "-"
    return (verdict.node, _op_types(verdict), verdict.operator, valid, lowest)


def _compare(args: argparse.Namespace) -> int:
    model = _load(args)
    report = _front_end("comparing").compare(
        model, _inputs(args.input), seed=args.seed, feature_level=args.feature_level
    )
    print(report.table())
    return 0


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows]
    )
