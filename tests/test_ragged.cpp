// Ragged batches (harness/case.h, Ragged): the case format and its refusals, each sequence's mask
// in its own coordinates, the float64 reference against each sequence computed alone, LibTorch's
// float64 graph and the compositions against the reference, the envelope's clause, the generator
// and the shrinker, and the verdict on planted length bugs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>

#include "backends/python_bridge_protocol.h"
#include "backends/registry.h"
#include "campaign/composition_calls.h"
#include "generators/random_case.h"
#include "generators/shrink.h"
#include "harness/case_json.h"
#include "harness/compose.h"
#include "harness/differential.h"
#include "harness/envelope.h"
#include "harness/errors.h"
#include "harness/inputs.h"
#include "oracles/reference.h"
#include "tests/finite_differences.h"

namespace attnfuzz {
namespace {

Ragged lengths(std::vector<int64_t> q, std::vector<int64_t> kv, int64_t gap_q = 0, int64_t gap_kv = 0, int64_t tail = 0) {
  Ragged g;
  g.lens_q = std::move(q);
  g.lens_kv = std::move(kv);
  g.gap_q = gap_q;
  g.gap_kv = gap_kv;
  g.tail = tail;
  return g;
}

// Three sequences: one full, one short in both, one with no queries; then one query against a
// few keys, and one with no keys.
Case small_case(uint64_t seed, MaskExpr mask) {
  Case c;
  c.seed = seed;
  c.shape = {5, 4, 2, 12, 16, 8, 6};
  c.dtype = DType::f32;
  c.mask = std::move(mask);
  c.d_lse = ValueDist{};
  c.ragged = lengths({12, 5, 0, 1, 7}, {16, 11, 3, 4, 0}, 2, 3, 5);
  c.ragged->page_size = 4;
  c.ragged->max_slack = 3;  // the interfaces' edges: no effect on the attention itself
  c.ragged->misaligned = true;
  return c;
}

std::vector<MaskExpr> masks() {
  MaskExpr prefix;
  prefix.kind = MaskExpr::Kind::prefix_lm;
  prefix.prefix = 2;
  prefix.align = Align::bottom_right;
  return {MaskExpr::all_visible(), MaskExpr::causal_mask(Align::top_left), MaskExpr::causal_mask(Align::bottom_right),
          MaskExpr::window(3, 1, Align::bottom_right), prefix};
}

TEST(Ragged, CaseFormatRoundTripsAndStartsFollowTheGaps) {
  const Case c = small_case(3, MaskExpr::causal_mask(Align::bottom_right));
  EXPECT_EQ(case_from_string(write_case(c)), c) << write_case(c);
  // Gaps lie between sequences, not after the last one; the tail is not part of the starts.
  EXPECT_EQ(c.ragged->starts_q(), (std::vector<int64_t>{0, 14, 21, 23, 26, 33}));
  EXPECT_EQ(c.ragged->starts_kv(), (std::vector<int64_t>{0, 19, 33, 39, 46, 46}));
  // Without one the case is written as before; zero gaps are left out.
  Case plain = c;
  plain.ragged.reset();
  EXPECT_EQ(write_case(plain).find("ragged"), std::string::npos);
  Case no_gaps = c;
  no_gaps.ragged->gap_q = no_gaps.ragged->gap_kv = no_gaps.ragged->tail = no_gaps.ragged->page_size = 0;
  no_gaps.ragged->max_slack = 0;
  no_gaps.ragged->misaligned = false;
  EXPECT_EQ(write_case(no_gaps).find("gap"), std::string::npos);
  EXPECT_EQ(write_case(no_gaps).find("page"), std::string::npos);
  EXPECT_EQ(write_case(no_gaps).find("slack"), std::string::npos);
  EXPECT_EQ(write_case(no_gaps).find("misaligned"), std::string::npos);
  EXPECT_EQ(case_from_string(write_case(no_gaps)), no_gaps);
  // The lengths change no input: the padded tensors are drawn as for a dense batch.
  EXPECT_EQ(checksum(generate_inputs(c)), checksum(generate_inputs(plain)));
}

// Every sequence's pages, and one spare, each used once, in an order drawn from the seed.
TEST(Ragged, PageTableIsAPermutationOfEveryPageAndASpare) {
  const Case c = small_case(3, MaskExpr::all_visible());
  const PageTable t = page_table(*c.ragged, c.seed);
  // ceil(16/4) + ceil(11/4) + ceil(3/4) + ceil(4/4) + 0 = 4 + 3 + 1 + 1 + 0 pages, and the spare.
  EXPECT_EQ(t.pages, 10);
  EXPECT_EQ(t.max_pages_per_seq, 4);
  std::vector<int> used(static_cast<size_t>(t.pages), 0);
  const int64_t counts[] = {4, 3, 1, 1, 0};
  for (int64_t b = 0; b < 5; ++b)
    for (int64_t p = 0; p < t.max_pages_per_seq; ++p) {
      if (p < counts[b]) {
        ASSERT_GE(t.at(b, p), 0);
        ASSERT_LT(t.at(b, p), t.pages);
        ++used[static_cast<size_t>(t.at(b, p))];
      } else {
        EXPECT_EQ(t.at(b, p), -1);
      }
    }
  int once = 0, spare = 0;
  for (int u : used) once += u == 1, spare += u == 0;
  EXPECT_EQ(once, 9);
  EXPECT_EQ(spare, 1);
  // Another seed, another order; no paged layout, no table.
  EXPECT_NE(page_table(*c.ragged, c.seed + 1).table, t.table);
  Ragged flat = *c.ragged;
  flat.page_size = 0;
  EXPECT_EQ(page_table(flat, c.seed).pages, 0);
}

// A Python adapter reads a paged case's keys through the same pages as cudnn.paged: the bridge
// sends the table of the whole problem, each sequence's pages and no -1 padding.
TEST(Ragged, PythonBridgeSendsThePageTable) {
  const Case c = small_case(3, MaskExpr::all_visible());
  const Problem p = case_problem(c);
  const nlohmann::json r = problem_extra_json(p).at("ragged");
  const PageTable t = page_table(*c.ragged, c.seed);
  EXPECT_EQ(r.at("page_size").get<int64_t>(), 4);
  EXPECT_EQ(r.at("pages").get<int64_t>(), t.pages);
  const auto& rows = r.at("page_table");
  ASSERT_EQ(rows.size(), 5u);
  const size_t counts[] = {4, 3, 1, 1, 0};
  for (size_t b = 0; b < 5; ++b) {
    ASSERT_EQ(rows[b].size(), counts[b]);
    for (size_t k = 0; k < counts[b]; ++k) EXPECT_EQ(rows[b][k].get<int64_t>(), t.at(static_cast<int64_t>(b), static_cast<int64_t>(k)));
  }
  Case flat = c;
  flat.ragged->page_size = 0;
  EXPECT_FALSE(problem_extra_json(case_problem(flat)).at("ragged").contains("page_table"));
}

// The gaps and tail of a varlen interface's packed copies are rows no padded tensor holds: the
// memory estimate counts them, so a small file cannot ask for gigabytes past the budget.
TEST(Ragged, MemoryEstimateCountsThePackedGapsAndTail) {
  Case c = small_case(3, MaskExpr::all_visible());
  const uint64_t before = estimate_host_bytes(c, HostWork::least());
  c.ragged->gap_q = c.ragged->gap_kv = c.ragged->tail = kMaxRaggedGap;
  const uint64_t after = estimate_host_bytes(c, HostWork::least());
  // Five sequences: 4 gaps and the tail, each grown to kMaxRaggedGap rows (from 2 and 3, and 5), 8 bytes an element.
  const Shape& s = c.shape;
  const uint64_t g = static_cast<uint64_t>(kMaxRaggedGap), q_rows = 4 * (g - 2) + (g - 5), kv_rows = 4 * (g - 3) + (g - 5);
  const uint64_t q_width = static_cast<uint64_t>(s.heads_q * (2 * s.head_dim_qk + 2 * s.head_dim_v + 2));
  const uint64_t kv_width = static_cast<uint64_t>(s.heads_kv * (2 * s.head_dim_qk + 2 * s.head_dim_v));
  EXPECT_EQ(after - before, 8 * (q_rows * q_width + kv_rows * kv_width));
}

TEST(Ragged, BadLengthsAreRefusedWithTheField) {
  const std::string head =
      R"({"format":"attnfuzz-case/1","seed":1,"shape":{"batch":2,"heads_q":2,"seq_q":4,"seq_kv":6,"head_dim_qk":8},"dtype":"fp16","ragged":)";
  auto field_of = [&](const std::string& ragged) {
    try {
      case_from_string(head + ragged + "}");
    } catch (const CaseError& e) {
      return e.field();
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(field_of(R"({"lens_q":[4,0],"lens_kv":[6,1]})"), "(accepted)");
  EXPECT_EQ(field_of(R"({"lens_q":[4],"lens_kv":[6,1]})"), "ragged.lens_q");
  EXPECT_EQ(field_of(R"({"lens_q":[4,5],"lens_kv":[6,1]})"), "ragged.lens_q[1]");
  EXPECT_EQ(field_of(R"({"lens_q":[4,1],"lens_kv":[-1,1]})"), "ragged.lens_kv[0]");
  EXPECT_EQ(field_of(R"({"lens_q":[4,1],"lens_kv":[6,1],"gap_kv":-2})"), "ragged.gap_kv");
  EXPECT_EQ(field_of(R"({"lens_q":[4,1],"lens_kv":[6,1],"tail":5000})"), "ragged.tail");
  EXPECT_EQ(field_of(R"({"lens_q":[4,1],"lens_kv":[6,1],"pages":2})"), "ragged.pages");
  EXPECT_EQ(field_of(R"({"lens_q":[4,1],"lens_kv":[6,1],"page_size":257})"), "ragged.page_size");
  EXPECT_EQ(field_of(R"({"lens_q":[4,1],"lens_kv":[6,1],"page_size":256})"), "(accepted)");
  EXPECT_EQ(field_of(R"({"lens_q":[4,1]})"), "ragged.lens_kv");
  EXPECT_EQ(field_of(R"({"lens_q":[4,1],"lens_kv":[6,1],"max_slack":-1})"), "ragged.max_slack");
  EXPECT_EQ(field_of(R"({"lens_q":[4,1],"lens_kv":[6,1],"max_slack":4097})"), "ragged.max_slack");
  EXPECT_EQ(field_of(R"({"lens_q":[4,1],"lens_kv":[6,1],"max_slack":7,"misaligned":true})"), "(accepted)");
  EXPECT_EQ(field_of(R"({"lens_q":[4,1],"lens_kv":[6,1],"misaligned":1})"), "ragged.misaligned");
  EXPECT_EQ(field_of(R"({"lens_q":[4,1.5],"lens_kv":[6,1]})"), "ragged.lens_q");
}

// Sequence b's mask is evaluated in its own Lq x Lkv coordinates, and nothing past them is visible.
TEST(Ragged, EachSequenceAlignsItsOwnDiagonal) {
  for (const MaskExpr& m : masks()) {
    const Case c = small_case(7, m);
    const Inputs in = generate_inputs(c);
    const Problem p = full_problem(c, in);
    SCOPED_TRACE(describe(m));
    for (int64_t b = 0; b < c.shape.batch; ++b) {
      const int64_t lq = c.ragged->lens_q[static_cast<size_t>(b)], lkv = c.ragged->lens_kv[static_cast<size_t>(b)];
      for (int64_t h = 0; h < c.shape.heads_q; ++h)
        for (int64_t i = 0; i < c.shape.seq_q; ++i)
          for (int64_t j = 0; j < c.shape.seq_kv; ++j) {
            const bool expect = i < lq && j < lkv && visible(m, b, h, i, j, lq, lkv);
            ASSERT_EQ(p.visible(b, h, i, j), expect) << "b " << b << " h " << h << " i " << i << " j " << j;
          }
    }
  }
  // Bottom-right causal in a sequence of 5 queries and 11 keys: query 0 sees keys 0..6 (the padded
  // problem's diagonal would stop at key 4).
  const Problem p = full_problem(small_case(7, MaskExpr::causal_mask(Align::bottom_right)), generate_inputs(small_case(7, {})));
  EXPECT_TRUE(p.visible(1, 0, 0, 6));
  EXPECT_FALSE(p.visible(1, 0, 0, 7));
  EXPECT_FALSE(p.visible(1, 0, 4, 11));  // past the sequence's keys
}

// The padded problem's reference, sequence by sequence, is that sequence computed alone: its rows
// and keys cut out, its mask in its own coordinates. Absent rows are O 0, LSE -inf, dQ 0; absent
// keys have dK = dV = 0.
TEST(Ragged, ReferenceIsEachSequenceAlone) {
  for (const MaskExpr& m : masks())
    for (uint64_t seed = 0; seed < 3; ++seed) {
      const Case c = small_case(seed + 20, m);
      const Inputs in = generate_inputs(c);
      const Problem p = full_problem(c, in);
      const Forward f = reference_forward(p);
      const Gradients g = reference_backward(p, f, in.d_out, in.d_lse);
      const Shape& s = c.shape;
      SCOPED_TRACE(describe(m) + " seed " + std::to_string(seed));
      for (int64_t b = 0; b < s.batch; ++b) {
        const int64_t lq = c.ragged->lens_q[static_cast<size_t>(b)], lkv = c.ragged->lens_kv[static_cast<size_t>(b)];
        if (lq > 0 && lkv > 0) {
          Problem alone;
          alone.shape = {1, s.heads_q, s.heads_kv, lq, lkv, s.head_dim_qk, s.head_dim_v};
          alone.dtype = c.dtype;
          alone.scale = p.scale;
          alone.mask_expr = &c.mask;
          alone.full_seq_q = lq;
          alone.full_seq_kv = lkv;
          auto cut = [&](const Tensor& t, int64_t len) {
            Tensor out({1, t.shape[1], len, t.shape.size() > 3 ? t.shape[3] : 1});
            if (t.shape.size() == 3) out = Tensor({1, t.shape[1], len});
            const int64_t w = t.shape.size() > 3 ? t.shape[3] : 1;
            for (int64_t h = 0; h < t.shape[1]; ++h)
              std::copy_n(t.at(b, h, 0), len * w, out.at(0, h, 0));
            return out;
          };
          alone.q = cut(in.q, lq);
          alone.k = cut(in.k, lkv);
          alone.v = cut(in.v, lkv);
          materialize_mask(alone);
          const Forward fa = reference_forward(alone);
          const Gradients ga = reference_backward(alone, fa, cut(in.d_out, lq), cut(in.d_lse, lq));
          for (int64_t h = 0; h < s.heads_q; ++h)
            for (int64_t i = 0; i < lq; ++i) {
              const double la = *fa.lse.at(0, h, i), lp = *f.lse.at(b, h, i);
              if (std::isinf(la))
                EXPECT_EQ(lp, la);
              else
                EXPECT_NEAR(lp, la, 1e-13 * (1 + std::abs(la)));
              for (int64_t d = 0; d < s.head_dim_v; ++d) EXPECT_NEAR(f.o.at(b, h, i)[d], fa.o.at(0, h, i)[d], 1e-13);
              for (int64_t d = 0; d < s.head_dim_qk; ++d) EXPECT_NEAR(g.dq.at(b, h, i)[d], ga.dq.at(0, h, i)[d], 1e-12);
            }
          for (int64_t h = 0; h < s.heads_kv; ++h)
            for (int64_t j = 0; j < lkv; ++j) {
              for (int64_t d = 0; d < s.head_dim_qk; ++d) EXPECT_NEAR(g.dk.at(b, h, j)[d], ga.dk.at(0, h, j)[d], 1e-12);
              for (int64_t d = 0; d < s.head_dim_v; ++d) EXPECT_NEAR(g.dv.at(b, h, j)[d], ga.dv.at(0, h, j)[d], 1e-12);
            }
        }
        for (int64_t h = 0; h < s.heads_q; ++h)
          for (int64_t i = lkv > 0 ? lq : 0; i < s.seq_q; ++i) {
            EXPECT_EQ(*f.lse.at(b, h, i), -std::numeric_limits<double>::infinity()) << "b " << b << " row " << i;
            for (int64_t d = 0; d < s.head_dim_v; ++d) EXPECT_EQ(f.o.at(b, h, i)[d], 0.0);
            for (int64_t d = 0; d < s.head_dim_qk; ++d) EXPECT_EQ(g.dq.at(b, h, i)[d], 0.0);
          }
        for (int64_t h = 0; h < s.heads_kv; ++h)
          for (int64_t j = lq > 0 ? lkv : 0; j < s.seq_kv; ++j) {
            for (int64_t d = 0; d < s.head_dim_qk; ++d) EXPECT_EQ(g.dk.at(b, h, j)[d], 0.0);
            for (int64_t d = 0; d < s.head_dim_v; ++d) EXPECT_EQ(g.dv.at(b, h, j)[d], 0.0);
          }
      }
    }
}

// Every composition cuts a ragged batch with its calls (each call's rows and keys of a sequence
// are a prefix of the call's): the merged result is the single call's, to float64 rounding.
TEST(Ragged, CompositionsCutTheSequencesWithTheirCalls) {
  ReferenceBackend ref;
  for (const MaskExpr& m : masks()) {
    const Case c = small_case(5, m);
    const Inputs in = generate_inputs(c);
    const ComposedResult whole = run_composition(ref, c, in, Composition{});
    Composition kv{Composition::Kind::kv_split, {4, 9}}, q{Composition::Kind::q_split, {3, 6}};
    Composition band{Composition::Kind::mask_partition};
    band.window_left = 2;
    band.window_right = 0;
    band.window_align = Align::bottom_right;
    for (const Composition& comp : {kv, q, band, Composition{Composition::Kind::q_split, {5}, 0, 0, Align::top_left, {kv}}}) {
      const ComposedResult r = run_composition(ref, c, in, comp);
      SCOPED_TRACE(describe(comp) + " " + describe(m));
      EXPECT_LE(rel_err(r.fwd.o, whole.fwd.o), 1e-12);
      EXPECT_LE(rel_err(r.grads.dq, whole.grads.dq), 1e-12);
      EXPECT_LE(rel_err(r.grads.dk, whole.grads.dk), 1e-12);
      EXPECT_LE(rel_err(r.grads.dv, whole.grads.dv), 1e-12);
    }
  }
}

// LibTorch's float64 graph builds its mask with tensor operations (oracles/torch_common.h,
// TorchMaskBuilder), each sequence's diagonal from its own lengths: an implementation of the
// ragged mask independent of harness/problem.cpp.
TEST(Ragged, LibTorchFloat64AgreesWithTheReference) {
  std::unique_ptr<Backend> f64;
  try {
    f64 = make_backend("torch.f64");
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  RandomCaseOptions opt;
  opt.max_seq = 24;
  opt.p_ragged = 1.0;
  int ragged = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const Case c = random_case(seed + 900, opt);
    ASSERT_TRUE(c.ragged);
    const Inputs in = generate_inputs(c);
    ReferenceBackend ref;
    const ComposedResult a = run_composition(ref, c, in, Composition{}), b = run_composition(*f64, c, in, Composition{});
    SCOPED_TRACE(write_case(c));
    EXPECT_LE(rel_err(b.fwd.o, a.fwd.o), 1e-11);
    EXPECT_LE(rel_err(b.grads.dq, a.grads.dq), 1e-10);
    EXPECT_LE(rel_err(b.grads.dk, a.grads.dk), 1e-10);
    EXPECT_LE(rel_err(b.grads.dv, a.grads.dv), 1e-10);
    ragged += c.ragged->lens_q != std::vector<int64_t>(c.ragged->lens_q.size(), c.shape.seq_q);
  }
  EXPECT_GE(ragged, 20);  // most draws have a sequence shorter than the padded length
}

TEST(Ragged, GeneratorDrawsEdgeLengthsAndLeavesOtherCasesAlone) {
  RandomCaseOptions opt;
  opt.p_ragged = 1.0;
  int zero = 0, one = 0, full = 0, gaps = 0, tails = 0, paged = 0, slack = 0, misaligned = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const Case c = random_case(seed, opt);
    ASSERT_TRUE(c.ragged);
    EXPECT_NO_THROW(validate(c)) << write_case(c);
    for (int64_t l : c.ragged->lens_q) zero += l == 0, one += l == 1, full += l == c.shape.seq_q;
    gaps += c.ragged->gap_kv > 0;
    tails += c.ragged->tail > 0;
    paged += c.ragged->page_size > 0;
    slack += c.ragged->max_slack > 0;
    misaligned += c.ragged->misaligned;
    // The rest of the case is what the seed gives without a ragged batch.
    RandomCaseOptions dense = opt;
    dense.p_ragged = 0;
    Case without = c;
    without.ragged.reset();
    EXPECT_EQ(random_case(seed, dense), without);
  }
  EXPECT_GT(zero, 50);
  EXPECT_GT(one, 50);
  EXPECT_GT(full, 100);
  EXPECT_GT(gaps, 100);
  EXPECT_GT(tails, 100);
  EXPECT_GT(paged, 100);
  EXPECT_GT(slack, 40);
  EXPECT_GT(misaligned, 15);
}

// The campaign's known-deviation predicates read a case's calls through a probe backend: it takes
// a ragged batch (it reads the dense mask), so a campaign's report of a ragged case does not fail.
TEST(Ragged, CompositionCallsOfARaggedCaseAreProbed) {
  Case c = small_case(3, MaskExpr::all_visible());
  c.composition.kind = Composition::Kind::kv_split;
  c.composition.bounds = {5};
  std::vector<CompositionCall> calls;
  ASSERT_NO_THROW(calls = composition_calls(c));
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].shape.seq_kv, 5);
  EXPECT_TRUE(calls[1].masked_row);  // sequence 4 has no key in either part
}

TEST(Ragged, EnvelopeClauseRefusesUnlessTaken) {
  const Case c = small_case(3, MaskExpr::all_visible());
  const Problem p = full_problem(c, generate_inputs(c));
  SupportEnvelope e;
  ASSERT_TRUE(e.refusal(p));
  EXPECT_EQ(*e.refusal(p), "a ragged batch (takes none)");
  // Always enforced: a library never has the last word on it, whatever the envelope says.
  e.library_decides = SupportEnvelope::library_decides_all_but({});
  EXPECT_FALSE(e.decided_by_library(EnvelopeClause::ragged));
  EXPECT_TRUE(e.refusal(p));
  e.ragged = true;
  EXPECT_FALSE(e.refusal(p));
  EXPECT_EQ(envelope_from_json(to_json(e)), e);
  // A dense batch passes the clause untaken.
  Case dense = c;
  dense.ragged.reset();
  EXPECT_FALSE(SupportEnvelope{}.refusal(full_problem(dense, generate_inputs(dense))));
  // The float64 reference takes one; a composition's part refuses for a backend that does not.
  ReferenceBackend ref;
  EXPECT_TRUE(ref.envelope().ragged);
}

TEST(Ragged, ShrinkerOffersADenseBatchAndKeepsLengthsInsideTheShape) {
  const Case c = small_case(3, MaskExpr::causal_mask(Align::bottom_right));
  bool dense = false, no_gaps = false, unpaged = false, plain = false, smaller_batch = false;
  for (const Case& x : shrink_candidates(c)) {
    dense = dense || !x.ragged;
    if (x.ragged) {
      no_gaps = no_gaps || (x.ragged->gap_q == 0 && x.ragged->gap_kv == 0 && x.ragged->tail == 0);
      unpaged = unpaged || x.ragged->page_size == 0;
      plain = plain || (x.ragged->max_slack == 0 && !x.ragged->misaligned);
      ASSERT_EQ(static_cast<int64_t>(x.ragged->lens_q.size()), x.shape.batch);
      for (int64_t l : x.ragged->lens_q) ASSERT_LE(l, x.shape.seq_q);
      for (int64_t l : x.ragged->lens_kv) ASSERT_LE(l, x.shape.seq_kv);
      smaller_batch = smaller_batch || x.shape.batch < c.shape.batch;
    }
    EXPECT_LT(case_size(x), case_size(c)) << write_case(x);
  }
  EXPECT_TRUE(dense);
  EXPECT_TRUE(no_gaps);
  EXPECT_TRUE(unpaged);
  EXPECT_TRUE(plain);
  EXPECT_TRUE(smaller_batch);
}

// A backend with a length bug, around a correct one (torch.math): the padded batch computed
// dense (every absent key visible), one key past each short sequence visible, or the diagonal
// aligned at the padded lengths instead of each sequence's own.
enum class LengthBug { none, padded_dense, one_key_past, padded_diagonal };

class BuggyLengths final : public Backend {
 public:
  BuggyLengths(std::unique_ptr<Backend> inner, LengthBug bug) : inner_(std::move(inner)), bug_(bug) {}
  std::string name() const override { return inner_->name(); }
  std::optional<Contract> contract(DType d) const override { return inner_->contract(d); }
  SupportEnvelope envelope() const override { return inner_->envelope(); }
  HostScores host_scores() const override { return inner_->host_scores(); }
  Forward forward(const Problem& p) override { return inner_->forward(planted(p)); }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    return inner_->backward(planted(p), f, d_out, d_lse);
  }

 private:
  Problem planted(const Problem& p) const {
    Problem x = p;
    switch (bug_) {
      case LengthBug::none:
        return x;
      case LengthBug::padded_dense:
        x.lens_q.clear();
        x.lens_kv.clear();
        break;
      case LengthBug::one_key_past:
        for (int64_t& l : x.lens_kv) l = std::min(l + 1, x.full_seq_kv);
        break;
      case LengthBug::padded_diagonal:
        // Causal bottom-right at the padded lengths: key j visible iff j <= i + (Skv - Sq) of the
        // padded problem, a top-left band with that right bound (torch.math builds its mask from
        // the expression and the lengths, so the bug goes into the expression).
        padded_diagonal_ = MaskExpr::window(-1, x.full_seq_kv - x.full_seq_q, Align::top_left);
        x.mask_expr = &padded_diagonal_;
        break;
    }
    materialize_mask(x);
    return x;
  }
  std::unique_ptr<Backend> inner_;
  LengthBug bug_;
  mutable MaskExpr padded_diagonal_;
};

TEST(Ragged, PlantedLengthBugsAreFlaggedAndTheCorrectBackendIsNot) {
  std::unique_ptr<Backend> probe;
  try {
    probe = make_backend("torch.math");
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  struct Row {
    LengthBug bug;
    const char* name;
    int flagged = 0, cases = 0;
  };
  Row rows[] = {{LengthBug::none, "none"},
                {LengthBug::padded_dense, "padded_dense"},
                {LengthBug::one_key_past, "one_key_past"},
                {LengthBug::padded_diagonal, "padded_diagonal"}};
  for (uint64_t seed = 0; seed < 8; ++seed)
    for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
      Case c = small_case(seed + 40, MaskExpr::causal_mask(Align::bottom_right));
      c.dtype = dtype;
      c.shape.head_dim_qk = c.shape.head_dim_v = 16;
      for (Row& r : rows) {
        BuggyLengths be(make_backend("torch.math"), r.bug);
        DiffOptions opt;
        opt.check_determinism = false;
        const DiffReport rep = run_differential(c, {&be}, default_oracles(), opt);
        ++r.cases;
        r.flagged += !rep.findings.empty();
      }
    }
  for (const Row& r : rows) {
    std::printf("length bug %-16s flagged in %d of %d cases\n", r.name, r.flagged, r.cases);
    SCOPED_TRACE(r.name);
    if (r.bug == LengthBug::none)
      EXPECT_EQ(r.flagged, 0);
    else
      EXPECT_EQ(r.flagged, r.cases);
  }
}

// A backend that promises batch invariance is run again inside a larger batch: the ragged batch
// keeps its sequences there (the added entries full length), and the reference, which is batch
// invariant, raises nothing.
class InvariantReference final : public Backend {
 public:
  std::string name() const override { return "reference.invariant"; }
  SupportEnvelope envelope() const override { return ref_.envelope(); }
  std::optional<Contract> contract(DType) const override { return Contract::fp64; }
  bool batch_invariant() const override { return true; }
  Forward forward(const Problem& p) override { return ref_.forward(p); }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    return ref_.backward(p, f, d_out, d_lse);
  }

 private:
  ReferenceBackend ref_;
};

TEST(Ragged, BatchInvarianceKeepsTheSequences) {
  InvariantReference be;
  for (const MaskExpr& m : masks()) {
    const Case c = small_case(9, m);
    DiffOptions opt;
    opt.check_determinism = true;
    const DiffReport rep = run_differential(c, {&be}, default_oracles(), opt);
    ASSERT_EQ(rep.runs.size(), 1u);
    EXPECT_FALSE(rep.runs[0].skipped) << rep.runs[0].skip_reason;
    for (const auto& f : rep.findings) ADD_FAILURE() << f.signature.to_string() << " " << f.detail;
  }
}

// Campaign-scale: torch.math, its SDPA entry and the CPU flash kernel over random ragged cases,
// judged against the reference: no finding.
TEST(Ragged, LibTorchCpuBackendsPassRandomRaggedCases) {
  std::vector<std::unique_ptr<Backend>> owned;
  try {
    for (const char* name : {"torch.math", "torch.sdpa.math", "torch.sdpa.cpu_flash"}) owned.push_back(make_backend(name));
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  std::vector<Backend*> backends;
  for (auto& b : owned) backends.push_back(b.get());
  RandomCaseOptions opt;
  opt.max_seq = 40;
  opt.p_ragged = 1.0;
  int judged = 0;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    const Case c = random_case(seed + 7000, opt);
    DiffOptions dopt;
    dopt.check_determinism = false;
    const DiffReport rep = run_differential(c, backends, default_oracles(), dopt);
    EXPECT_TRUE(rep.findings.empty()) << write_case(c);
    ++judged;
  }
  EXPECT_EQ(judged, 60);
}

}  // namespace
}  // namespace attnfuzz
