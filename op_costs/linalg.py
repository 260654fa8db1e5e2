"""Dense linear algebra and FFTs: the leading-order FLOP counts of the LAPACK / FFT
algorithms behind each op, per matrix, times the batch.

Sources: LAPACK Working Note 41 (Blackford & Dongarra, "Installation Guide for LAPACK", its
table of operation counts) and Golub & Van Loan, Matrix Computations, 4th ed., table 8.6.1.
For an m x n matrix (p = min(m, n)) and k right-hand sides:

* LU (getrf):             2 m n p - (m + n) p^2 + 2 p^3 / 3  (square: 2n^3/3): step k
                          updates an (m - k) x (n - k) block with one multiply-add each
* Cholesky (potrf):       n^3 / 3;   LDL^T (sytrf): n^3 / 3
* solve with factors:     LU / Cholesky / LDL: 2 n^2 k;  triangular: n^2 k
* inverse (getrf+getri):  2 n^3;  from Cholesky (potri): 2 n^3 / 3
* det, slogdet:           LU + the n-term product of the diagonal
* solve (gesv):           LU + 2 n^2 k
* QR (geqrf):             2 m n^2 - 2 n^3 / 3 (m >= n);  forming Q from k reflectors
                          (orgqr): 4 m n k - 2 (m + n) k^2 + 4 k^3 / 3;  applying them
                          (ormqr) to an m x n matrix: 4 m n k - 2 n k^2
* SVD (R-SVD, GvL):       values only 4 m n^2 - 4 n^3 / 3;  with U (thin) and V:
                          6 m n^2 + 20 n^3  (m >= n; transposed otherwise)
* symmetric eig (syevd):  values only 4 n^3 / 3;  with vectors 9 n^3
* general eig (geev):     values only 10 n^3;  with vectors 25 n^3
* matrix exp (Higham's scaling and squaring, degree 13): 6 products (2 n^3 each) and a
  solve with n right-hand sides (2n^3/3 + 2 n^3); the data-dependent squarings are not known
  on fake tensors and not counted
* pseudo-inverse: an SVD + rescaling and one product (2 m n^2)
* FFT of length n (complex): 5 n log2 n FLOPs (the radix-2 count); a real-input or
  real-output transform half of that; multi-dim transforms sum over their dims.
"""
from __future__ import annotations

import math

from op_costs.registry import MATRIX, Cost, first_output, newer_aten_ops, register

aten = __import__("torch").ops.aten


def batch_of(a) -> int:
    return math.prod(a.shape[:-2])


def lu_flops(m: int, n: int) -> float:
    p = min(m, n)
    return 2 * m * n * p - (m + n) * p * p + 2 * p ** 3 / 3


def svd_flops(m: int, n: int, vectors: bool) -> float:
    m, n = max(m, n), min(m, n)
    return 6 * m * n * n + 20 * n ** 3 if vectors else 4 * m * n * n - 4 * n ** 3 / 3


def per_matrix(flops_of):
    """A rule from a per-matrix count ``flops_of(m, n, *args, **kwargs)`` times the batch."""
    def rule(a, *args, out, **kwargs):
        m, n = a.shape[-2], a.shape[-1]
        return Cost(flops=round(batch_of(a) * flops_of(m, n, *args, **kwargs)))
    return rule


def _rhs(b) -> int:
    return b.shape[-1] if len(b.shape) > 1 else 1


register(aten.linalg_lu_factor_ex, aten.linalg_lu, op_class=MATRIX, name="linalg[lu]")(
    per_matrix(lambda m, n, *a, **k: lu_flops(m, n)))
register(aten.linalg_cholesky_ex, aten.linalg_ldl_factor_ex, op_class=MATRIX,
         name="linalg[cholesky]")(per_matrix(lambda m, n, *a, **k: n ** 3 / 3))
register(aten.linalg_inv_ex, op_class=MATRIX, name="linalg[inv]")(
    per_matrix(lambda m, n, *a, **k: 2 * n ** 3))
register(aten.cholesky_inverse, op_class=MATRIX, name="linalg[cholesky_inverse]")(
    per_matrix(lambda m, n, *a, **k: 2 * n ** 3 / 3))
register(aten._linalg_det, aten._linalg_slogdet, op_class=MATRIX, name="linalg[det]")(
    per_matrix(lambda m, n, *a, **k: lu_flops(n, n) + n))
register(aten.geqrf, op_class=MATRIX, name="linalg[geqrf]")(
    per_matrix(lambda m, n, *a, **k: 2 * m * n * min(m, n) - 2 * min(m, n) ** 3 / 3))
register(aten.linalg_matrix_exp, op_class=MATRIX, name="linalg[matrix_exp]")(
    per_matrix(lambda m, n, *a, **k: 6 * 2 * n ** 3 + 2 * n ** 3 / 3 + 2 * n ** 3))


@register(aten.linalg_qr, op_class=MATRIX)
def linalg_qr(a, mode="reduced", *, out, **_):
    m, n = a.shape[-2], a.shape[-1]
    p = min(m, n)
    factor = 2 * m * n * p - 2 * p ** 3 / 3
    form_q = 0 if mode == "r" else 4 * m * p * p - 2 * (m + p) * p * p + 4 * p ** 3 / 3
    return Cost(flops=round(batch_of(a) * (factor + form_q)))


@register(aten.linalg_householder_product, op_class=MATRIX)
def householder_product(a, tau, *, out, **_):
    m, n, k = a.shape[-2], a.shape[-1], tau.shape[-1]
    return Cost(flops=round(batch_of(a) * (4 * m * n * k - 2 * (m + n) * k * k + 4 * k ** 3 / 3)))


@register(aten.ormqr, op_class=MATRIX)
def ormqr(a, tau, c, *args, out, **_):
    m, n, k = c.shape[-2], c.shape[-1], tau.shape[-1]
    return Cost(flops=batch_of(c) * (4 * m * n * k - 2 * n * k * k))


@register(aten._linalg_svd, op_class=MATRIX)
def linalg_svd(a, full_matrices=False, compute_uv=True, *args, out, **_):
    return Cost(flops=round(batch_of(a) * svd_flops(a.shape[-2], a.shape[-1], compute_uv)))


@register(aten.linalg_pinv, op_class=MATRIX)
def linalg_pinv(a, *args, out, **_):
    m, n = a.shape[-2], a.shape[-1]
    return Cost(flops=round(batch_of(a) * (svd_flops(m, n, True) + 2 * max(m, n) * min(m, n) ** 2)))


@register(aten._linalg_eigh, op_class=MATRIX)
def linalg_eigh(a, uplo="L", compute_v=True, *, out, **_):
    n = a.shape[-1]
    return Cost(flops=round(batch_of(a) * (9 * n ** 3 if compute_v else 4 * n ** 3 / 3)))


@register(aten.linalg_eig, op_class=MATRIX)
def linalg_eig(a, *, out, **_):
    return Cost(flops=batch_of(a) * 25 * a.shape[-1] ** 3)


@register(aten._linalg_solve_ex, op_class=MATRIX)
def linalg_solve(a, b, left=True, *args, out, **_):
    n = a.shape[-1]
    right_hand_sides = b.numel // n if n else 0
    return Cost(flops=round(batch_of(a) * lu_flops(n, n) + 2 * n * n * right_hand_sides))


@register(aten.linalg_lu_solve, aten.cholesky_solve, aten.linalg_ldl_solve, op_class=MATRIX)
def factored_solve(first, second, *args, out, **_):
    """(LU, pivots, B), (B, L), (LD, pivots, B): 2 n^2 per right-hand side."""
    result = first_output(out)
    n = result.shape[-2]
    return Cost(flops=2 * n * result.numel)


@register(aten.linalg_solve_triangular, aten.triangular_solve, op_class=MATRIX)
def triangular_solve(first, second, *args, out, **_):
    result = first_output(out)
    n = result.shape[-2]
    return Cost(flops=n * result.numel)


# torch 2.11 has neither of these two (fxroof checks its rules on 2.14)
@register(*newer_aten_ops("2.14", "linalg_matrix_sqrth"), op_class=MATRIX)
def matrix_sqrth(a, *, out, **_):
    """Symmetric eigendecomposition with vectors (9 n^3), then V diag(sqrt w) V^T: n roots,
    n^2 column scalings and one product (2 n^3)."""
    n = a.shape[-1]
    return Cost(flops=batch_of(a) * (11 * n ** 3 + n * n + n))


@register(*newer_aten_ops("2.14", "linalg_polar"), op_class=MATRIX)
def linalg_polar(a, *, out, **_):
    """A = U H from the SVD W S V^T: U = W V^T (2 m n^2), H = V S V^T (n^2 + 2 n^3)."""
    m, n = a.shape[-2], a.shape[-1]
    return Cost(flops=round(batch_of(a) * (svd_flops(m, n, True) + 2 * m * n * n + n * n
                                           + 2 * n ** 3)))


@register(aten.linalg_cross, op_class=MATRIX)
def linalg_cross(a, b, *args, out, **_):
    """Per 3-vector: 6 multiplies and 3 subtractions = 3 per output element."""
    return Cost(flops=3 * out.numel)


# ---- FFT -------------------------------------------------------------------------------------
def fft_flops(shape, dims, real: bool) -> int:
    total = math.prod(shape)
    flops = sum(5 * total * math.log2(shape[d]) for d in dims if shape[d] > 1)
    return round(flops / 2 if real else flops)


@register(aten._fft_c2c, op_class=MATRIX)
def fft_c2c(x, dim, normalization, forward, *, out, **_):
    return Cost(flops=fft_flops(x.shape, dim, real=False))


@register(aten._fft_r2c, op_class=MATRIX)
def fft_r2c(x, dim, normalization, onesided, *, out, **_):
    return Cost(flops=fft_flops(x.shape, dim, real=True))


@register(aten._fft_c2r, op_class=MATRIX)
def fft_c2r(x, dim, normalization, last_dim_size, *, out, **_):
    return Cost(flops=fft_flops(out.shape, dim, real=True))
