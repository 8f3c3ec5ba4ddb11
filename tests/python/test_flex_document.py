"""FlexDocument (attnfuzz_py.adapters.flex): a ragged batch packed into one row with a document
mask_mod, against a float64 computation of each sequence alone, on the CPU (eager FlexAttention's
dense path; the compiled one runs on the GPU machine). Rows past a sequence are fully masked
(O = 0, LSE = -inf, no gradient), and a composition's call sees each sequence's part of it.

    PYTHONPATH=python .deps/pyenv/bin/python -m pytest tests/python/test_flex_document.py
"""
import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnfuzz_py import Problem  # noqa: E402
from attnfuzz_py.adapters.flex import FlexDocument, call_lengths  # noqa: E402

B, HQ, HKV, SQ, SKV, D = 3, 4, 2, 7, 9, 8


def visible(lq, lkv, causal):
    i = np.arange(SQ)[:, None]
    j = np.arange(SKV)[None, :]
    v = (i < lq) & (j < lkv)
    if causal:
        v &= j <= i + lkv - lq  # the sequence's own bottom-right diagonal
    return v


def make(lens_q, lens_kv, causal, seed=0, q_offset=0, kv_offset=0, full=(SQ, SKV)):
    rng = np.random.default_rng(seed)
    mask = np.stack([np.stack([visible(a, b, causal)] * HQ) for a, b in zip(lens_q, lens_kv)]).astype(np.uint8)
    expr = {"kind": "causal", "align": "bottom_right"} if causal else {"kind": "none"}
    fields = dict(batch=B, heads_q=HQ, heads_kv=HKV, seq_q=SQ, seq_kv=SKV, head_dim_qk=D, head_dim_v=D, dtype="fp32",
                  scale=D ** -0.5, softcap=None, q_offset=q_offset, kv_offset=kv_offset, full_seq_q=full[0], full_seq_kv=full[1],
                  extra=json.dumps({"mask": expr, "restrictions": [], "ragged": {"lens_q": lens_q, "lens_kv": lens_kv}}))
    p = Problem(fields, mask)

    def rand(*s):
        return torch.from_numpy(rng.normal(0.0, 1.0, s)).float()
    q, k, v, d_o = rand(B, HQ, SQ, D), rand(B, HKV, SKV, D), rand(B, HKV, SKV, D), rand(B, HQ, SQ, D)
    d_lse = rand(B, HQ, SQ) * 0.5
    return p, mask, q, k, v, d_o, d_lse


def reference(p, mask, q, k, v, d_o, d_lse):
    """Float64 over the padded problem with the dense mask: the ragged semantics (nothing past a
    sequence is visible), rows with no visible key O = 0, LSE = -inf, no gradient."""
    q, k, v = (x.double().requires_grad_() for x in (q, k, v))
    g = HQ // HKV
    kk, vv = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    vis = torch.from_numpy(mask.astype(bool))
    s = torch.einsum("bhid,bhjd->bhij", q, kk) * p.scale
    s = s.masked_fill(~vis, -math.inf)
    lse = torch.logsumexp(s, -1)
    has = vis.any(-1)
    safe = torch.where(has, lse, torch.zeros_like(lse))
    pr = torch.exp(s - safe.unsqueeze(-1)) * vis
    o = torch.einsum("bhij,bhjd->bhid", pr, vv)
    dq, dk, dv = torch.autograd.grad([o, safe], [q, k, v], [d_o.double(), d_lse.double() * has])
    return o.detach(), torch.where(has, lse, torch.full_like(lse, -math.inf)).detach(), dq, dk, dv


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lens", [([7, 3, 0], [9, 5, 2]), ([1, 7, 4], [0, 9, 9]), ([7, 7, 7], [9, 9, 9])])
def test_matches_each_sequence_alone(lens, causal):
    p, mask, q, k, v, d_o, d_lse = make(list(lens[0]), list(lens[1]), causal)
    a = FlexDocument(device="cpu")
    assert a.supports(p) is None
    o, lse = a.forward(p, q, k, v)
    dq, dk, dv = a.backward(p, q, k, v, o, lse, d_o, d_lse)
    ro, rlse, rdq, rdk, rdv = reference(p, mask, q, k, v, d_o, d_lse)
    fin = torch.isfinite(rlse)
    assert torch.equal(torch.isfinite(lse), fin)  # the rows with no key: LSE = -inf, O = 0
    assert float(o[~fin].abs().max()) == 0.0 if (~fin).any() else True
    assert torch.allclose(o.double(), ro, atol=1e-5)
    assert torch.allclose(lse.double()[fin], rlse[fin], atol=1e-5)
    for got, want in ((dq, rdq), (dk, rdk), (dv, rdv)):
        assert torch.allclose(got.double(), want, atol=1e-4), float((got.double() - want).abs().max())


def test_a_composition_call_sees_its_part_of_each_sequence():
    # The call covers rows [4, 11) and keys [2, 11) of an 11 x 11 problem whose sequences are
    # 11, 5 and 2 rows long: 7, 1 and 0 rows here; keys 9, 3 and 0.
    p, *_ = make([11, 5, 2], [11, 5, 1], False, q_offset=4, kv_offset=2, full=(11, 11))
    assert call_lengths(p) == ([7, 1, 0], [9, 3, 0])


def test_a_mask_lookup_never_crosses_documents():
    # One query of sequence 0 is packed next to the keys of sequence 1: the mask lets no query
    # see a key of another sequence, even where both sequences' masks are all visible.
    p, mask, q, k, v, d_o, d_lse = make([2, 7, 7], [9, 9, 9], False)
    o, lse = FlexDocument(device="cpu").forward(p, q, k, v)
    ro, rlse, *_ = reference(p, mask, q, k, v, d_o, d_lse)
    assert torch.allclose(o.double(), ro, atol=1e-5)
