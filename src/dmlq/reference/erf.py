"""Vectorised double-precision ``erf``: a NumPy port of fdlibm's ``s_erf.c``.

The algorithm, interval split and coefficients are Sun fdlibm's; the polynomial evaluation
order is the one glibc uses in ``sysdeps/ieee754/dbl-64/s_erf.c`` (fdlibm's Horner schemes
regrouped into ``r1 + z2*r2 + z4*...`` blocks by N. Shimizu, 1997), because that is what
CPython's ``math.erf`` calls on glibc systems (before glibc's switch to CORE-MATH's correctly
rounded erf) and the grouping changes the last bit of some results.  Every other operation is
performed in the same order as in C, so results are bit-identical to glibc's ``erf`` except
where NumPy's float64 ``exp`` differs from glibc's ``exp`` in the last bit (then the result
differs by at most 1 ulp).

======================  ====================================================================
``|x|``                 method
======================  ====================================================================
NaN                     NaN
``inf``                 ``sign(x) * 1``
``< 2**-28``            ``x + efx*x`` (scaled by 16 below ``2**-1015`` to avoid underflow)
``< 0.84375``           ``x + x*P(x*x)/Q(x*x)``  (``pp``/``qq``)
``< 1.25``              ``sign(x) * (erx + P(|x|-1)/Q(|x|-1))``  (``pa``/``qa``)
``< 1/0.35``            ``sign(x) * (1 - exp(-z*z-0.5625)*exp((z-x)*(z+x)+R/S)/x)``, ``ra``/``sa``
``< 6``                 as above with ``rb``/``sb``
``>= 6``                ``sign(x) * 1``
======================  ====================================================================

``z`` is ``|x|`` with the low 32 bits of its IEEE-754 representation cleared, and ``R``/``S``
are polynomials in ``1/x**2``.  Interval tests compare the high 32-bit word, as in C, so the
``1/0.35`` boundary is really ``0x4006DB6E00000000`` (about 2.8571434).

>>> import math
>>> import numpy as np
>>> x = np.array([-np.inf, -1.0, -0.0, 0.5, 2.0, 7.0, np.nan])
>>> erf(x)
array([-1.        , -0.84270079, -0.        ,  0.52049988,  0.99532227,
        1.        ,         nan])
>>> bool(erf(np.array(0.5)) == math.erf(0.5))
True
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["erf"]

# Coefficients from Sun fdlibm s_erf.c (Copyright (C) 1993 Sun Microsystems, Inc.; freely
# redistributable provided the notice is preserved).  Hex words are the IEEE-754 high/low halves.
_TINY = 1e-300
_ERX = 8.45062911510467529297e-01  # 0x3FEB0AC1, 0x60000000  (float)0.84506291151
_EFX = 1.28379167095512586316e-01  # 0x3FC06EBA, 0x8214DB69  2/sqrt(pi) - 1
_EFX16 = 16.0 * _EFX  # exact (power-of-two scaling); glibc writes (16.0 * efx)

# erf on [0, 0.84375]
_PP0 = 1.28379167095512558561e-01  # 0x3FC06EBA, 0x8214DB68
_PP1 = -3.25042107247001499370e-01  # 0xBFD4CD7D, 0x691CB913
_PP2 = -2.84817495755985104766e-02  # 0xBF9D2A51, 0xDBD7194F
_PP3 = -5.77027029648944159157e-03  # 0xBF77A291, 0x236668E4
_PP4 = -2.37630166566501626084e-05  # 0xBEF8EAD6, 0x120016AC
_QQ1 = 3.97917223959155352819e-01  # 0x3FD97779, 0xCDDADC09
_QQ2 = 6.50222499887672944485e-02  # 0x3FB0A54C, 0x5536CEBA
_QQ3 = 5.08130628187576562776e-03  # 0x3F74D022, 0xC4D36B0F
_QQ4 = 1.32494738004321644526e-04  # 0x3F215DC9, 0x221C1A10
_QQ5 = -3.96022827877536812320e-06  # 0xBED09C43, 0x42A26120

# erf on [0.84375, 1.25]
_PA0 = -2.36211856075265944077e-03  # 0xBF6359B8, 0xBEF77538
_PA1 = 4.14856118683748331666e-01  # 0x3FDA8D00, 0xAD92B34D
_PA2 = -3.72207876035701323847e-01  # 0xBFD7D240, 0xFBB8C3F1
_PA3 = 3.18346619901161753674e-01  # 0x3FD45FCA, 0x805120E4
_PA4 = -1.10894694282396677476e-01  # 0xBFBC6398, 0x3D3E28EC
_PA5 = 3.54783043256182359371e-02  # 0x3FA22A36, 0x599795EB
_PA6 = -2.16637559486879084300e-03  # 0xBF61BF38, 0x0A96073F
_QA1 = 1.06420880400844228286e-01  # 0x3FBB3E66, 0x18EEE323
_QA2 = 5.40397917702171048937e-01  # 0x3FE14AF0, 0x92EB6F33
_QA3 = 7.18286544141962662868e-02  # 0x3FB2635C, 0xD99FE9A7
_QA4 = 1.26171219808761642112e-01  # 0x3FC02660, 0xE763351F
_QA5 = 1.36370839120290507362e-02  # 0x3F8BEDC2, 0x6B51DD1C
_QA6 = 1.19844998467991074170e-02  # 0x3F888B54, 0x5735151D

# erfc on [1.25, 1/0.35]
_RA0 = -9.86494403484714822705e-03  # 0xBF843412, 0x600D6435
_RA1 = -6.93858572707181764372e-01  # 0xBFE63416, 0xE4BA7360
_RA2 = -1.05586262253232909814e01  # 0xC0251E04, 0x41B0E726
_RA3 = -6.23753324503260060396e01  # 0xC04F300A, 0xE4CBA38D
_RA4 = -1.62396669462573470355e02  # 0xC0644CB1, 0x84282266
_RA5 = -1.84605092906711035994e02  # 0xC067135C, 0xEBCCABB2
_RA6 = -8.12874355063065934246e01  # 0xC0545265, 0x57E4D2F2
_RA7 = -9.81432934416914548592e00  # 0xC023A0EF, 0xC69AC25C
_SA1 = 1.96512716674392571292e01  # 0x4033A6B9, 0xBD707687
_SA2 = 1.37657754143519042600e02  # 0x4061350C, 0x526AE721
_SA3 = 4.34565877475229228821e02  # 0x407B290D, 0xD58A1A71
_SA4 = 6.45387271733267880336e02  # 0x40842B19, 0x21EC2868
_SA5 = 4.29008140027567833386e02  # 0x407AD021, 0x57700314
_SA6 = 1.08635005541779435134e02  # 0x405B28A3, 0xEE48AE2C
_SA7 = 6.57024977031928170135e00  # 0x401A47EF, 0x8E484A93
_SA8 = -6.04244152148580987438e-02  # 0xBFAEEFF2, 0xEE749A62

# erfc on [1/0.35, 28] (erf uses it up to 6)
_RB0 = -9.86494292470009928597e-03  # 0xBF843412, 0x39E86F4A
_RB1 = -7.99283237680523006574e-01  # 0xBFE993BA, 0x70C285DE
_RB2 = -1.77579549177547519889e01  # 0xC031C209, 0x555F995A
_RB3 = -1.60636384855821916062e02  # 0xC064145D, 0x43C5ED98
_RB4 = -6.37566443368389627722e02  # 0xC083EC88, 0x1375F228
_RB5 = -1.02509513161107724954e03  # 0xC0900461, 0x6A2E5992
_RB6 = -4.83519191608651397019e02  # 0xC07E384E, 0x9BDC383F
_SB1 = 3.03380607434824582924e01  # 0x403E568B, 0x261D5190
_SB2 = 3.25792512996573918826e02  # 0x40745CAE, 0x221B9F0A
_SB3 = 1.53672958608443695994e03  # 0x409802EB, 0x189D5118
_SB4 = 3.19985821950859553908e03  # 0x40A8FFB7, 0x688C246A
_SB5 = 2.55305040643316442583e03  # 0x40A3F219, 0xCEDF3BE6
_SB6 = 4.74528541206955367215e02  # 0x407DA874, 0xE79FE763
_SB7 = -2.24409524465858183362e01  # 0xC03670E2, 0x42712D62

# Thresholds on the high 32-bit word of |x| (C: ix = hx & 0x7fffffff).
_HI_NONFINITE = 0x7FF00000  # inf / NaN
_HI_SUBNORMAL_GUARD = 0x00800000  # |x| < 2**-1015: scale by 16 to avoid spurious underflow
_HI_TINY = 0x3E300000  # 2**-28
_HI_SMALL = 0x3FEB0000  # 0.84375
_HI_MEDIUM = 0x3FF40000  # 1.25
_HI_ERFC_SPLIT = 0x4006DB6E  # ~1/0.35
_HI_SATURATE = 0x40180000  # 6

_LOW_WORD_CLEAR = np.uint64(0xFFFFFFFF00000000)

# The only operation not bit-reproducible against glibc: NumPy's SIMD float64 exp (e.g. its
# AVX-512F kernel) can differ from glibc's __ieee754_exp in the last bit.  Module-level so tests
# can substitute glibc's exp and check the rest of the algorithm for exact equality.
_exp = np.exp

Float64Array = npt.NDArray[np.float64]


def _small(x: Float64Array) -> Float64Array:
    """``2**-28 <= |x| < 0.84375``: ``x + x*r/s`` with ``r/s`` a rational in ``x*x``."""
    z = x * x
    r1 = _PP0 + z * _PP1
    z2 = z * z
    r2 = _PP2 + z * _PP3
    z4 = z2 * z2
    s1 = 1.0 + z * _QQ1
    s2 = _QQ2 + z * _QQ3
    s3 = _QQ4 + z * _QQ5
    r = r1 + z2 * r2 + z4 * _PP4
    s = s1 + z2 * s2 + z4 * s3
    y = r / s
    return x + x * y


def _medium(x: Float64Array, negative: npt.NDArray[np.bool_]) -> Float64Array:
    """``0.84375 <= |x| < 1.25``: ``sign(x) * (erx + P(s)/Q(s))`` with ``s = |x| - 1``."""
    s = np.abs(x) - 1.0
    p1 = _PA0 + s * _PA1
    s2 = s * s
    q1 = 1.0 + s * _QA1
    s4 = s2 * s2
    p2 = _PA2 + s * _PA3
    s6 = s4 * s2
    q2 = _QA2 + s * _QA3
    p3 = _PA4 + s * _PA5
    q3 = _QA4 + s * _QA5
    p = p1 + s2 * p2 + s4 * p3 + s6 * _PA6
    q = q1 + s2 * q2 + s4 * q3 + s6 * _QA6
    pq = p / q
    return np.where(negative, -_ERX - pq, _ERX + pq)


def _erfc_ra_sa(s: Float64Array) -> tuple[Float64Array, Float64Array]:
    """``R``, ``S`` for ``1.25 <= |x| < 1/0.35`` (``s = 1/x**2``)."""
    r1 = _RA0 + s * _RA1
    s2 = s * s
    t1 = 1.0 + s * _SA1
    s4 = s2 * s2
    r2 = _RA2 + s * _RA3
    s6 = s4 * s2
    t2 = _SA2 + s * _SA3
    s8 = s4 * s4
    r3 = _RA4 + s * _RA5
    t3 = _SA4 + s * _SA5
    r4 = _RA6 + s * _RA7
    t4 = _SA6 + s * _SA7
    big_r = r1 + s2 * r2 + s4 * r3 + s6 * r4
    big_s = t1 + s2 * t2 + s4 * t3 + s6 * t4 + s8 * _SA8
    return big_r, big_s


def _erfc_rb_sb(s: Float64Array) -> tuple[Float64Array, Float64Array]:
    """``R``, ``S`` for ``1/0.35 <= |x| < 6`` (``s = 1/x**2``)."""
    r1 = _RB0 + s * _RB1
    s2 = s * s
    t1 = 1.0 + s * _SB1
    s4 = s2 * s2
    r2 = _RB2 + s * _RB3
    s6 = s4 * s2
    t2 = _SB2 + s * _SB3
    r3 = _RB4 + s * _RB5
    t3 = _SB4 + s * _SB5
    t4 = _SB6 + s * _SB7
    big_r = r1 + s2 * r2 + s4 * r3 + s6 * _RB6
    big_s = t1 + s2 * t2 + s4 * t3 + s6 * t4
    return big_r, big_s


def _large(x: Float64Array, negative: npt.NDArray[np.bool_], use_ra: npt.NDArray[np.bool_]) -> Float64Array:
    """``1.25 <= |x| < 6``: ``sign(x) * (1 - exp(-x*x - 0.5625 + R/S) / |x|)``."""
    ax = np.abs(x)
    s = 1.0 / (ax * ax)
    ra, sa = _erfc_ra_sa(s)
    rb, sb = _erfc_rb_sb(s)
    big_r = np.where(use_ra, ra, rb)
    big_s = np.where(use_ra, sa, sb)
    # z = |x| with the low 32 bits cleared, so -z*z is exact and (z-x)*(z+x) carries the rest.
    z = (ax.view(np.uint64) & _LOW_WORD_CLEAR).view(np.float64)
    r = _exp(-z * z - 0.5625) * _exp((z - ax) * (z + ax) + big_r / big_s)
    q = r / ax
    return np.where(negative, q - 1.0, 1.0 - q)


def erf(x: npt.ArrayLike) -> Float64Array:
    """Error function of a float64 array, elementwise, bit-compatible with glibc's ``erf``.

    Parameters
    ----------
    x:
        Input values; converted to a float64 array.

    Returns
    -------
    numpy.ndarray
        ``erf(x)`` as float64 with the same shape as ``x`` (signed zeros preserved).

    >>> erf(np.array([[0.0, 1.0], [-3.0, 1e-310]]))
    array([[ 0.00000000e+000,  8.42700793e-001],
           [-9.99977910e-001,  1.12837917e-310]])
    """
    arr = np.asarray(x, dtype=np.float64)
    flat = arr.reshape(-1)
    out = np.empty_like(flat)

    hx = (flat.view(np.uint64) >> np.uint64(32)).astype(np.int64)
    ix = hx & 0x7FFFFFFF
    negative = hx >= 0x80000000

    with np.errstate(all="ignore"):
        # Non-finite: (1 - 2*signbit) + 1/x  ->  NaN stays NaN, +-inf -> +-1.
        m = ix >= _HI_NONFINITE
        if m.any():
            v = flat[m]
            out[m] = np.where(negative[m], -1.0, 1.0) + 1.0 / v

        # |x| < 2**-28 (including +-0 and subnormals).
        m = ix < _HI_TINY
        if m.any():
            v = flat[m]
            guard = ix[m] < _HI_SUBNORMAL_GUARD
            out[m] = np.where(guard, 0.0625 * (16.0 * v + _EFX16 * v), v + _EFX * v)

        m = (ix >= _HI_TINY) & (ix < _HI_SMALL)
        if m.any():
            out[m] = _small(flat[m])

        m = (ix >= _HI_SMALL) & (ix < _HI_MEDIUM)
        if m.any():
            out[m] = _medium(flat[m], negative[m])

        m = (ix >= _HI_MEDIUM) & (ix < _HI_SATURATE)
        if m.any():
            out[m] = _large(flat[m], negative[m], ix[m] < _HI_ERFC_SPLIT)

        # 6 <= |x| < inf: +-(1 - tiny), which rounds to +-1 (inexact).
        m = (ix >= _HI_SATURATE) & (ix < _HI_NONFINITE)
        if m.any():
            out[m] = np.where(negative[m], _TINY - 1.0, 1.0 - _TINY)

    return out.reshape(arr.shape)
