"""Running a model as DxDispatch does: every buffer made and filled, every dispatchable compiled and initialized
(OWNED_BY_DML tensors bound then), then the commands in order; with timing options, each dispatch is timed
(``timing.py``) and DxDispatch's timing lines are printed.

Buffers are flat uint8 arrays of the backend (``from_host``: NumPy arrays, torch tensors); what print and writeFile
read is copied back to the host (``to_host``). A binding's offset is ``elementOffset`` elements of the resource's data
type (or of ``elementSizeInBytes``); it runs to the end of the buffer, or over ``elementCount`` elements. ONNX
dispatchables run as ``onnx_models`` says.

Ctrl-C during a timed dispatch prints the statistics of the iterations done, then raises KeyboardInterrupt.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from ..device import BufferBinding, Device
from ..types import DEFAULT_FEATURE_LEVEL
from .fields import ModelError, context
from .images import IMAGE_SUFFIXES, write_image
from .model import DispatchCommand, Model, PrintCommand, WriteFileCommand
from .onnx_models import OnnxDispatchable, OnnxOptions, OnnxSession
from .operators import BindingSource
from .printing import resource_text
from .timing import TimingOptions, dispatch_lines, initialize_line, progress_bar, time_dispatches

DEFAULT_MAX_BYTES = 4 << 30


def run_model(model: Model, backend: str | None = None, feature_level=DEFAULT_FEATURE_LEVEL, output_dir=".",
              timing: TimingOptions | None = None, max_bytes: int = DEFAULT_MAX_BYTES, out=None,
              onnx: OnnxOptions = OnnxOptions()) -> None:
    """Run ``model``'s commands on ``backend`` (by name; the default backend's if None), writing what DxDispatch
    prints to ``out`` (standard output by default). With
    ``timing``, each dispatch runs and is timed as the options say, and DxDispatch's timing lines are printed;
    ``onnx``: the command line's ONNX options."""
    with context(str(model.path)):
        Runner(model, backend, feature_level, Path(output_dir), timing, max_bytes, out or sys.stdout, onnx).run()


class Runner:
    def __init__(self, model: Model, backend: str | None, feature_level, output_dir: Path, timing: TimingOptions | None,
                 max_bytes: int, out, onnx: OnnxOptions):
        self.model, self.output_dir, self.timing, self.out = model, output_dir, timing, out
        total = sum(resource.size_in_bytes for resource in model.resources.values())
        if total > max_bytes:
            raise ModelError(f"the model's resources need {total} bytes, more than the {max_bytes} that "
                             f"--max-bytes allows")
        self.device = Device(backend, feature_level)
        self.backend = self.device.backend
        if timing and timing.load_compiled_code:
            self.device.load_compiled_code()
        self.buffers = {name: self.backend.from_host(resource.fill()) for name, resource in model.resources.items()}
        self.compiled = {}
        for name, dispatchable in model.dispatchables.items():
            start = time.perf_counter()
            with context(f"dispatchable '{name}'"):
                if isinstance(dispatchable, OnnxDispatchable):
                    compiled = OnnxSession(dispatchable, onnx, self.backend.from_host, self.backend.to_host)
                else:
                    compiled = self.device.compile_operator(dispatchable.desc)
                    compiled.initialize(self._bindings(dispatchable.desc.input_fields,
                                                       dispatchable.initialize_bindings))
            self.backend.synchronize()
            if timing and timing.verbosity >= 1:
                print(initialize_line(name, (time.perf_counter() - start) * 1000), file=out)
            self.compiled[name] = compiled

    def run(self) -> None:
        for index, command in enumerate(self.model.commands):
            with context(f"command {index}"):
                if isinstance(command, DispatchCommand):
                    self.dispatch(command)
                elif isinstance(command, PrintCommand):
                    self.print(command)
                else:
                    self.write_file(command)

    def dispatch(self, command: DispatchCommand) -> None:
        compiled = self.compiled[command.dispatchable]
        with context(f"dispatchable '{command.dispatchable}'"):
            if isinstance(compiled, OnnxSession):
                compiled.check_bindings(command.bindings)
                run = compiled.prepare(command.bindings, self._read, self._write, self.out)
            else:
                inputs = self._bindings(compiled.desc.input_fields, command.bindings)
                outputs = self._bindings(compiled.desc.output_fields, command.bindings)

                def run():
                    compiled.execute(inputs, outputs)
            options = self.timing or TimingOptions()
            with progress_bar(options) if self.timing else nullcontext() as progress:
                samples = time_dispatches(run, self.backend.synchronize, self.backend.timing_events(), options,
                                          progress)
        if self.timing and samples.cpu:
            print("\n".join(dispatch_lines(command.dispatchable, samples, options)), file=self.out)
        if samples.interrupted:
            raise KeyboardInterrupt

    def print(self, command: PrintCommand) -> None:
        """The resource's initial element count of values, from the start of its buffer, as DxDispatch reads them."""
        resource = self.model.resources[command.resource]
        data = self.backend.to_host(self.buffers[command.resource])
        values = data[:resource.initial_element_count * resource.dtype.itemsize].view(resource.dtype)
        print(resource_text(command.resource, values, command.verbose), file=self.out)

    def write_file(self, command: WriteFileCommand) -> None:
        """.npy: the resource's values (its whole buffer, or ``dimensions``); .png, .jpg: an image of the values
        (``images``); .dat, .bin: the buffer's bytes."""
        resource = self.model.resources[command.resource]
        path = self._output_path(command.target_path)
        data = self.backend.to_host(self.buffers[command.resource])
        try:
            if path.suffix.lower() == ".npy":
                values = data[:data.size - data.size % resource.dtype.itemsize].view(resource.dtype)
                shape = command.dimensions or values.shape
                if math.prod(shape) > values.size:
                    raise ModelError(f"dimensions {list(shape)} hold {math.prod(shape)} elements; resource "
                                     f"'{command.resource}' holds {values.size}")
                with open(path, "wb") as file:
                    np.save(file, values[:math.prod(shape)].reshape(shape))
            elif path.suffix.lower() in IMAGE_SUFFIXES:
                write_image(path, data, resource.data_type, command.dimensions)
            else:
                path.write_bytes(data.tobytes())
        except OSError as error:
            raise ModelError(f"cannot write '{path}' ({error})") from None
        print(f"Resource '{command.resource}' written to '{path}'", file=self.out)

    def _output_path(self, target: str) -> Path:
        """The target inside the output folder (folders made as needed); a path that leads out of it is refused."""
        root = self.output_dir.resolve()
        path = (root / target).resolve()
        if not path.is_relative_to(root):
            raise ModelError(f"targetPath '{target}' leads out of the output folder '{root}'")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ModelError(f"cannot make the folder of '{path}' ({error})") from None
        return path

    def _read(self, source: BindingSource, byte_count: int) -> np.ndarray:
        """The first ``byte_count`` bytes of a bound resource, on the host."""
        data = self.backend.to_host(self.buffers[source.name])
        if byte_count > data.size:
            raise ModelError(f"resource '{source.name}' holds {data.size} bytes; the tensor needs {byte_count}")
        return data[:byte_count].copy()

    def _write(self, source: BindingSource, data: np.ndarray) -> None:
        size = self.model.resources[source.name].size_in_bytes
        if data.size > size:
            raise ModelError(f"the result has {data.size} bytes; resource '{source.name}' holds {size}")
        buffer = self.buffers[source.name]
        start = self.backend.restride(buffer, (data.size,), (1,))  # the buffer's first data.size bytes
        self.backend.assign(start, self.backend.from_host(data, like=buffer))

    def _bindings(self, fields, sources: dict[str, BindingSource]) -> list:
        """The bindings of ``fields`` in binding order, None where nothing is bound."""
        return [self._buffer_binding(sources[field]) if field in sources else None for field in fields]

    def _buffer_binding(self, source: BindingSource) -> BufferBinding:
        element_size = source.element_size_in_bytes or self.model.resources[source.name].element_size
        size = source.element_count * element_size if source.element_count else None
        return BufferBinding(self.buffers[source.name], source.element_offset * element_size, size)
