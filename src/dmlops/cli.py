"""The dmlops command line. ``dmlops dispatch MODEL.json`` runs a DxDispatch model and prints what DxDispatch
prints, with DxDispatch's timing options; ``dmlops --version`` says what runs here. A bad model (or option) exits
with status 2 and a message that names the problem; ``--debug`` shows the traceback instead."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import importlib.util
import os
import platform
import sys
from pathlib import Path

from . import __version__
from .dispatch import DEFAULT_MAX_BYTES, read_model, run_model
from .dispatch.timing import TimingOptions
from .types import DEFAULT_FEATURE_LEVEL, FeatureLevel, ValidationError


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run_model(read_model(args.model), args.backend, args.feature_level, args.output_dir, timing_options(args),
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
    parser = Parser(prog="dmlops", description="DirectML's operators off Windows.")
    parser.add_argument("--version", action=VersionAction,
                        help="show the versions of dmlops and its dependencies, and the backends that run here")
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
    timing = dispatch.add_argument_group(
        "timing", "DxDispatch's timing options; any of them, or --timing, turns DxDispatch's timing lines on")
    timing.add_argument("--timing", action="store_true", help="print the median time of each dispatch")
    count, milliseconds = whole_number("a count of at least 1", 1), whole_number("a number of milliseconds")
    for flags, field, parse, metavar, text in (
            (("-i", "--dispatch_iterations"), "iterations", count, "N",
             "iterations of the dispatch, wait, sample loop (default 1)"),
            (("-r", "--dispatch_repeat"), "repeat", count, "N",
             "dispatches in each iteration; a sample is their average (default 1)"),
            (("-t", "--milliseconds_to_run"), "milliseconds_to_run", milliseconds, "MS",
             "iterate until this time has passed (overrides -i)"),
            (("-w", "--warmup_samples"), "warmup_samples", whole_number("a count"), "N",
             "the first N samples are the cold ones, left out of the hot statistics (default 1)"),
            (("-v", "--timing_verbosity"), "verbosity", whole_number("0, 1 or 2", 0, 2), "{0,1,2}",
             "0: the median line (default); 1: initialization, cold and hot statistics; 2: every iteration too"),
            (("-I", "--dispatch_interval"), "interval_milliseconds", milliseconds, "MS",
             "the least time from one iteration's start to the next (default 0)")):
        timing.add_argument(*flags, dest=field, type=parse, metavar=metavar, help=text)
    dispatch.add_argument("--max-bytes", type=whole_number("a number of bytes"), default=DEFAULT_MAX_BYTES,
                          help=f"refuse a model whose resources need more bytes (default {DEFAULT_MAX_BYTES})")
    dispatch.add_argument("--debug", action="store_true", help="show the traceback of an error")
    return parser


def feature_level(text: str) -> FeatureLevel:
    try:
        return FeatureLevel.parse(text)
    except ValidationError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


class Parser(argparse.ArgumentParser):
    """An option error is one line, as a model's error is; --help shows the usage."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def whole_number(what: str, minimum: int = 0, maximum: int | None = None):
    """An argparse type: a decimal whole number from ``minimum`` to ``maximum``, which ``what`` names."""
    def parse(text: str) -> int:
        number = int(text) if text.isdecimal() else None
        if number is None or number < minimum or (maximum is not None and number > maximum):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return number
    return parse


def timing_options(args) -> TimingOptions | None:
    """The timing options given, or None where neither they nor --timing were."""
    fields = (field.name for field in dataclasses.fields(TimingOptions))
    given = {field: getattr(args, field) for field in fields if getattr(args, field) is not None}
    return TimingOptions(**given) if given or args.timing else None


class VersionAction(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text(), end="")
        parser.exit()


# What dmlops runs with: each distribution, its name, and what dmlops uses it for.
DEPENDENCIES = {
    "numpy": ("NumPy", "buffers, the cpu backend"), "numba": ("numba", "the cpu backend's compiled kernels"),
    "torch": ("PyTorch", "the cuda backend's buffers"), "triton": ("Triton", "the cuda backend's kernels"),
    "tqdm": ("tqdm", "progress bars of timed runs"),
}


def version_text() -> str:
    """dmlops's version, its dependencies' (as DxDispatch's -S shows them), and the backends that can run here
    (with the GPU, as DxDispatch's -s shows the adapters)."""
    lines = [f"dmlops {__version__}", f"  {'Python':8} : {platform.python_version()}"]
    lines += [f"  {name:8} : {_installed_version(distribution)} ({use})"
              for distribution, (name, use) in DEPENDENCIES.items()]
    lines += ["Backends:", "  cpu  : NumPy" + (", numba" if importlib.util.find_spec("numba") else ""),
              f"  cuda : {_cuda_backend()}"]
    return "\n".join(lines) + "\n"


def _installed_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cuda_backend() -> str:
    """The GPU that the cuda backend runs on, or why it cannot run."""
    if not (importlib.util.find_spec("torch") and importlib.util.find_spec("triton")):
        return "cannot run: PyTorch and Triton are not both installed (in dmlops' folder: pip install '.[cuda]')"
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "Triton's interpreter, on the CPU (TRITON_INTERPRET=1; no CUDA GPU)"
    return "cannot run: PyTorch sees no CUDA GPU"
