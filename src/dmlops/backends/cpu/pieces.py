"""Work of one CPU call cut into independent pieces that the cores take in turn.

The calling thread takes pieces itself, beside a pool of threads started once and kept, so that no piece waits
for a thread to wake where it could start at once; the compiled loops release the GIL, so the threads run at once.
Pieces are handed out by Python (``run_in_pieces``: a piece costs microseconds to hand out), or taken by tickets
inside one compiled call a thread (``run_on_cores``: a piece costs an atomic add, and the caller never waits for a
thread to wake up).

The pool's threads wait for work in compiled code, with the GIL released (``atomics.wait_for_ring``, where numba is
loaded): a thread that has taken pieces by tickets stays awake a while (``LINGER_CYCLES``) for the next call's
(woken from sleep, it started 60 to 90 µs into a call, most of a 512³ product's 200 µs on two cores of a virtual
machine whose idle cores halt; awake, 3.5 µs in), then sleeps on the doorbell (a futex, on Linux), which each call
that hands out work rings: from its compiled code once it has released the GIL itself (``run_on_cores``), or from
Python. So a pool thread enters Python only when work was just handed out, and a call sharing its compiled work
waits at its end, spinning, until the pool's threads are back in compiled code (``atomics.call_ends``), rather
than block on a GIL that a pool thread holds.
"""

from __future__ import annotations

import ctypes
import os
import queue
import threading
from concurrent.futures import Future

import numpy as np

# The cores this process may run on; a large call is cut into more pieces than cores, so that a core busy with other
# work takes fewer of them.
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
PIECES_PER_CORE = 4

# The most threads a call's work takes from the pool. Each pool thread joins a call through Python, one after
# another (its task from the queue, the compiled call's arguments unboxed, the GIL held), so that on 16 cores of a
# Sapphire Rapids numba's own threads, started inside one compiled call, made products 1.2-1.9 x as fast
# as the pool's 16; on 4 and 8 cores the two were level but for the pool's 1.3 x at 1024^3 and 2048^3, on 2 the
# pool 1.1-2.2 x as fast (benchmarks/RESULTS.md, "threads on 16 cores").
POOL_THREADS = 8
# Held by the call that runs on numba's threads: numba's workqueue layer aborts the process where two threads run
# parallel code at once. Held for good in a forked child (GNU OpenMP's threads are not in it, and its parallel code
# would hang there).
NUMBA_THREADS = [threading.Lock()]

# Threads that take pieces beside the calling thread, started on first use and kept: starting a pool for each call
# costs a good part of a small product (benchmarks/RESULTS.md, "Moved from code comments"). A forked child has none
# of its parent's threads, so it gets a pool of its own.
HELPERS = max(1, CORES - 1)
HELPER_IDS = set()  # native ids of the pool's threads, as they start
# The pool's work, (future, function, arguments, linger), and its threads (started by the first call that gives it
# work).
TASKS = queue.SimpleQueue()
POOL: list = []
POOL_STARTING = threading.Lock()
# Rung by each call that gives the pool work, once the calling thread no longer holds the GIL where it can: a pool
# thread waiting in compiled code goes on, and takes the work. Its words: its rings (the futex word: their low 32
# bits), the pool's threads asleep on it, those in compiled code (the GIL released), the pool's threads, those that
# the last ring calls and have not yet answered, and those that the calling thread's next ring calls.
RINGS, SLEEPERS, INSIDE, THREADS, CALLED, WANTED = range(6)
DOORBELL = np.zeros(6, np.int64)
NO_RING = np.zeros(0, np.int64)
# About 0.1 ms of the cycle counter: longer than the Python between the calls of a loop. Lingering 1.6 ms, one call
# in twenty after a pause took 1.8-2.3 ms instead of 0.2 (512³ on 2 Zen 5 cores; benchmarks/RESULTS.md).
LINGER_CYCLES = 1 << 18


def new_pool_in_child() -> None:
    global TASKS, POOL, POOL_STARTING, HELPER_IDS
    TASKS, POOL, POOL_STARTING, HELPER_IDS = queue.SimpleQueue(), [], threading.Lock(), set()
    KEPT_OFF[0] = None
    NUMBA_THREADS[0] = threading.Lock()
    NUMBA_THREADS[0].acquire()  # (for good: the child's calls take the pool)
    DOORBELL[SLEEPERS:] = 0  # (no thread of the parent's pool here)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=new_pool_in_child)

# The core the calling thread runs on (Linux, glibc), else None. Before handing out pieces, the pool's threads (this
# module's own, never the caller's) are restricted to the cores other than the calling thread's: woken on its own, a
# thread that had slept 0.1 s or more was placed on the core of the thread that woke it (on this project's virtual
# machines, whose idle cores are halted), and shared it with that thread for most of a short product (about half the
# speed: benchmarks/RESULTS.md, "Moved from code comments"). The calling thread's own affinity is never changed: a
# library call leaves its caller's state as it was.
try:
    CURRENT_CORE = ctypes.CDLL(None).sched_getcpu if hasattr(os, "sched_setaffinity") else None
except (OSError, AttributeError):
    CURRENT_CORE = None


def run_in_pieces(calls, threads: bool, then=()) -> None:
    """The calls, then those of ``then`` once every one of ``calls`` has ended, taken one after another by this
    thread and, where ``threads``, by the pool's threads at the same time; errors are raised here. This thread takes
    part, so that no call waits for a thread to wake up where it could start at once (on a busy machine the pool's
    threads may wait a while for a core)."""
    if not threads:  # one after another here: nothing to hand out
        for call in (*calls, *then):
            call()
        return
    pending = queue.SimpleQueue()
    for call in calls:
        pending.put((False, call))
    for call in then:
        pending.put((True, call))
    first_ended = [0]  # calls of the first stage ended (or failed)
    ended = threading.Condition()

    def take():
        while True:
            try:
                second, call = pending.get_nowait()
            except queue.Empty:
                return
            if second:
                with ended:
                    ended.wait_for(lambda: first_ended[0] == len(calls))
                call()
                continue
            try:
                call()
            finally:
                with ended:
                    first_ended[0] += 1
                    ended.notify_all()

    def take_as_helper():
        HELPER_IDS.add(threading.get_native_id())
        take()

    keep_helpers_off_this_core()
    helpers = [give_to_pool(take_as_helper) for _ in range(HELPERS)]
    ring_from_python(HELPERS)
    try:
        take()
    finally:
        errors = [helper.exception() for helper in helpers]  # waits for every helper: they write into our arrays
    for error in errors:
        if error is not None:
            raise error


def threads_for(pieces: int) -> int:
    """The threads that take ``pieces`` pieces of work: one a piece, up to the cores."""
    return min(CORES, pieces)


def run_on_cores(pool_entry, arguments, threads: int, on_numba_threads=None):
    """What entry(*arguments, DOORBELL, True) returns on this thread (NO_RING for DOORBELL where ``threads`` is 1)
    and entry(*arguments, DOORBELL, False) on threads − 1 of the pool's threads at once (POOL_THREADS − 1 at most):
    a compiled call that begins and ends as ``atomics.call_begins`` and ``call_ends`` say (this thread rings the
    doorbell once it has released the GIL), whose threads take its pieces of work by tickets (``atomics``), and
    whose call with True returns once every piece has ended, whichever threads took them. The pool's calls are not
    waited for: a thread woken late finds no ticket left and returns without touching the arrays (so each call has a
    ticket counter of its own), and this thread waits only while another runs a piece, never for a thread to wake
    up.

    Work for more than POOL_THREADS threads runs instead on numba's threads where ``on_numba_threads`` is given
    (``atomics.run_on_numba_threads``: the same entry on each, none of them waiting), one such call at a time:
    another meanwhile, or one in a forked child, takes the pool (16 of its threads made products slower than 8 did,
    on 16 cores: benchmarks/RESULTS.md, "how many threads a product pays for"). The entry is asked for
    (``pool_entry(arguments)``: compiled at its first use) where it runs, so that a machine compiles only the
    variants it runs."""
    entry = pool_entry(arguments)
    if threads > POOL_THREADS and on_numba_threads is not None and NUMBA_THREADS[0].acquire(blocking=False):
        try:
            return on_numba_threads(entry, arguments, threads)
        finally:
            NUMBA_THREADS[0].release()
    helpers = min(threads - 1, POOL_THREADS - 1, HELPERS)
    if helpers > 0:
        keep_helpers_off_this_core()
        for _ in range(helpers):
            give_to_pool(take_tickets_as_helper, entry, arguments, linger=True)
        DOORBELL[WANTED] = helpers
    return entry(*arguments, DOORBELL if helpers > 0 else NO_RING, True)


def take_tickets_as_helper(entry, arguments) -> None:
    """The pool's part of run_on_cores."""
    HELPER_IDS.add(threading.get_native_id())
    entry(*arguments, DOORBELL, False)


# The doorbell's compiled ring and wait (``atomics``, which hands them here as numba loads it: ``compiled_waits``);
# until then the pool's threads wait for work in Python.
COMPILED_WAITS = None


def compiled_waits(ring, wait_for_ring, futex: bool) -> None:
    """Let the pool's threads wait in compiled code from now on (``futex``: whether they can sleep there)."""
    global COMPILED_WAITS
    COMPILED_WAITS = ring, wait_for_ring, futex


def ring_from_python(threads: int) -> None:
    """The doorbell rung from Python for ``threads`` of the pool's threads, for work just given to the pool."""
    if COMPILED_WAITS is not None:  # (else no pool thread waits in compiled code: they wait for the work in Python)
        COMPILED_WAITS[0](DOORBELL, threads)


def next_task(tasks, linger: bool):
    """The pool's next task, taken at once where one waits; else after a wait in compiled code, with the GIL
    released (``atomics.wait_for_ring``: lingering LINGER_CYCLES awake where ``linger``, then asleep until the
    doorbell rings); asleep in Python where numba is not loaded, or the system has no futexes."""
    waits = COMPILED_WAITS
    while waits is not None:
        _, wait_for_ring, futex = waits
        heard = DOORBELL[RINGS]  # (read before looking for work: work given after it rings after it too)
        try:
            return tasks.get_nowait()
        except queue.Empty:
            wait_for_ring(DOORBELL, heard, LINGER_CYCLES if linger else 0)
        if not futex:
            break
        linger = False
    return tasks.get()


def give_to_pool(function, *arguments, linger: bool = False) -> Future:
    """function(*arguments) on a thread of the pool, which then lingers for the next call's work where ``linger``
    (``next_task``); its future."""
    if not POOL:
        with POOL_STARTING:
            if not POOL:
                threads = [threading.Thread(target=work_for_pool, args=(TASKS,), name="dmlops pieces", daemon=True)
                           for _ in range(HELPERS)]
                DOORBELL[THREADS] = len(threads)
                for thread in threads:
                    thread.start()
                POOL.extend(threads)
    future = Future()
    TASKS.put((future, function, arguments, linger))
    return future


def work_for_pool(tasks) -> None:
    linger = False
    while True:
        future, function, arguments, linger = next_task(tasks, linger)
        future.set_running_or_notify_cancel()
        try:
            future.set_result(function(*arguments))
        except BaseException as error:  # (raised where the future is looked at)
            future.set_exception(error)
        del future, function, arguments  # no task's arrays kept past it: they may be large, or the caller's


def keep_helpers_off_this_core() -> None:
    """The pool's threads restricted to the cores other than this thread's (see the note at CURRENT_CORE), unless
    they were so for this core and these helpers at the last call (two system calls a helper fewer)."""
    if CURRENT_CORE is None:
        return
    core = CURRENT_CORE()
    if KEPT_OFF[0] == (core, len(HELPER_IDS)):
        return
    others = os.sched_getaffinity(0) - {core}
    if others:
        for helper in HELPER_IDS:
            os.sched_setaffinity(helper, others)
    KEPT_OFF[0] = core, len(HELPER_IDS)


KEPT_OFF = [None]  # (core, helpers) that the pool's threads were last kept off, and how many there were


def cut(size: int, pieces: int, multiple: int):
    """Up to ``pieces`` ranges (first, last) of about the same length that cover range(size), none empty, their
    bounds multiples of ``multiple`` but the last."""
    if pieces <= 1:  # (at each small call)
        return [(0, size)]
    blocks = -(-size // multiple)
    count = max(1, min(blocks, pieces))
    return [(multiple * (blocks * i // count), min(size, multiple * (blocks * (i + 1) // count))) for i in range(count)]


