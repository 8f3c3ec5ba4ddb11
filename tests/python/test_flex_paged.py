"""FlexPaged (attnfuzz_py.adapters.flex): K and V read through FlexAttention's paged KV cache
(PagedAttention's converted BlockMask) with the harness's page table, against float64 over the
padded problem with the dense mask, on the CPU (eager FlexAttention; the compiled kernel runs on
the GPU machine). Pages in shuffled physical order with a spare page, page sizes that do and do
not divide the lengths, a composition's call that starts mid-page, and a table that lies.

    PYTHONPATH=python .deps/pyenv/bin/python -m pytest tests/python/test_flex_paged.py
    FLEX_PAGED_ADAPTER=FlexPagedCompiled FLEX_PAGED_DEVICE=cuda python3 tests/python/test_flex_paged.py   (a GPU)
"""
import json
import math
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnfuzz_py import Problem  # noqa: E402
from attnfuzz_py.adapters import flex  # noqa: E402
from attnfuzz_py.adapters.flex import FlexPaged  # noqa: E402

ADAPTER = getattr(flex, os.environ.get("FLEX_PAGED_ADAPTER", "FlexPaged"))
DEVICE = os.environ.get("FLEX_PAGED_DEVICE", "cpu")
TOL = 1e-5 if DEVICE == "cpu" else 1e-4

# Inductor's flex kernel takes head dims from 16 (FlexCompiled declines the rest): 16 for the compiled adapter.
HQ, HKV, D = 4, 2, (16 if ADAPTER is not FlexPaged else 8)


def page_table(lens_kv, size, rng):
    """Every sequence's pages, then one spare, in a shuffled physical order."""
    counts = [-(-n // size) for n in lens_kv]
    pages = sum(counts) + 1
    order = rng.permutation(pages).tolist()
    table, at = [], 0
    for c in counts:
        table.append(order[at:at + c])
        at += c
    return pages, table


def make(lens_q, lens_kv, causal, size, seed=0, call=None):
    """call: (q_offset, kv_offset, seq_q, seq_kv) of a composition's call, else the whole problem."""
    rng = np.random.default_rng(seed)
    full_q, full_kv = max(lens_q + [1]), max(lens_kv + [1])
    qo, ko, sq, skv = call or (0, 0, full_q, full_kv)
    b = len(lens_q)
    i = np.arange(sq)[:, None] + qo
    j = np.arange(skv)[None, :] + ko
    seqs = []
    for lq, lkv in zip(lens_q, lens_kv):
        vis = (i < lq) & (j < lkv)
        if causal:
            vis &= j <= i + lkv - lq  # each sequence's own bottom-right diagonal
        seqs.append(np.stack([vis] * HQ))
    mask = np.stack(seqs).astype(np.uint8)
    pages, table = page_table(lens_kv, size, rng)
    expr = {"kind": "causal", "align": "bottom_right"} if causal else {"kind": "none"}
    ragged = {"lens_q": lens_q, "lens_kv": lens_kv, "page_size": size, "pages": pages, "page_table": table}
    fields = dict(batch=b, heads_q=HQ, heads_kv=HKV, seq_q=sq, seq_kv=skv, head_dim_qk=D, head_dim_v=D, dtype="fp32",
                  scale=D ** -0.5, softcap=None, q_offset=qo, kv_offset=ko, full_seq_q=full_q, full_seq_kv=full_kv,
                  extra=json.dumps({"mask": expr, "restrictions": [], "ragged": ragged}))
    p = Problem(fields, mask)

    def rand(*s):
        return torch.from_numpy(rng.normal(0.0, 1.0, s)).float()
    q, k, v, d_o = rand(b, HQ, sq, D), rand(b, HKV, skv, D), rand(b, HKV, skv, D), rand(b, HQ, sq, D)
    return p, mask, q, k, v, d_o


def reference(p, mask, q, k, v, d_o):
    q, k, v = (x.double().requires_grad_() for x in (q, k, v))
    g = HQ // HKV
    kk, vv = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    vis = torch.from_numpy(mask.astype(bool))
    s = (torch.einsum("bhid,bhjd->bhij", q, kk) * p.scale).masked_fill(~vis, -math.inf)
    lse = torch.logsumexp(s, -1)
    has = vis.any(-1)
    safe = torch.where(has, lse, torch.zeros_like(lse))
    o = torch.einsum("bhij,bhjd->bhid", torch.exp(s - safe.unsqueeze(-1)) * vis, vv)
    dq, dk, dv = torch.autograd.grad(o, [q, k, v], d_o.double())
    return o.detach(), torch.where(has, lse, torch.full_like(lse, -math.inf)).detach(), dq, dk, dv


def check(p, mask, q, k, v, d_o, grads=True):
    a = ADAPTER(device=DEVICE)
    if p.ragged["page_size"] % 128 and ADAPTER is not FlexPaged:
        assert "multiple of 128" in a.supports(p)
        return
    why = a.supports(p)
    assert why is None, why
    dq_, dk_, dv_, ddo = (x.to(DEVICE) for x in (q, k, v, d_o))
    o, lse = a.forward(p, dq_, dk_, dv_)
    ro, rlse, rdq, rdk, rdv = reference(p, mask, q, k, v, d_o)
    fin = torch.isfinite(rlse)
    o, lse = o.cpu(), lse.cpu()
    assert torch.equal(torch.isfinite(lse), fin), f"LSE finite in {int(torch.isfinite(lse).sum())} rows, the reference in {int(fin.sum())}"
    assert torch.allclose(o.double(), ro, atol=TOL), float((o.double() - ro).abs().max())
    assert torch.allclose(lse.double()[fin], rlse[fin], atol=TOL)
    if grads:
        zero = torch.zeros_like(lse)
        grads = a.backward(p, dq_, dk_, dv_, o.to(DEVICE), lse.to(DEVICE), ddo, zero.to(DEVICE))
        for got, want in zip(grads, (rdq, rdk, rdv)):
            assert torch.allclose(got.cpu().double(), want, atol=10 * TOL), float((got.cpu().double() - want).abs().max())


@pytest.mark.parametrize("size", [1, 3, 4, 16, 32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lens", [([1, 3, 2], [9, 5, 2]), ([4, 1, 4], [0, 13, 7]), ([2, 2], [8, 8])])
def test_matches_the_padded_reference(lens, causal, size):
    check(*make(list(lens[0]), list(lens[1]), causal, size, seed=size))


def test_a_call_that_starts_mid_page_reads_the_whole_problems_pages():
    # Keys [3, 10) of sequences 11, 6 and 2 keys long, pages of 4: the call's first key is row 3 of
    # each sequence's first page, and sequence 2 has no key in the call.
    check(*make([3, 2, 1], [11, 6, 2], False, 4, seed=5, call=(0, 3, 3, 7)), grads=False)


def test_a_stale_page_map_is_seen():
    # The check above can fail: K and V are written through the case's table, but the map from
    # physical pages back to each sequence's keys swaps two sequences' first pages, and O moves.
    class Stale(FlexPaged):
        @staticmethod
        def _map_pages(paged, table):
            FlexPaged._map_pages(paged, table)
            a, b = table[0][0], table[1][0]
            paged.physical_to_logical[0, a], paged.physical_to_logical[0, b] = -1, 0
            paged.physical_to_logical[1, b], paged.physical_to_logical[1, a] = -1, 0
    p, mask, q, k, v, d_o = make([2, 2], [8, 8], False, 4, seed=1)
    o, _ = Stale(device="cpu").forward(p, q, k, v)  # eager: the map is the library's, not the kernel's
    ro, *_ = reference(p, mask, q, k, v, d_o)
    assert float((o.double() - ro).abs().max()) > 0.1


if __name__ == "__main__":  # the GPU machine's python may lack pytest: every case, one line each
    import itertools
    failed = 0
    cases = [(lambda ln=ln, c=c, sz=sz: test_matches_the_padded_reference(ln, c, sz), f"lens {ln} causal {c} page {sz}")
             for ln, c, sz in itertools.product([([1, 3, 2], [9, 5, 2]), ([4, 1, 4], [0, 13, 7]), ([2, 2], [8, 8]),
                                                 ([16, 3], [40, 70])], [False, True], [1, 3, 4, 16, 32, 128])]
    for fn, what in cases:
        try:
            fn()
            print(f"{ADAPTER.__name__} {DEVICE} {what}: ok")
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"{ADAPTER.__name__} {DEVICE} {what}: FAILED {type(e).__name__}: {str(e).strip()[:300]}")
    print(f"{failed} failed of {len(cases)}")
    sys.exit(1 if failed else 0)
