"""The dmlops command line. ``dmlops dispatch MODEL.json`` runs a DxDispatch model and prints what DxDispatch
prints. A bad model (or option) exits with status 2 and a message that names the problem; ``--debug`` shows the
traceback instead."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __version__
from .dispatch import DEFAULT_MAX_BYTES, read_model, run_model
from .types import DEFAULT_FEATURE_LEVEL, FeatureLevel, ValidationError


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run_model(read_model(args.model), args.backend, args.feature_level, args.output_dir, args.timing,
                  args.max_bytes)
    except ValidationError as error:
        if args.debug:
            raise
        print(f"dmlops dispatch: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # a fault of dmlops, not of the model: said in one line unless --debug
        if args.debug:
            raise
        print(f"dmlops dispatch: internal error: {type(error).__name__}: {error} (--debug shows the traceback)",
              file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dmlops", description="DirectML's operators off Windows.")
    parser.add_argument("--version", action="version", version=f"dmlops {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    dispatch = commands.add_parser(
        "dispatch", help="run a DxDispatch JSON model",
        description="Run a DxDispatch JSON model (resources, dispatchables, commands) and print what DxDispatch "
                    "prints.")
    dispatch.add_argument("model", metavar="MODEL.json", help="the model file")
    dispatch.add_argument("--backend", choices=("cpu", "cuda"), default="cpu",
                          help="cpu: NumPy (default); cuda: Triton kernels on an NVIDIA GPU")
    dispatch.add_argument("--feature-level", type=feature_level, default=DEFAULT_FEATURE_LEVEL,
                          help=f"the DirectML feature level whose support tables apply (default "
                               f"{DEFAULT_FEATURE_LEVEL})")
    dispatch.add_argument("--output-dir", type=Path, default=Path("."),
                          help="where writeFile commands write (default: the current folder)")
    dispatch.add_argument("--timing", action="store_true", help="print the time of each dispatch")
    dispatch.add_argument("--max-bytes", type=byte_count, default=DEFAULT_MAX_BYTES,
                          help=f"refuse a model whose resources need more bytes (default {DEFAULT_MAX_BYTES})")
    dispatch.add_argument("--debug", action="store_true", help="show the traceback of an error")
    return parser


def feature_level(text: str) -> FeatureLevel:
    try:
        return FeatureLevel.parse(text)
    except ValidationError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def byte_count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of bytes")
    return int(text)
