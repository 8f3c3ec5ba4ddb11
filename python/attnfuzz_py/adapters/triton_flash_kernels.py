"""The kernels of triton_flash.py (imported after TRITON_INTERPRET is decided: Triton reads it at import)."""
import inspect

import triton
import triton.language as tl


def _jit_unspecialized(fn):
    """@triton.jit, with no specialization on the values of the arguments that are not constexpr.

    By default Triton compiles a kernel again for every new pattern of its integer arguments
    (each one equal to 1, divisible by 16, or neither) and of its pointers' 16-byte alignment,
    and its cache is keyed by that pattern. A campaign draws sizes, strides and offsets at
    random: on the H200 the Python campaign's TritonFlash, specialized, compiled 67 times in
    202 s (2.7 s each) on a warm cache. Here only the constexprs (the tile sizes, the
    power-of-two head-dim blocks, IEEE) select a kernel: a few per dtype. The head dims are
    plain arguments for that reason."""
    params = [n for n, prm in inspect.signature(fn).parameters.items() if prm.annotation is inspect.Parameter.empty]
    return triton.jit(fn, do_not_specialize=params, do_not_specialize_on_alignment=params)


@_jit_unspecialized
def _fwd(Q, K, V, M, O, L, sq0, sq1, sq2, sq3, sk0, sk1, sk2, sk3, sv0, sv1, sv2, sv3, so0, so1, so2, so3, sl0, sl1, sl2, Sq, Skv, Hq, group, scale,
         DQK, DV, BM: tl.constexpr, BN: tl.constexpr, BDQK: tl.constexpr,
         BDV: tl.constexpr, IEEE: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // Hq, bh % Hq
    hk = h // group
    rm = pid_m * BM + tl.arange(0, BM)
    rd, rv = tl.arange(0, BDQK), tl.arange(0, BDV)
    q = tl.load(Q + b * sq0 + h * sq1 + rm[:, None] * sq2 + rd[None, :] * sq3,
                mask=(rm[:, None] < Sq) & (rd[None, :] < DQK), other=0.0)
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, BDV], tl.float32)
    for start in tl.range(0, Skv, BN):
        rn = start + tl.arange(0, BN)
        k = tl.load(K + b * sk0 + hk * sk1 + rn[:, None] * sk2 + rd[None, :] * sk3,
                    mask=(rn[:, None] < Skv) & (rd[None, :] < DQK), other=0.0)
        v = tl.load(V + b * sv0 + hk * sv1 + rn[:, None] * sv2 + rv[None, :] * sv3,
                    mask=(rn[:, None] < Skv) & (rv[None, :] < DV), other=0.0)
        inb = (rm[:, None] < Sq) & (rn[None, :] < Skv)
        vis = tl.load(M + ((b * Hq + h) * Sq + rm[:, None]) * Skv + rn[None, :], mask=inb, other=0) != 0
        s = tl.dot(q, tl.trans(k), input_precision="ieee" if IEEE else "tf32") * scale
        s = tl.where(vis, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee" if IEEE else "tf32")
        m_i = m_new
    seen = l_i > 0
    lse = tl.where(seen, m_i + tl.log(tl.where(seen, l_i, 1.0)), float("-inf"))
    o = tl.where(seen[:, None], acc / tl.where(seen, l_i, 1.0)[:, None], 0.0)
    tl.store(O + b * so0 + h * so1 + rm[:, None] * so2 + rv[None, :] * so3, o.to(O.dtype.element_ty),
             mask=(rm[:, None] < Sq) & (rv[None, :] < DV))
    tl.store(L + b * sl0 + h * sl1 + rm * sl2, lse, mask=rm < Sq)

@triton.jit
def _probs(q, k, M, L, Dl, G, b, h, rm, rn, Sq, Skv, Hq, scale, sl0, sl1, sl2, IEEE: tl.constexpr):
    """P and the dLSE-corrected row terms of one (query block, key block) tile."""
    inb = (rm[:, None] < Sq) & (rn[None, :] < Skv)
    vis = tl.load(M + ((b * Hq + h) * Sq + rm[:, None]) * Skv + rn[None, :], mask=inb, other=0) != 0
    lse = tl.load(L + b * sl0 + h * sl1 + rm * sl2, mask=rm < Sq, other=float("-inf"))
    s = tl.dot(q, tl.trans(k), input_precision="ieee" if IEEE else "tf32") * scale
    live = vis & (lse[:, None] > float("-inf"))
    p = tl.where(live, tl.exp(s - tl.where(lse > float("-inf"), lse, 0.0)[:, None]), 0.0)
    d = tl.load(Dl + (b * Hq + h) * Sq + rm, mask=rm < Sq, other=0.0)
    g = tl.load(G + b * sl0 + h * sl1 + rm * sl2, mask=rm < Sq, other=0.0)
    return p, d - g

@_jit_unspecialized
def _bwd_kv(Q, K, V, M, L, Dl, G, dO, dK, dV, sq0, sq1, sq2, sq3, sk0, sk1, sk2, sk3, sv0, sv1, sv2, sv3, sdo0, sdo1, sdo2, sdo3, sl0, sl1, sl2, sdk0, sdk1, sdk2, sdk3, sdv0, sdv1, sdv2, sdv3, Sq, Skv, Hq, Hkv, group, scale,
            DQK, DV, BM: tl.constexpr, BN: tl.constexpr, BDQK: tl.constexpr,
            BDV: tl.constexpr, IEEE: tl.constexpr):
    pid_n, bhk = tl.program_id(0), tl.program_id(1)
    b, hk = bhk // Hkv, bhk % Hkv
    rn = pid_n * BN + tl.arange(0, BN)
    rd, rv = tl.arange(0, BDQK), tl.arange(0, BDV)
    k = tl.load(K + b * sk0 + hk * sk1 + rn[:, None] * sk2 + rd[None, :] * sk3,
                mask=(rn[:, None] < Skv) & (rd[None, :] < DQK), other=0.0)
    v = tl.load(V + b * sv0 + hk * sv1 + rn[:, None] * sv2 + rv[None, :] * sv3,
                mask=(rn[:, None] < Skv) & (rv[None, :] < DV), other=0.0)
    dk = tl.zeros([BN, BDQK], tl.float32)
    dv = tl.zeros([BN, BDV], tl.float32)
    for h in tl.range(hk * group, hk * group + group):
        for start in tl.range(0, Sq, BM):
            rm = start + tl.arange(0, BM)
            q = tl.load(Q + b * sq0 + h * sq1 + rm[:, None] * sq2 + rd[None, :] * sq3,
                        mask=(rm[:, None] < Sq) & (rd[None, :] < DQK), other=0.0)
            do = tl.load(dO + b * sdo0 + h * sdo1 + rm[:, None] * sdo2 + rv[None, :] * sdo3,
                         mask=(rm[:, None] < Sq) & (rv[None, :] < DV), other=0.0)
            p, dg = _probs(q, k, M, L, Dl, G, b, h, rm, rn, Sq, Skv, Hq, scale, sl0, sl1, sl2, IEEE)
            dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision="ieee" if IEEE else "tf32")
            dp = tl.dot(do, tl.trans(v), input_precision="ieee" if IEEE else "tf32")
            ds = p * (dp - dg[:, None])
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision="ieee" if IEEE else "tf32")
    tl.store(dK + b * sdk0 + hk * sdk1 + rn[:, None] * sdk2 + rd[None, :] * sdk3, (dk * scale).to(dK.dtype.element_ty),
             mask=(rn[:, None] < Skv) & (rd[None, :] < DQK))
    tl.store(dV + b * sdv0 + hk * sdv1 + rn[:, None] * sdv2 + rv[None, :] * sdv3, dv.to(dV.dtype.element_ty),
             mask=(rn[:, None] < Skv) & (rv[None, :] < DV))

@_jit_unspecialized
def _bwd_q(Q, K, V, M, L, Dl, G, dO, dQ, sq0, sq1, sq2, sq3, sk0, sk1, sk2, sk3, sv0, sv1, sv2, sv3, sdo0, sdo1, sdo2, sdo3, sl0, sl1, sl2, sdq0, sdq1, sdq2, sdq3, Sq, Skv, Hq, group, scale,
           DQK, DV, BM: tl.constexpr, BN: tl.constexpr, BDQK: tl.constexpr,
           BDV: tl.constexpr, IEEE: tl.constexpr):
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // Hq, bh % Hq
    hk = h // group
    rm = pid_m * BM + tl.arange(0, BM)
    rd, rv = tl.arange(0, BDQK), tl.arange(0, BDV)
    q = tl.load(Q + b * sq0 + h * sq1 + rm[:, None] * sq2 + rd[None, :] * sq3,
                mask=(rm[:, None] < Sq) & (rd[None, :] < DQK), other=0.0)
    do = tl.load(dO + b * sdo0 + h * sdo1 + rm[:, None] * sdo2 + rv[None, :] * sdo3,
                 mask=(rm[:, None] < Sq) & (rv[None, :] < DV), other=0.0)
    dq = tl.zeros([BM, BDQK], tl.float32)
    for start in tl.range(0, Skv, BN):
        rn = start + tl.arange(0, BN)
        k = tl.load(K + b * sk0 + hk * sk1 + rn[:, None] * sk2 + rd[None, :] * sk3,
                    mask=(rn[:, None] < Skv) & (rd[None, :] < DQK), other=0.0)
        v = tl.load(V + b * sv0 + hk * sv1 + rn[:, None] * sv2 + rv[None, :] * sv3,
                    mask=(rn[:, None] < Skv) & (rv[None, :] < DV), other=0.0)
        p, dg = _probs(q, k, M, L, Dl, G, b, h, rm, rn, Sq, Skv, Hq, scale, sl0, sl1, sl2, IEEE)
        dp = tl.dot(do, tl.trans(v), input_precision="ieee" if IEEE else "tf32")
        ds = p * (dp - dg[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee" if IEEE else "tf32")
    tl.store(dQ + b * sdq0 + h * sdq1 + rm[:, None] * sdq2 + rd[None, :] * sdq3, (dq * scale).to(dQ.dtype.element_ty),
             mask=(rm[:, None] < Sq) & (rd[None, :] < DQK))

