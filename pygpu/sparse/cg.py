"""The conjugate gradient method on the GPU (PyCUDA's pycuda.sparse.cg):
``solve_pkt_with_cg(pkt_spmv, b, precon=None, x=None, tol=1e-7,
max_iterations=None, debug=False, pagelocked_allocator=None)`` solves
A x = b for a symmetric positive definite A given as a PacketedSpMV and
returns ``(x, iteration_count, residual_recomputation_count)``.

The scalars (alpha, beta, the residual norms) stay on the GPU: an
iteration enqueues its kernels without waiting.  Convergence
(r.M r < tol**2 * r0.M r0, M the preconditioner) is read through
:class:`~pygpu.sparse.inner.AsyncInnerProduct` every ``check_interval``
iterations, without stalling the GPU; the true residual b - A x replaces
the updated one every ``min(n, 50)`` iterations.
"""

from typing import Any
import numpy as np

import pygpu.driver as drv
import pygpu.gpuarray as gpuarray
from pygpu.elementwise import ElementwiseKernel
from pygpu.sparse.inner import AsyncInnerProduct
from pygpu.tools import dtype_to_ctype

__all__ = ["ConvergenceError", "CGStateContainer", "solve_pkt_with_cg"]


class ConvergenceError(RuntimeError):
    """CG did not reach the tolerance within max_iterations."""


_KERNELS: dict[Any, Any] = {}


def _kernel(key, make):
    from pygpu import tools

    k = (tools._current_context(),) + key
    kern = _KERNELS.get(k)
    if kern is None:
        kern = _KERNELS[k] = make()
    return kern


class CGStateContainer:
    """The solver's state: operator (A), precon (M, identity by default),
    rhs, x, residual, d (search direction), delta (r.Mr, a 0-d GPUArray)."""

    check_interval = 20

    def __init__(self, operator, precon=None, pagelocked_allocator=None):
        if precon is None:
            from pygpu.sparse.operator import IdentityOperator

            precon = IdentityOperator(operator.dtype, operator.shape[0])
        self.operator = operator
        self.precon = precon
        self.pagelocked_allocator = pagelocked_allocator or drv.pagelocked_empty

    def make_lc2_kernel(self, dtype, a_is_gpu, b_is_gpu):
        """The kernel of lc2: out = a x + b y, a and b scalars or 0-d GPUArrays."""
        dtype = np.dtype(dtype)
        t = dtype_to_ctype(dtype)

        def make():
            a_decl = "const %s *a" % t if a_is_gpu else "%s a" % t
            b_decl = "const %s *b" % t if b_is_gpu else "%s b" % t
            return ElementwiseKernel(
                "%s *out, const %s *x, const %s *y, %s, %s" % (t, t, t, a_decl, b_decl),
                "out[i] = %s * x[i] + %s * y[i]"
                % ("a[0]" if a_is_gpu else "a", "b[0]" if b_is_gpu else "b"),
                "pygpu_cg_lc2",
            )

        return _kernel(("lc2", dtype, a_is_gpu, b_is_gpu), make)

    def lc2(self, a, x, b, y, out=None):
        """out = a*x + b*y (out may be x or y); a, b: numbers or 0-d GPUArrays."""
        if out is None:
            out = gpuarray.empty(x.shape, dtype=x.dtype, allocator=x.allocator)
        if not (x.dtype == y.dtype == out.dtype):
            raise TypeError("lc2(): x, y and out must have one dtype")
        if not (x.shape == y.shape == out.shape):
            raise ValueError("lc2(): x, y and out must have one shape")
        a_is_gpu = isinstance(a, gpuarray.GPUArray)
        b_is_gpu = isinstance(b, gpuarray.GPUArray)
        for s, is_gpu in ((a, a_is_gpu), (b, b_is_gpu)):
            if is_gpu and (s.dtype != x.dtype or s.size != 1):
                raise ValueError("lc2(): a GPU scalar must be one element of x's dtype")
        kernel = self.make_lc2_kernel(x.dtype, a_is_gpu, b_is_gpu)
        kernel(out, x, y, a if a_is_gpu else x.dtype.type(a), b if b_is_gpu else x.dtype.type(b))
        return out

    def guarded_div_kernel(self, dtype_x, dtype_y, dtype_z):
        """The kernel of guarded_div: z = y == 0 ? 0 : x / y."""
        tx, ty, tz = (dtype_to_ctype(d) for d in (dtype_x, dtype_y, dtype_z))
        return _kernel(
            ("div", np.dtype(dtype_x), np.dtype(dtype_y), np.dtype(dtype_z)),
            lambda: ElementwiseKernel(
                "%s *z, const %s *x, const %s *y" % (tz, tx, ty),
                "z[i] = y[i] == 0 ? 0 : (x[i] / y[i])",
                "pygpu_cg_divide",
            ),
        )

    def guarded_div(self, a, b):
        """a / b element-wise, 0 where b is 0 (GPUArrays of one shape)."""
        if a.shape != b.shape:
            raise ValueError("guarded_div(): shapes differ: %r, %r" % (a.shape, b.shape))
        result = gpuarray.empty(
            a.shape, dtype=np.result_type(a.dtype, b.dtype), allocator=a.allocator
        )
        self.guarded_div_kernel(a.dtype, b.dtype, result.dtype)(result, a, b)
        return result

    def reset(self, rhs, x=None):
        """Start from x (zeros by default) for the right-hand side rhs."""
        self.rhs = rhs
        if x is None:
            x = gpuarray.zeros(
                self.operator.shape[0], dtype=self.operator.dtype, allocator=rhs.allocator
            )
        self.x = x
        self.residual = rhs - self.operator(x)
        self.d = self.precon(self.residual)
        if self.d is self.residual:  # the identity: d is updated in place, r too
            self.d = self.d.copy()
        delta = AsyncInnerProduct(self.residual, self.d, self.pagelocked_allocator)
        self.real_delta_queue = [delta]
        self.delta = delta.gpu_result

    def one_iteration(self, compute_real_residual=False, check=False):
        """One CG step (Shewchuk's preconditioned CG, appendix B3); with
        check, the new delta is queued for the convergence test."""
        q = self.operator(self.d)
        myip = gpuarray.dot(self.d, q)
        alpha = self.guarded_div(self.delta, myip)
        self.lc2(1, self.x, alpha, self.d, out=self.x)
        if compute_real_residual:
            self.residual = self.lc2(1, self.rhs, -1, self.operator(self.x))
        else:
            self.lc2(1, self.residual, -alpha, q, out=self.residual)
        s = self.precon(self.residual)
        delta_old = self.delta
        if check or compute_real_residual:
            delta = AsyncInnerProduct(self.residual, s, self.pagelocked_allocator)
            self.real_delta_queue.append(delta)
            self.delta = delta.gpu_result
        else:
            self.delta = gpuarray.dot(self.residual, s)
        beta = self.guarded_div(self.delta, delta_old)
        self.lc2(1, s, beta, self.d, out=self.d)

    def run(self, max_iterations=None, tol=1e-7, debug_callback=None):
        """Iterate until r.Mr < tol**2 * r0.Mr0; returns x (a GPUArray) or
        raises ConvergenceError after max_iterations (default
        max(61, 10 n))."""
        n = self.operator.shape[0]
        check_interval = self.check_interval
        if max_iterations is None:
            max_iterations = max(3 * check_interval + 1, 10 * n)
        real_resid_interval = max(1, min(n, 50))
        delta_0 = float(np.asarray(self.real_delta_queue.pop(0).gpu_result.get()))
        if not np.isfinite(delta_0):
            raise ConvergenceError("cg: the initial residual is not finite")
        if delta_0 == 0:
            if debug_callback is not None:
                debug_callback("end", 0, self.x, self.residual, self.d, self.delta)
            return self.x
        iterations = 0
        while iterations < max_iterations:
            compute_real_residual = iterations % real_resid_interval == 0 and iterations > 0
            self.one_iteration(
                compute_real_residual=compute_real_residual, check=iterations % check_interval == 0
            )
            if debug_callback is not None:
                debug_callback(
                    "it+residual" if compute_real_residual else "it",
                    iterations,
                    self.x,
                    self.residual,
                    self.d,
                    self.delta,
                )
            rdq = self.real_delta_queue
            if len(rdq) > 8:  # the GPU is far behind: wait for the oldest
                rdq[0].gpu_finished_evt.synchronize()
            i = 0
            while i < len(rdq):
                delta = rdq[i].get_host_result()
                if delta is None:
                    if not rdq[i].gpu_finished:
                        break  # the later ones are not done either
                    i += 1
                    continue
                rdq.pop(i)
                value = float(np.asarray(delta))
                if not np.isfinite(value):
                    raise ConvergenceError(
                        "cg: the residual became %s (is the matrix "
                        "symmetric positive definite?)" % value
                    )
                if abs(value) < tol * tol * abs(delta_0):
                    if debug_callback is not None:
                        debug_callback("end", iterations, self.x, self.residual, self.d, self.delta)
                    return self.x
            iterations += 1
        # the last queued checks
        for item in self.real_delta_queue:
            item.gpu_finished_evt.synchronize()
            while True:
                delta = item.get_host_result()
                if delta is not None:
                    break
                item.copy_finished_evt.synchronize()
            if abs(float(np.asarray(delta))) < tol * tol * abs(delta_0):
                return self.x
        raise ConvergenceError("cg failed to converge")


def solve_pkt_with_cg(
    pkt_spmv: Any,
    b: "gpuarray.GPUArray",
    precon: Any = None,
    x: "gpuarray.GPUArray | None" = None,
    tol: float = 1e-7,
    max_iterations: "int | None" = None,
    debug: bool = False,
    pagelocked_allocator: Any = None,
) -> "tuple[gpuarray.GPUArray, int, int]":
    """Solve A x = b (A: a PacketedSpMV of an SPD matrix; b, x: GPUArrays in
    the original numbering).  Returns (x, iterations, residual
    recomputations).  precon works in the packets' numbering."""
    if not isinstance(b, gpuarray.GPUArray):
        raise TypeError("solve_pkt_with_cg(): b must be a GPUArray, not %s" % type(b).__name__)
    if b.shape != (pkt_spmv.shape[0],) or b.dtype != pkt_spmv.dtype:
        raise ValueError(
            "solve_pkt_with_cg(): b must have shape (%d,) and dtype %s, not "
            "%r %s" % (pkt_spmv.shape[0], pkt_spmv.dtype, b.shape, b.dtype)
        )
    if x is None:
        x = gpuarray.zeros(pkt_spmv.shape[0], dtype=pkt_spmv.dtype, allocator=b.allocator)
    else:
        x = pkt_spmv.permute(x)
    if pagelocked_allocator is None:
        pagelocked_allocator = drv.pagelocked_empty
    cg = CGStateContainer(pkt_spmv, precon, pagelocked_allocator=pagelocked_allocator)
    cg.reset(pkt_spmv.permute(b), x)
    it_count = [0]
    res_count = [0]

    def debug_callback(what, it_number, x, resid, d, delta):
        if what == "it":
            it_count[0] += 1
        elif what == "it+residual":
            res_count[0] += 1
            it_count[0] += 1

    result = cg.run(max_iterations, tol, debug_callback=debug_callback)
    return pkt_spmv.unpermute(result), it_count[0], res_count[0]
