"""The dmlops command line. ``dmlops dispatch MODEL.json`` runs a DxDispatch model (or an ONNX model) and prints
what DxDispatch prints, with DxDispatch's options; ``dmlops --version`` says what runs here. A bad model (or option)
exits with status 2 and a message that names the problem, Ctrl-C with 130; ``--traceback`` shows the traceback of
an error instead."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import platform
import sys
from pathlib import Path

from . import __version__
from .core import registry
from .dispatch import DEFAULT_MAX_BYTES, read_model, run_model
from .dispatch import devices
from .dispatch.onnx_models import OnnxOptions
from .dispatch.timing import TimingOptions
from .types import DEFAULT_FEATURE_LEVEL, FeatureLevel, ValidationError

# DxDispatch's options that change nothing here, and why: one note names those given.
NO_EFFECT = {
    "queue_type": ("-q", "dmlops records no Direct3D command lists"),
    "post_dispatch_barriers": ("--post_dispatch_barriers", "each dispatch ends before the next starts"),
    "debug_layers": ("-d", "dmlops validates every desc and binding always"),
    "onnx_session_config_entry": ("-e", "the reference evaluator has no session options"),
    "onnx_graph_optimization_level": ("-l", "the reference evaluator does not optimize graphs"),
    "onnx_logging_level": ("-L", "the reference evaluator does not log"),
}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    note_unused_options(args)
    if args.show_dependencies:
        print(version_text(), end="")
    if args.show_adapters:
        print(devices.adapters_text(), end="")
    if args.model is None:
        if args.show_dependencies or args.show_adapters:
            return 0
        usage_error("the following arguments are required: MODEL.json")
    try:
        model = read_model(args.model)
        device = devices.choose(args.adapter, args.backend)
        devices.use(device)
        print(f"Running on '{device.name}'", flush=True)
        run_model(model, device.backend, args.feature_level, args.output_dir, timing_options(args), args.max_bytes,
                  onnx=onnx_options(args))
    except KeyboardInterrupt:  # Ctrl-C: what was done is printed
        sys.stdout.flush()
        return 130
    except ValidationError as error:
        if args.traceback:
            raise
        print(f"dmlops dispatch: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # a fault of dmlops, not of the model: said in one line unless --traceback
        if args.traceback:
            raise
        print(f"dmlops dispatch: internal error: {type(error).__name__}: {error} (--traceback shows the traceback)",
              file=sys.stderr)
        return 1
    return 0


def usage_error(message: str):
    print(f"dmlops dispatch: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def note_unused_options(args) -> None:
    """One line on standard error for the options given that change nothing here, one for PIX's."""
    given = [f"{flag} ({why})" for field, (flag, why) in NO_EFFECT.items() if getattr(args, field) not in (None, [])]
    if given:
        print(f"dmlops dispatch: note: these options change nothing here: {'; '.join(given)}", file=sys.stderr)
    if args.pix_capture_type is not None or args.pix_capture_name is not None:
        print("dmlops dispatch: note: -c/-o: dmlops takes no PIX captures (PIX records Direct3D work; dmlops does "
              "none)", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="dmlops", description="DirectML's operators off Windows.")
    parser.add_argument("--version", action=VersionAction,
                        help="show the versions of dmlops and its dependencies, and the backends that run here")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    dispatch = commands.add_parser(
        "dispatch", help="run a DxDispatch JSON model or an ONNX model",
        description="Run a DxDispatch JSON model (resources, dispatchables, commands), or an ONNX model, and print "
                    "what DxDispatch prints.")
    dispatch.add_argument("model", metavar="MODEL.json", nargs="?", help="the model file (.json, or .onnx)")
    dispatch.add_argument("--backend", choices=sorted(registry.names()), help=backends_help())
    dispatch.add_argument("-a", "--adapter", metavar="SUBSTRING",
                          help="the device whose id or name holds this (any case): cpu, a GPU's name, cuda:1")
    dispatch.add_argument("-s", "--show_adapters", action="store_true", help="list the devices")
    dispatch.add_argument("-S", "--show_dependencies", action="store_true",
                          help="show the versions of dmlops's dependencies")
    dispatch.add_argument("--feature-level", type=feature_level, default=DEFAULT_FEATURE_LEVEL,
                          help=f"the DirectML feature level whose support tables apply (default "
                               f"{DEFAULT_FEATURE_LEVEL})")
    dispatch.add_argument("--output-dir", type=Path, default=Path("."),
                          help="where writeFile commands write (default: the current folder)")
    timing = dispatch.add_argument_group(
        "timing", "DxDispatch's timing options; any of them, or --timing, times the compiled engines (a run without "
                  "them prints each dispatch's single cold time)")
    timing.add_argument("--timing", action="store_true", help="print the median time of each dispatch")
    count, milliseconds = whole_number("a count of at least 1", 1), whole_number("a number of milliseconds")
    for flags, field, parse, metavar, text in (
            (("-i", "--dispatch_iterations"), "iterations", count, "N",
             "iterations of the dispatch, wait, sample loop (default 1; Ctrl-C ends it)"),
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
    onnx = dispatch.add_argument_group("ONNX", "DxDispatch's ONNX options (ONNX dispatchables)")
    onnx.add_argument("-f", "--onnx_free_dim_name_override", action="append", default=[], metavar="NAME:SIZE",
                      type=named(whole_number("a size")), help="a free dimension's size, by its name (repeatable)")
    onnx.add_argument("-F", "--onnx_free_dim_denotation_override", action="append", default=[],
                      metavar="DENOTATION:SIZE", type=named(whole_number("a size")),
                      help="a free dimension's size, by its denotation (repeatable)")
    onnx.add_argument("-b", "--binding_shape", action="append", default=[], metavar="TENSOR:D0,D1,...",
                      type=named(shape), help="a tensor's shape in its bindings (repeatable)")
    onnx.add_argument("-p", "--print_onnx_bindings", action="store_true",
                      help="print each input and output: its resource, data type and shape")
    onnx.add_argument("-e", "--onnx_session_config_entry", action="append", default=[], metavar="KEY:VALUE",
                      type=named(str), help="ONNX Runtime's session options: accepted, no effect")
    onnx.add_argument("-l", "--onnx_graph_optimization_level", type=int, choices=(0, 1, 2, 99),
                      help="ONNX Runtime's graph optimization level: accepted, no effect")
    onnx.add_argument("-L", "--onnx_logging_level", type=int, choices=range(5), metavar="{0,1,2,3,4}",
                      help="ONNX Runtime's logging level: accepted, no effect")
    directx = dispatch.add_argument_group("DirectX", "DxDispatch's DirectX options: checked, then noted as changing "
                                                     "nothing here")
    directx.add_argument("-q", "--queue_type", choices=("compute", "direct"), help="accepted, no effect")
    directx.add_argument("--post_dispatch_barriers", choices=("none", "uav", "uav+aliasing"),
                         help="accepted, no effect")
    directx.add_argument("-d", "--debug", dest="debug_layers", action="store_true", default=None,
                         help="Direct3D's and DirectML's debug layers: dmlops always validates (no effect)")
    directx.add_argument("-c", "--pix_capture_type", type=pix_capture_type, metavar="{gpu,manual}",
                         help="PIX captures: none are taken")
    directx.add_argument("-o", "--pix_capture_name", metavar="NAME", help="PIX captures: none are taken")
    dispatch.add_argument("--max-bytes", type=whole_number("a number of bytes"), default=DEFAULT_MAX_BYTES,
                          help=f"refuse a model whose resources need more bytes (default {DEFAULT_MAX_BYTES})")
    dispatch.add_argument("--traceback", action="store_true",
                          help="show the traceback of an error (-d is DxDispatch's debug layers)")
    return parser


def backends_help() -> str:
    """What each registered backend runs with, the default's marked: "cpu: NumPy and numba (default); ..."."""
    default = registry.default()
    return "; ".join(f"{name}: {registry.summary(name) or 'registered by the program'}"
                     f"{' (default)' if name == default else ''}" for name in sorted(registry.names()))


def pix_capture_type(text: str) -> str:
    """As DxDispatch checks -c off Xbox: gpu or manual; timing captures are not supported."""
    if text == "timing":
        raise argparse.ArgumentTypeError("programmatic timing captures are not supported")
    if text not in ("gpu", "manual"):
        raise argparse.ArgumentTypeError(f"'{text}' is not gpu, timing or manual")
    return text


def named(parse):
    """An argparse type: ``NAME:VALUE``, the value read by ``parse``, as (name, value)."""
    def parse_named(text: str):
        name, separator, value = text.partition(":")
        if not separator or not name:
            raise argparse.ArgumentTypeError(f"'{text}' is not NAME:VALUE")
        return name, parse(value)
    return parse_named


def shape(text: str) -> tuple[int, ...]:
    sizes = text.split(",")
    if not all(size.isdecimal() for size in sizes):
        raise argparse.ArgumentTypeError(f"'{text}' is not a shape (sizes separated by commas, no blanks)")
    return tuple(int(size) for size in sizes)


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


def timing_options(args) -> TimingOptions:
    """The timing options given; where neither they nor --timing were, the one cold iteration that DxDispatch times
    and prints by default, for which nothing waits for the compiled engines."""
    fields = (field.name for field in dataclasses.fields(TimingOptions))
    given = {field: getattr(args, field) for field in fields if getattr(args, field, None) is not None}
    return TimingOptions(**given) if given or args.timing else TimingOptions(load_compiled_code=False)


def onnx_options(args) -> OnnxOptions:
    return OnnxOptions(dict(args.onnx_free_dim_name_override), dict(args.onnx_free_dim_denotation_override),
                       dict(args.binding_shape), args.print_onnx_bindings)


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
    "tqdm": ("tqdm", "progress bars of timed runs"), "dask": ("Dask", "Dask arrays"),
    "distributed": ("distributed", "Dask's clusters"), "pillow": ("Pillow", "images of dmlops dispatch"),
    "onnx": ("ONNX", "ONNX models of dmlops dispatch"),
}


def version_text() -> str:
    """dmlops's version, its dependencies' (as DxDispatch's -S shows them), and the backends that can run here
    (with the GPU, as DxDispatch's -s shows the adapters)."""
    lines = [f"dmlops {__version__}", f"  {'Python':11} : {platform.python_version()}"]
    lines += [f"  {name:11} : {_installed_version(distribution)} ({use})"
              for distribution, (name, use) in DEPENDENCIES.items()]
    names = registry.built_in()
    width = max(map(len, names), default=0)
    lines += ["Backends:", *(f"  {name:{width}} : {registry.describe(name)}" for name in names)]
    return "\n".join(lines) + "\n"


def _installed_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
