"""The ``dmlq`` command line: run and check DxDispatch models, list the operators.

``run`` and ``check`` of a ``.onnx`` model, and ``compare``, belong to the ONNX front end
(:mod:`dmlq.onnx.cli`, which imports ``onnx`` only when one of them runs).

A subcommand is a function listed in ``SUBCOMMANDS`` that adds its parser, with
``set_defaults(handler=...)`` naming its handler: a function taking the parsed arguments and
returning the exit status. Errors users can hit (a usage error, a DmlError, an output that cannot be
written) become one line on stderr, status 2.

>>> main(["ops"])  # doctest: +ELLIPSIS, +NORMALIZE_WHITESPACE
OPERATOR                                        FEATURE LEVEL  SUPPORT WIDENS AT
DML_OPERATOR_ELEMENT_WISE_QUANTIZE_LINEAR       1_0            2_1, 3_0, 6_0, 6_2
...
DML_OPERATOR_ACTIVATION_GELU                 5_1            -
0
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import __version__, _core
from .activations import ACTIVATIONS
from .chunked import add_dequantize, add_quantize
from .dxdispatch import Verdict, check_bindings, check_model, load_model, run_model
from .errors import DmlError
from .kernels import available_levels
from .onnx.cli import add_compare, names_an_onnx_model
from .onnx.cli import add_model_options as add_onnx_options
from .onnx.cli import main as onnx_main
from .ops import OPERATORS
from .types import FeatureLevel

__all__ = ["SUBCOMMANDS", "build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    _escape_what_cannot_be_encoded()
    argv = sys.argv[1:] if argv is None else list(argv)
    if names_an_onnx_model(argv):
        return onnx_main(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.handler is None:
        parser.print_usage(sys.stderr)
        print("dmlq: error: a command is required; dmlq --help lists them", file=sys.stderr)
        return 2
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            status = _handle(args)
        sys.stdout.flush()  # a full disk or a closed pipe shows here, not in the interpreter's exit
        return status
    except KeyboardInterrupt:  # Ctrl-C: a job has removed its partial output on the way here
        print("dmlq: interrupted", file=sys.stderr)
        return 130  # 128 + SIGINT, as shells report it
    except BrokenPipeError:  # e.g. `dmlq ops | head`: the reader left, nothing more to say
        _discard_output()
        return 0
    except OSError as error:  # only writing the output is left: file errors are DmlErrors naming the file
        _discard_output()
        print(f"dmlq: error: cannot write the output: {error.strerror or error}", file=sys.stderr)
        return 2


def _escape_what_cannot_be_encoded() -> None:
    """A model's names may hold characters the console's encoding lacks (a legacy Windows code page):
    print them escaped."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def _show_warning(message: Warning | str, *details: object, **more: object) -> None:
    """A warning is one line on stderr, like an error."""
    print(f"dmlq: warning: {message}", file=sys.stderr)


def _handle(args: argparse.Namespace) -> int:
    try:
        status: int = args.handler(args)
        return status
    except DmlError as error:
        print(f"dmlq: error: {error}", file=sys.stderr)
        return 2


def _discard_output() -> None:
    """Point stdout at the null device, so that the interpreter's last flush of it cannot fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line on stderr like every other error; ``--help`` shows the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def version_line() -> str:
    """The version and what computes here, for a bug report: the compiled kernels' CPU level (of
    those this CPU has) and the thread count.

    >>> version_line().startswith(f"dmlq {__version__} (kernels: ")
    True
    """
    return (f"dmlq {__version__} (kernels: {_core.get_level()} of {', '.join(available_levels())}; "
            f"threads: {_core.get_num_threads()})")  # fmt: skip


class _PrintVersion(argparse.Action):
    """``--version``: :func:`version_line` as one line (argparse's version action wraps it at the
    terminal's width)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> NoReturn:
        print(version_line())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dmlq",
        description="DirectML's quantized-linear operators on the CPU: run and check DxDispatch models; "
        "run, check and compare ONNX models (MODEL.onnx).",
    )
    parser.add_argument("--version", action=_PrintVersion, help="print the version line and exit")
    parser.set_defaults(handler=None)  # bare ``dmlq``: the usage, from main
    subcommands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for add_subcommand in SUBCOMMANDS:
        add_subcommand(subcommands)
    return parser


def _feature_level(text: str) -> FeatureLevel:
    try:
        return FeatureLevel.parse(text)
    except DmlError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", type=Path, metavar="MODEL.json",
                        help="a DxDispatch JSON model (or an ONNX model, MODEL.onnx)")  # fmt: skip
    parser.add_argument(
        "--feature-level", "-l", type=_feature_level, default=FeatureLevel.newest(), metavar="L",
        help=f"DirectML feature level to validate against, e.g. 4_0 (default: {FeatureLevel.newest()})",
    )  # fmt: skip


# -- run ------------------------------------------------------------------------------------------------


def _add_run(subcommands: argparse._SubParsersAction[Any]) -> None:
    parser = subcommands.add_parser(
        "run", help="execute a DxDispatch model, or compute an ONNX model's outputs (MODEL.onnx)",
        description="Execute a DxDispatch model: compile every dispatchable at the feature level, then run "
        "the commands (dispatch, print, writeFile) in order. writeFile targets are relative to the "
        "working directory; sourcePath files are looked up next to the model, then there. An ONNX model "
        "(MODEL.onnx, with the onnx extra) computes its outputs instead: mapped nodes on dmlq's "
        "operators, the others on onnxruntime CPU.",
    )  # fmt: skip
    _add_model_arguments(parser)
    add_onnx_options(parser.add_argument_group("options for an ONNX model (MODEL.onnx)"), "run")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    onnx_only = {
        "--input": bool(args.input),
        "--output-dir": args.output_dir is not None,
        "--qdq-int8-allowed": args.qdq_int8_allowed,
        "--disable-quant-qdq": args.disable_quant_qdq,
    }
    given = [option for option, present in onnx_only.items() if present]
    if given:  # an ONNX model's run never comes here
        raise DmlError(f"{', '.join(given)}: for an ONNX model (MODEL.onnx) only")  # fmt: skip
    run_model(load_model(args.model), args.feature_level, sys.stdout)
    return 0


# -- check ----------------------------------------------------------------------------------------------


def _add_check(subcommands: argparse._SubParsersAction[Any]) -> None:
    parser = subcommands.add_parser(
        "check", help="validate a model's dispatchables at a feature level (a MODEL.onnx: its nodes)",
        description="Validate every dispatchable of a DxDispatch model at a feature level and name the "
        "lowest level that accepts it; bind every dispatch command's resources as run would (buffer "
        "sizes, offsets, alignment, overlaps) and warn of a scale of 0 in the initial values. Exit "
        "status: 0 when all are valid, 1 when any is not, 2 on usage and file errors.",
    )  # fmt: skip
    _add_model_arguments(parser)
    parser.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    model = load_model(args.model)
    verdicts = check_model(model, args.feature_level)
    bindings = check_bindings(model, args.feature_level)
    for verdict in verdicts:
        print(_describe(verdict, args.feature_level))
    for problem in bindings.problems:
        print(problem)
    for warning in bindings.warnings:
        _show_warning(warning)
    valid = sum(verdict.valid for verdict in verdicts)
    print(f"{valid} of {len(verdicts)} dispatchables valid at feature level {args.feature_level}")
    if not bindings.valid:
        print(f"{len(bindings.problems)} dispatch command(s) cannot bind their resources")
    return 0 if valid == len(verdicts) and bindings.valid else 1


def _describe(verdict: Verdict, level: FeatureLevel) -> str:
    dispatchable = verdict.dispatchable
    lowest = verdict.lowest_level
    since = f"lowest feature level: {lowest}" if lowest else "no feature level accepts it"
    status = "valid" if verdict.valid else "NOT valid"
    line = f"{dispatchable.name}: {dispatchable.desc.TYPE_NAME} is {status} at {level} ({since})"
    return line if verdict.valid else f"{line}\n  {verdict.problem}"


# -- ops ------------------------------------------------------------------------------------------------


def _add_ops(subcommands: argparse._SubParsersAction[Any]) -> None:
    parser = subcommands.add_parser(
        "ops", help="list the operators and fused activations with their feature levels",
        description="List the operators dmlq runs and the activations ELEMENT_WISE_ADD1 and GEMM fuse, with "
        "the feature level each needs and the levels that widen an operator's support.",
    )  # fmt: skip
    parser.set_defaults(handler=_ops)


def _ops(args: argparse.Namespace) -> int:
    operator_rows = [
        (f"DML_OPERATOR_{cls.TYPE_NAME}", cls.INTRODUCED.label,
         ", ".join(row.level.label for row in reversed(cls.SUPPORT) if row.level > cls.INTRODUCED) or "-")
        for cls in OPERATORS
    ]  # fmt: skip
    activation_rows = [
        (f"DML_OPERATOR_{cls.TYPE_NAME}", cls.INTRODUCED.label, ", ".join(cls.DML_FIELDS) or "-")
        for cls in ACTIVATIONS.values()
    ]
    print(_table(("OPERATOR", "FEATURE LEVEL", "SUPPORT WIDENS AT"), operator_rows))
    print()
    print(_table(("FUSED ACTIVATION (ADD1, GEMM)", "FEATURE LEVEL", "PARAMETERS"), activation_rows))
    return 0


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows]
    )


SUBCOMMANDS: list[Callable[[argparse._SubParsersAction[Any]], None]] = [
    _add_run, _add_check, add_compare, _add_ops, add_quantize, add_dequantize,
]  # fmt: skip
