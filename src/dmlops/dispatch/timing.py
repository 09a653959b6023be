"""Timing dispatches as DxDispatch does (its Guide's "Timing Dispatchables"), and the lines it prints.

An iteration dispatches ``repeat`` times, then waits for the device; its sample is its time divided by ``repeat``,
on the CPU's clock and, on the cuda backend with a GPU, on the GPU's (CUDA events around the dispatches). The loop
runs ``iterations`` times or, given ``milliseconds_to_run``, until an iteration ends (with the sleep that
``interval_milliseconds`` asks for) past that time. The first ``warmup_samples`` samples are the cold ones, but one
sample at least stays hot. A median is the upper one of the sorted samples, as DxDispatch takes it. Ctrl-C ends the
loop: the samples of the iterations done are kept (``Samples.interrupted``), so that their statistics are printed.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class TimingOptions:
    """DxDispatch's timing options: -i, -r, -t, -w, -v and -I."""

    iterations: int = 1
    repeat: int = 1
    milliseconds_to_run: int | None = None  # overrides iterations
    warmup_samples: int = 1
    verbosity: int = 0  # 0: the median line; 1: initialization, cold and hot statistics; 2: every iteration too
    interval_milliseconds: int = 0  # the least time from one iteration's start to the next one's
    # wait for the backend's compiled engines before timing, so that timings measure them (the one-iteration line
    # that DxDispatch prints for an untimed run does not wait)
    load_compiled_code: bool = True


@dataclass(frozen=True)
class Samples:
    """Milliseconds a dispatch, one sample an iteration; ``gpu`` is None where there is no GPU clock."""

    cpu: list[float]
    gpu: list[float] | None
    interrupted: bool = False  # Ctrl-C ended the loop


def time_dispatches(dispatch: Callable[[], None], synchronize: Callable[[], None], gpu_events, options: TimingOptions,
                    progress=None) -> Samples:
    """Run the timing loop. ``gpu_events()`` makes a (start, end) pair of the backend's timing events
    (``Backend.timing_events``), or ``gpu_events`` is None; ``progress(done)`` is told after each iteration how many
    iterations, or seconds of -t, are done."""
    cpu, gpu = [], None if gpu_events is None else []
    loop_start = time.perf_counter()
    try:
        for iteration in itertools.count() if options.milliseconds_to_run is not None else range(options.iterations):
            events = gpu_events() if gpu_events else None  # made before the CPU's clock starts
            start = time.perf_counter()
            if events:
                events[0].record()
            for _ in range(options.repeat):
                dispatch()
            if events:
                events[1].record()
            synchronize()
            end = time.perf_counter()
            cpu.append((end - start) * 1000 / options.repeat)
            if events:
                gpu.append(events[0].elapsed_time(events[1]) / options.repeat)
            sleep = max(0.0, options.interval_milliseconds - (end - start) * 1000)
            elapsed = (end - loop_start) * 1000
            if progress is not None:
                progress(iteration + 1 if options.milliseconds_to_run is None else elapsed / 1000)
            if options.milliseconds_to_run is not None and elapsed + sleep > options.milliseconds_to_run:
                break
            time.sleep(sleep / 1000)
    except KeyboardInterrupt:  # the iterations done whole are kept
        count = len(cpu) if gpu is None else min(len(cpu), len(gpu))
        return Samples(cpu[:count], None if gpu is None else gpu[:count], interrupted=True)
    return Samples(cpu, gpu)


@dataclass(frozen=True)
class Statistics:
    count: int
    average: float
    minimum: float
    median: float
    maximum: float

    @classmethod
    def of(cls, samples: list[float]) -> Statistics:
        ordered = sorted(samples)
        return cls(len(ordered), sum(ordered) / len(ordered), ordered[0], ordered[len(ordered) // 2], ordered[-1])


def cold_and_hot(samples: list[float], warmup_samples: int) -> tuple[list[float], list[float]]:
    cold_count = min(len(samples) - 1, warmup_samples)
    return samples[:cold_count], samples[cold_count:]


def initialize_line(name: str, milliseconds: float) -> str:
    return f"Initialize '{name}': {milliseconds:.4f} ms"


def dispatch_lines(name: str, samples: Samples, options: TimingOptions) -> list[str]:
    """What DxDispatch prints after timing a dispatch at the options' verbosity."""
    clocks = {"CPU": samples.cpu} if samples.gpu is None else {"CPU": samples.cpu, "GPU": samples.gpu}
    split = {clock: cold_and_hot(values, options.warmup_samples) for clock, values in clocks.items()}
    iterations = len(samples.cpu)
    if options.verbosity == 0:
        # DxDispatch gives the GPU's median 6 decimals here: a small dispatch takes microseconds on the GPU.
        medians = [f"{Statistics.of(split[clock][1]).median:.{4 if clock == 'CPU' else 6}f} ms median ({clock})"
                   for clock in clocks]
        return [f"Dispatch '{name}': {iterations} iterations, {', '.join(medians)}"]
    lines = [f"Dispatch '{name}': {iterations} iterations"]
    for label, part in (("(Cold)", 0), ("(Hot) ", 1)):  # "(Hot) " padded: DxDispatch aligns the colons
        for clock in clocks:
            if split[clock][part]:
                stats = Statistics.of(split[clock][part])
                lines.append(f"{clock} Timings {label} : {stats.count} samples, {stats.average:.4f} ms average, "
                             f"{stats.minimum:.4f} ms min, {stats.median:.4f} ms median, {stats.maximum:.4f} ms max")
    if options.verbosity >= 2:
        lines.append("The timings of each iteration: ")  # with DxDispatch's trailing blank
        for index in range(iterations):
            times = ", ".join(f"{values[index]:.4f} ms ({clock})" for clock, values in clocks.items())
            lines.append(f"iteration {index}: {times}")
    return lines


@contextlib.contextmanager
def progress_bar(options: TimingOptions, stream=None):
    """A function that moves a tqdm bar on ``stream`` (standard error) to the iterations, or seconds of -t, done;
    the bar shows once the loop has run about a second. None where the stream is no terminal or tqdm is not
    installed."""
    stream = stream or sys.stderr
    tqdm = _tqdm() if stream.isatty() else None
    if tqdm is None:
        yield None
        return
    if options.milliseconds_to_run is None:
        bar = tqdm(total=options.iterations, unit="it", delay=1, leave=False, file=stream)
    else:
        bar = tqdm(total=options.milliseconds_to_run / 1000, delay=1, leave=False, file=stream,
                   bar_format="{l_bar}{bar}| {n:.1f}/{total:.1f} s")
    with bar:
        yield lambda done: bar.update(min(done, bar.total) - bar.n)


def _tqdm():
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is optional: NumPy alone runs dmlops
        return None
    return tqdm
