"""Atomic operations and spin waits for the CPU backend's compiled loops (numba), by which the threads of one call
share its work: tickets taken in turn, states published and read across threads."""

from __future__ import annotations

import platform

import numba
from llvmlite import ir
from numba.extending import intrinsic


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
        if platform.machine().lower() in ("x86_64", "amd64"):
            pause = builder.module.declare_intrinsic("llvm.x86.sse2.pause", fnty=ir.FunctionType(ir.VoidType(), []))
            builder.call(pause, [])
        return context.get_dummy_value()
    return numba.types.none(), codegen


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
def cycle_count(typing_context):
    """The processor's cycle counter (x86: its time-stamp counter, which counts at a fixed rate)."""
    def codegen(context, builder, signature, arguments):
        counter = builder.module.declare_intrinsic("llvm.readcyclecounter", fnty=ir.FunctionType(ir.IntType(64), []))
        return builder.call(counter, [])
    return numba.int64(), codegen


@numba.njit(nogil=True, cache=True)
def ring(doorbell):
    """Every element of ``doorbell`` (int64; none) counted up: the threads waiting for it to ring go on."""
    for at in range(doorbell.shape[0]):
        count_up(doorbell, at)


@numba.njit(nogil=True, cache=True)
def wait_for_ring(doorbell, heard, cycles):
    """Spins, with the GIL released, until doorbell[0] is no longer ``heard`` or ``cycles`` cycles have passed."""
    start = cycle_count()
    while state_of(doorbell, 0) == heard and cycle_count() - start < cycles:
        spin_pause()
