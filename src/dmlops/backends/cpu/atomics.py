"""Atomic operations and spin waits for the CPU backend's compiled loops (numba), by which the threads of one call
share its work: tickets taken in turn, states published and read across threads; and the doorbell by which a call
hands work to the pool's threads (``pieces``), or numba's threads run it (``run_on_numba_threads``)."""

from __future__ import annotations

import platform
import sys

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .compiled import COMPILED_FROM, fewer_full_collections, native_address
from .jit import callee, compiled, new_array
from .pieces import CALLED, INSIDE, RINGS, SLEEPERS, THREADS, WANTED, compiled_waits


@intrinsic
def take_ticket(typing_context, tickets):
    """tickets[0] += 1 (int64), atomically; returns the value before: each ticket is taken by one thread."""
    def codegen(context, builder, signature, arguments):
        data = context.make_array(signature.args[0])(context, builder, arguments[0]).data
        return builder.atomic_rmw("add", data, ir.Constant(ir.IntType(64), 1), "monotonic")
    return numba.int64(tickets), codegen


@intrinsic
def publish(typing_context, states, at, state):
    """states[at] = state (int64) through a release store: what this thread wrote before it (a total, a carry) is
    seen by any thread that has read that state (``state_of``)."""
    def codegen(context, builder, signature, arguments):
        data = context.make_array(signature.args[0])(context, builder, arguments[0]).data
        builder.store_atomic(context.cast(builder, arguments[2], signature.args[2], numba.int64),
                             builder.gep(data, [arguments[1]]), "release", 8)
        return context.get_dummy_value()
    return numba.types.none(states, at, state), codegen


@intrinsic
def state_of(typing_context, states, at):
    """states[at] (int64) through an acquire load: read from memory at every call (a spin loop's plain load may be
    hoisted out of it), and what its publisher wrote before storing it is seen after."""
    def codegen(context, builder, signature, arguments):
        data = context.make_array(signature.args[0])(context, builder, arguments[0]).data
        return builder.load_atomic(builder.gep(data, [arguments[1]]), "acquire", 8)
    return numba.int64(states, at), codegen


@intrinsic
def memory_fence(typing_context):
    """A full fence: no load or store of this thread moves across it."""
    def codegen(context, builder, signature, arguments):
        builder.fence("seq_cst")
        return context.get_dummy_value()
    return numba.types.none(), codegen


@intrinsic
def spin_pause(typing_context):
    """The processor's hint that this is a spin loop (x86: pause, which also keeps the loop from flooding the
    memory system with loads); nothing elsewhere."""
    def codegen(context, builder, signature, arguments):
        pause(builder)
        return context.get_dummy_value()
    return numba.types.none(), codegen


def pause(builder):
    """LLVM IR of spin_pause."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        builder.call(builder.module.declare_intrinsic("llvm.x86.sse2.pause", fnty=ir.FunctionType(ir.VoidType(), [])),
                     [])


@intrinsic
def count_up(typing_context, states, at):
    """states[at] += 1 (int64), atomically, releasing what this thread wrote before it to any thread that reads the
    new count (``state_of``)."""
    def codegen(context, builder, signature, arguments):
        data = context.make_array(signature.args[0])(context, builder, arguments[0]).data
        builder.atomic_rmw("add", builder.gep(data, [arguments[1]]), ir.Constant(ir.IntType(64), 1), "acq_rel")
        return context.get_dummy_value()
    return numba.types.none(states, at), codegen


@intrinsic
def count_down(typing_context, states, at):
    """states[at] −= 1 (int64), atomically, as ``count_up``; returns the value before."""
    def codegen(context, builder, signature, arguments):
        data = context.make_array(signature.args[0])(context, builder, arguments[0]).data
        return builder.atomic_rmw("sub", builder.gep(data, [arguments[1]]), ir.Constant(ir.IntType(64), 1),
                                  "acq_rel")
    return numba.int64(states, at), codegen


# Linux's futex and sched_yield system calls on x86-64 and on 64-bit Arm (None elsewhere: the pool's threads then
# sleep in Python, and spin waits only pause).
LINUX_CALLS = {"x86_64": (202, 24), "amd64": (202, 24), "aarch64": (98, 124)}.get(platform.machine().lower()) \
    if sys.platform.startswith("linux") else None
SYSTEM_FUTEX, SYSTEM_YIELD = LINUX_CALLS or (None, None)
FUTEX_WAIT, FUTEX_WAKE = 128, 129  # (their private forms: the waiters are threads of this process)
# Pauses of a spin wait (``spin_wait``) after which each step gives the core away: about 0.1 to 0.5 ms
YIELD_AFTER = 1 << 12


def system_call(builder, number: int, arguments: list):
    """syscall(number, *arguments, 0, ...): six arguments, int64."""
    int64 = ir.IntType(64)
    syscall = builder.module.globals.get("syscall") or ir.Function(
        builder.module, ir.FunctionType(int64, [int64], var_arg=True), "syscall")
    null = ir.Constant(int64, 0)
    return builder.call(syscall, [ir.Constant(int64, number), *arguments, *[null] * (6 - len(arguments))])


@intrinsic
def futex(typing_context, words, operation, value):
    """futex(&words[0], operation, value) where the system has it (the 32 bits at the start of an int64 array, on
    processors whose bytes are little-endian): FUTEX_WAIT sleeps while they hold ``value``, FUTEX_WAKE wakes up to
    ``value`` threads sleeping on them. Returns the system call's result (−1 where it has none)."""
    def codegen(context, builder, signature, arguments):
        int64 = ir.IntType(64)
        if SYSTEM_FUTEX is None:
            return ir.Constant(int64, -1)
        data = context.make_array(signature.args[0])(context, builder, arguments[0]).data
        return system_call(builder, SYSTEM_FUTEX, [builder.ptrtoint(data, int64),
                                                   context.cast(builder, arguments[1], signature.args[1], numba.int64),
                                                   context.cast(builder, arguments[2], signature.args[2], numba.int64)])
    return numba.int64(words, operation, value), codegen


@intrinsic
def spin_wait(typing_context, steps):
    """Step ``steps`` of a wait for another thread; returns steps + 1. A pause (``spin_pause``), and from step
    YIELD_AFTER on, the core given to any other thread that is ready to run (sched_yield, where the system has it):
    where threads outnumber the cores (another library's pool spinning beside a product's), the thread waited for
    may be one that waits for a core, and a wait of pauses alone would hold that core for the system's whole time
    slice."""
    def codegen(context, builder, signature, arguments):
        pause(builder)
        if SYSTEM_YIELD is not None:
            with builder.if_then(builder.icmp_signed(">=", arguments[0], ir.Constant(ir.IntType(64), YIELD_AFTER))):
                system_call(builder, SYSTEM_YIELD, [])
        return builder.add(arguments[0], ir.Constant(ir.IntType(64), 1))
    return numba.int64(numba.int64), codegen


@intrinsic
def cycle_count(typing_context):
    """The processor's cycle counter (x86: its time-stamp counter, which counts at a fixed rate)."""
    def codegen(context, builder, signature, arguments):
        counter = builder.module.declare_intrinsic("llvm.readcyclecounter", fnty=ir.FunctionType(ir.IntType(64), []))
        return builder.call(counter, [])
    return numba.int64(), codegen


# How long a call that has handed out pieces waits at its end, spinning, for the pool's threads to leave Python
# (about 50 µs): their Python between compiled calls takes a few microseconds.
HANDBACK_CYCLES = 1 << 17


@callee
def ring_doorbell(doorbell, threads):
    """The doorbell rung for ``threads`` of the pool's threads (a doorbell of no elements: nothing): that many of
    those waiting on it go on, woken where they sleep."""
    if doorbell.shape[0] == 0:
        return
    publish(doorbell, CALLED, threads)  # (before the ring: a thread that hears it sees the count)
    count_up(doorbell, RINGS)
    if state_of(doorbell, SLEEPERS) > 0:
        futex(doorbell, FUTEX_WAKE, threads)


@compiled
def ring(doorbell, threads):
    """ring_doorbell, called from Python (``pieces.ring_from_python``): compiled at its first such call, not into
    the compiled calls that ring it themselves (``call_begins``)."""
    ring_doorbell(doorbell, threads)


@compiled
def wait_for_ring(doorbell, heard, cycles):
    """A pool thread's wait, with the GIL released, until a ring after ``heard`` (the doorbell's rings) calls it:
    spinning for up to ``cycles`` cycles, then asleep where the system has futexes (elsewhere it returns then: the
    thread sleeps in Python). A ring calls the threads that hear it first, as many as it asks for; the others wait
    on. The thread counts as in compiled code meanwhile."""
    count_up(doorbell, INSIDE)
    start = cycle_count()
    while True:
        rings = state_of(doorbell, RINGS)
        if rings != heard:
            if count_down(doorbell, CALLED) > 0:
                break
            heard = rings  # (rung for others)
        elif cycle_count() - start < cycles:
            spin_pause()
        elif SYSTEM_FUTEX is None:
            break
        else:
            count_up(doorbell, SLEEPERS)  # (before it looks again: a ring after that look wakes it)
            if state_of(doorbell, RINGS) == heard:
                futex(doorbell, FUTEX_WAIT, heard & 0xFFFFFFFF)
            count_down(doorbell, SLEEPERS)
    count_down(doorbell, INSIDE)


@callee
def call_begins(doorbell, caller):
    """At the start of a compiled call that the pool shares (``pieces.run_on_cores``), the GIL released: the
    calling thread rings the doorbell (none: nothing) for the pool threads it wants, a pool thread counts itself in
    compiled code."""
    if caller:
        ring_doorbell(doorbell, doorbell[WANTED] if doorbell.shape[0] > 0 else 0)
    elif doorbell.shape[0] > 0:
        count_up(doorbell, INSIDE)


@callee
def call_ends(doorbell, caller):
    """At its end: a pool thread counts itself out of compiled code; the calling thread waits, spinning for up to
    HANDBACK_CYCLES, while a pool thread is in Python (the GIL held or wanted). Blocked on the GIL instead, the
    calling thread may leave its core idle, and on a virtual machine an idle core may take a millisecond to wake
    (512³ products on 2 Zen 5 cores: about one in fifty took 0.5 to 30 ms so)."""
    if doorbell.shape[0] == 0:
        return
    if not caller:
        count_down(doorbell, INSIDE)
        return
    if SYSTEM_FUTEX is None:  # (its pool's threads sleep in Python)
        return
    start = cycle_count()
    while state_of(doorbell, INSIDE) < state_of(doorbell, THREADS) and cycle_count() - start < HANDBACK_CYCLES:
        spin_pause()


compiled_waits(ring, wait_for_ring, SYSTEM_FUTEX is not None)


# The type of a gufunc's kernel, as numba's threading layer calls it for each thread's share of the calls: (the
# arrays' pointers at its share, its share's dimensions, the arrays' steps, data); and of the layer's parallel_for.
BYTES = ir.IntType(8).as_pointer()
KERNEL_TYPE = ir.FunctionType(ir.VoidType(), [BYTES.as_pointer(), ir.IntType(64).as_pointer(),
                                              ir.IntType(64).as_pointer(), BYTES])
PARALLEL_FOR_TYPE = ir.FunctionType(ir.VoidType(), [BYTES] * 5 + [ir.IntType(64)] * 3)


@intrinsic
def calls_on_threads(typing_context, address, literals, arguments, returned):
    """returned[i] = 1 where the i-th call of the compiled function at ``address`` returned True, 0 where False, 2
    where it raised, each given (``literals`` (a literal int) literal strings, *arguments, no doorbell, False), all
    at once on numba's threading layer: an entry point's machine code (``compiled.native_address``) called through
    numba's calling convention, by the layer's ``numba_parallel_for`` as a prange is (a gufunc's kernel, here a loop
    of calls, run on each thread for its share)."""
    if not isinstance(literals, types.IntegerLiteral):
        return None
    numba.get_num_threads()  # (starts numba's threading layer, whose functions the code calls)
    # (numba passes a literal string as an unused pointer)
    argument_types = ((types.voidptr,) * literals.literal_value + tuple(arguments.types)
                      + (types.Array(types.int64, 1, "C"), types.boolean))

    def codegen(context, builder, signature, values):
        # (and again wherever numba loads the code from its cache, before it links the layer's functions in)
        context.active_code_library._reload_init.add(numba.get_num_threads)
        int64, module = ir.IntType(64), builder.module
        kernel = ir.Function(module, KERNEL_TYPE, module.get_unique_name("calls_on_threads"))
        kernel.linkage = "internal"
        calls = ir.IRBuilder(kernel.append_basic_block())
        pointers, dimensions, _, data = kernel.args
        kept = calls.load(calls.bitcast(data, context.get_value_type(arguments).as_pointer()))
        function_type = context.call_conv.get_function_type(types.boolean, argument_types)
        address_at = calls.bitcast(calls.load(calls.gep(pointers, [int64(1)])), int64.as_pointer())
        function = calls.inttoptr(calls.load(address_at), function_type.as_pointer())
        no_doorbell = context.make_array(argument_types[-2])(context, calls)
        context.populate_array(no_doorbell, data=ir.Constant(int64.as_pointer(), None), shape=[int64(0)],
                               strides=[int64(8)], itemsize=int64(8), meminfo=None)
        passed = ([ir.Constant(BYTES, None)] * literals.literal_value
                  + [calls.extract_value(kept, i) for i in range(len(arguments))]
                  + [no_doorbell._getvalue(), ir.IntType(1)(0)])
        results = calls.load(pointers)
        with cgutils.for_range(calls, calls.load(dimensions)) as loop:
            status, result = context.call_conv.call_function(calls, function, types.boolean, argument_types, passed)
            outcome = calls.select(status.is_error, ir.IntType(8)(2), calls.zext(result, ir.IntType(8)))
            calls.store(outcome, calls.gep(results, [loop.index]))
        calls.ret_void()

        # (the arrays: returned, a step of 1 from one call to the next; the address, the same for each)
        returned = context.make_array(signature.args[3])(context, builder, values[3])
        count = builder.extract_value(returned.shape, 0)
        address = builder.bitcast(cgutils.alloca_once_value(builder, values[0]), BYTES)
        pointers = cgutils.pack_array(builder, [builder.bitcast(returned.data, BYTES), address])
        steps = cgutils.pack_array(builder, [int64(1), int64(0)])
        layer_threads = builder.call(cgutils.get_or_insert_function(module, ir.FunctionType(int64, []),
                                                                    "get_num_threads"), [])
        threads = builder.select(builder.icmp_signed("<", count, layer_threads), count, layer_threads)
        passed = [builder.bitcast(cgutils.alloca_once_value(builder, value), BYTES)
                  for value in (pointers, cgutils.pack_array(builder, [count]), steps, values[2])]
        # (no inner dimensions, two arrays)
        builder.call(cgutils.get_or_insert_function(module, PARALLEL_FOR_TYPE, "numba_parallel_for"),
                     [builder.bitcast(kernel, BYTES), *passed, int64(0), int64(2), threads])
        return context.get_dummy_value()
    return types.none(address, literals, arguments, returned), codegen


@compiled
def run_on_threads(address, literals, arguments, threads):
    """The entry point at ``address`` (the pool's entry of a call's work, ``pieces.run_on_cores``), whose first
    ``literals`` arguments (a literal int) are literal strings, called with (those, *arguments, no doorbell, False)
    ``threads`` times on numba's threading layer at once, as a prange's body is: none waits for the others' pieces,
    the call returns once every one has. Whether every call returned True. Without a prange (``calls_on_threads``):
    numba compiles a prange's body as a function of its own, and a function with a prange through its parallel
    passes, about half a CPU-second more at a first product (Zen 4)."""
    returned = new_array(threads, np.uint8)
    calls_on_threads(address, literals, arguments, returned)
    every = True
    for outcome in returned:
        if outcome == 2:
            raise RuntimeError("CPU quantized matmul: a thread's part of the product raised")
        every &= outcome == 1
    return every


# For each pool entry run on numba's threads: run_on_threads' entry point for its arguments, the entry's address and
# its literal arguments' count.
ON_THREADS: dict = {}


def run_on_numba_threads(entry, arguments, threads: int) -> bool:
    """run_on_threads of the pool's entry point ``entry`` (compiled for arguments + (a doorbell, a bool), the literal
    strings first), from Python."""
    found = ON_THREADS.get(entry)
    if found is None:
        signature = COMPILED_FROM[entry][1]
        literals = sum(isinstance(kind, types.StringLiteral) for kind in signature)
        with fewer_full_collections():
            run = run_on_threads.compile((types.int64, types.literal(literals), types.Tuple(signature[literals:-2]),
                                          types.int64))
        found = ON_THREADS[entry] = run, native_address(entry), literals
    run, address, literals = found
    return run(address, literals, arguments[literals:], threads)
