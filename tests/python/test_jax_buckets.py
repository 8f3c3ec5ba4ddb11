#!/usr/bin/env python3
"""The JAX adapters' bucketed shapes (python/attnfuzz_py/adapters/jax_sdpa.py, _Padded): padding
B, the heads, the GQA group, Sq, Skv and the head dims and dropping it again gives back every
element; the padded mask hides the padding; a padded score bias keeps its broadcast dimensions
and its values; and, where JAX is installed, the padded forward and backward agree with
jax.nn.dot_product_attention on the problem as it is (fp32, to rounding), with and without a bias."""
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
from attnfuzz_py.adapter import Problem  # noqa: E402
from attnfuzz_py.adapters import jax_sdpa  # noqa: E402

failures = []
rng = np.random.default_rng(5)
for shape in [(1, 1, 1, 1, 1, 1, 1), (2, 6, 2, 37, 19, 24, 24), (3, 4, 4, 130, 600, 80, 80), (1, 3, 1, 5, 33, 8, 8)]:
    b, hq, hkv, sq, skv, dqk, dv = shape
    mask = (rng.random((b, hq, sq, skv)) < 0.7).astype(np.uint8)
    p = Problem({"batch": b, "heads_q": hq, "heads_kv": hkv, "seq_q": sq, "seq_kv": skv, "head_dim_qk": dqk,
                 "head_dim_v": dv, "dtype": "fp32", "scale": dqk ** -0.5, "softcap": None}, mask)
    for pad_dims in (True, False):
        pad = jax_sdpa._Padded(p, pad_dims)
        q = rng.standard_normal((b, hq, sq, dqk)).astype(np.float32)
        k = rng.standard_normal((b, hkv, skv, dqk)).astype(np.float32)
        pq, pk, pm = pad.queries(q, pad.dqk), pad.keys(k, pad.dqk), pad.mask()
        if pq.shape != (pad.b, pad.hkv * pad.g, pad.sq, pad.dqk) or pk.shape != (pad.b, pad.hkv, pad.skv, pad.dqk):
            failures.append(f"{shape}: padded shapes {pq.shape} {pk.shape}")
        if not (np.array_equal(pad.of_queries(pq, dqk), q) and np.array_equal(pad.of_keys(pk, dqk), k)):
            failures.append(f"{shape}: unpadding does not give the tensors back")
        real = pm.reshape(pad.b, pad.hkv, pad.g, pad.sq, pad.skv)[:b, :hkv, :hq // hkv, :sq, :skv].reshape(b, hq, sq, skv)
        if pm.sum() != (mask != 0).sum() or not np.array_equal(real, mask != 0):
            failures.append(f"{shape}: the padded mask is not the mask with the padding hidden")
        for spans in [(1, 1, 1, 1), (0, 1, 0, 1), (1, 0, 1, 0), (0, 0, 0, 0)]:
            bias = rng.standard_normal(tuple(n if span else 1 for n, span in zip((b, hq, sq, skv), spans))).astype(np.float32)
            pb = pad.bias(bias)
            want = tuple((n if span and m > 1 else 1) for n, span, m in zip((pad.b, pad.hkv * pad.g, pad.sq, pad.skv), spans,
                                                                            (b, hq, sq, skv)))
            nb, nh, nq, nkv = bias.shape
            grouped = pb.reshape(pb.shape[0], 1 if nh == 1 else pad.hkv, 1 if nh == 1 else pad.g, *pb.shape[2:]).copy()
            region = (slice(nb), slice(1 if nh == 1 else hkv), slice(1 if nh == 1 else hq // hkv), slice(nq), slice(nkv))
            real = grouped[region].reshape(bias.shape).copy()
            grouped[region] = 0
            if pb.shape != want or not np.array_equal(real, bias) or grouped.any():
                failures.append(f"{shape}: the padded bias {pb.shape} (spans {spans}) is not the bias with zero padding")
        if pad.sq % 2 or pad.skv % 2:
            failures.append(f"{shape}: odd padded lengths {pad.sq}, {pad.skv} (JAX's cuDNN path wants them even)")

if jax_sdpa.jax is None:
    print("note: no JAX here: the padded calls were not compared with unpadded ones")
else:
    import jax
    import jax.numpy as jnp
    b, hq, hkv, sq, skv, d = 2, 6, 2, 37, 70, 24
    mask = (rng.random((b, hq, sq, skv)) < 0.8).astype(np.uint8)
    mask[..., 0] = 1  # every row sees a key: the convention of masked rows is not what is tested here
    fields = {"batch": b, "heads_q": hq, "heads_kv": hkv, "seq_q": sq, "seq_kv": skv, "head_dim_qk": d, "head_dim_v": d,
              "dtype": "fp32", "scale": 0.3, "softcap": None}
    q = rng.standard_normal((b, hq, sq, d)).astype(np.float32)
    k = rng.standard_normal((b, hkv, skv, d)).astype(np.float32)
    v = rng.standard_normal((b, hkv, skv, d)).astype(np.float32)
    d_o = rng.standard_normal((b, hq, sq, d)).astype(np.float32)
    a = jax_sdpa.JaxSdpa("xla", precision="highest")
    t = lambda x: jnp.swapaxes(x, 1, 2)
    for spans in (None, (1, 1, 1, 1), (0, 1, 0, 1), (1, 0, 0, 1)):
        bias = None
        if spans is not None:
            bias = rng.normal(0.0, 2.0, tuple(n if span else 1 for n, span in zip((b, hq, sq, skv), spans))).astype(np.float32)
        pb = Problem(fields, mask, bias)
        o, _ = a.forward(pb, q, k, v)
        grads = a.backward(pb, q, k, v, o, None, d_o, None)
        plain = lambda q_, k_, v_: t(jax.nn.dot_product_attention(t(q_), t(k_), t(v_), bias=None if bias is None else jnp.asarray(bias),
                                                                  mask=jnp.asarray(mask != 0), scale=0.3))
        with jax.default_matmul_precision("highest"):
            o_ref, pullback = jax.vjp(plain, jnp.asarray(q), jnp.asarray(k), jnp.asarray(v))
            refs = pullback(jnp.asarray(d_o))
        for name, got, want in [("O", o, o_ref)] + list(zip(("dQ", "dK", "dV"), grads, refs)):
            want = np.asarray(want)
            err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
            if got.shape != want.shape or not err < 1e-5:
                failures.append(f"padded {name} against unpadded (bias spans {spans}): shape {got.shape} vs {want.shape}, "
                                f"relative error {err:.2e}")

    # The scale is an fp32 argument of the jitted programs (one program for every scale), and
    # jitted with it traced, the programs give the bits they give with it as a constant.
    if a._jitted(0.3) is not a._jitted(0.125):
        failures.append("xla: two scales got two programs (the scale should be a traced argument)")
    if jax_sdpa.JaxSdpa("cudnn")._jitted(0.3) is jax_sdpa.JaxSdpa("cudnn")._jitted(0.125):
        failures.append("cudnn: the scale should be a constant of its programs")
    for adapter in (a, jax_sdpa.JaxF32Logits()):
        for dt in (jnp.float32, jnp.bfloat16):
            qq, kk, vv, dd = (jnp.asarray(x, dt) for x in (q, k, v, d_o))
            mm = jnp.asarray(mask != 0)
            att = lambda q_, k_, v_, s: adapter._attend(s)(q_, k_, v_, mm, None)
            for scale in (0.3, d ** -0.5):
                const = jax.jit(lambda q_, k_, v_, g: jax.vjp(lambda *x: att(*x, scale), q_, k_, v_)[1](g))(qq, kk, vv, dd)
                traced = jax.jit(lambda q_, k_, v_, s, g: jax.vjp(lambda *x: att(*x, s), q_, k_, v_)[1](g))(
                    qq, kk, vv, jnp.float32(scale), dd)
                o_c = jax.jit(lambda q_, k_, v_: att(q_, k_, v_, scale))(qq, kk, vv)
                o_t = jax.jit(att)(qq, kk, vv, jnp.float32(scale))
                if not all(bool((x == y).all()) for x, y in zip((o_c,) + tuple(const), (o_t,) + tuple(traced))):
                    failures.append(f"{adapter.name} {dt.__name__} scale {scale}: a traced scale changed the bits")

for f in failures:
    print("FAIL:", f)
print("jax buckets:", "FAILED" if failures else "ok")
sys.exit(1 if failures else 0)
