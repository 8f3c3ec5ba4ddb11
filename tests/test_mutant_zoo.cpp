// Every mutant of the zoo (tests/mutants/) through the full differential check: found,
// with the expected signature class, on the seed scenario where the bug can show there
// and on a random sample of cases; the ABI loader refuses other versions, and hands ragged
// batches to a plugin of the varlen interface (ABI 3, tests/plugins/varlen_plugin.c) packed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "campaign/minimize.h"
#include "generators/envelope_cases.h"
#include "generators/random_case.h"
#include "generators/shrink.h"
#include "harness/case_json.h"
#include "harness/differential.h"
#include "harness/rng.h"
#include "backends/plugin.h"
#include "backends/plugin_packed.h"
#include "backends/registry.h"

namespace attnfuzz {
namespace {

std::unique_ptr<Backend> mutant(const std::string& name) {
  return load_plugin(std::string(ATTNFUZZ_MUTANT_DIR) + "/libattnfuzz_mutant_" + name + ".so");
}

const char* kSeedCase = R"({"format":"attnfuzz-case/1","seed":20240904,
  "shape":{"heads_q":2,"seq_q":64,"head_dim_qk":32},"mask":{"kind":"causal"},
  "grads":{"d_out":{"dist":"near_constant","mean":1.0,"sigma":0.0}},
  "composition":{"kind":"q_split","bounds":[16],"children":[{"kind":"single"},
    {"kind":"mask_partition","window":{"left":16,"right":0}}]}})";

std::set<std::string> found_classes(Backend& be, const Case& c) {
  std::set<std::string> out;
  for (const auto& f : run_differential(c, {&be}, default_oracles()).findings) out.insert(to_string(f.signature.cls));
  return out;
}

TEST(MutantZoo, SeedScenarioExposesTheSeedBugs) {
  const Case seed = case_from_string(kSeedCase);
  auto ok = mutant("ok");
  EXPECT_TRUE(found_classes(*ok, seed).empty());
  // The FlexAttention seed: forward right, dQ and dK wrong through the merge only.
  auto dlse = mutant("ignores_dlse");
  const DiffReport r = run_differential(seed, {dlse.get()}, default_oracles());
  std::set<std::string> tensors;
  for (const auto& f : r.findings) {
    EXPECT_EQ(f.signature.cls, FindingClass::mismatch) << f.signature.to_string();
    EXPECT_EQ(f.signature.composition, CompositionClass::merged) << f.signature.to_string();
    tensors.insert(f.signature.tensor_name());
  }
  EXPECT_TRUE(tensors.count("dQ") && tensors.count("dK"));
  EXPECT_FALSE(tensors.count("O") || tensors.count("LSE"));
  // The JAX seed: a backward coarser than its contract, reported as such.
  auto tf32 = mutant("tf32_backward");
  const DiffReport t = run_differential(seed, {tf32.get()}, default_oracles());
  ASSERT_FALSE(t.findings.empty());
  for (const auto& f : t.findings) {
    EXPECT_EQ(f.signature.cls, FindingClass::contract_violation) << f.signature.to_string();
    EXPECT_NE(f.detail.find("computes like tf32"), std::string::npos) << f.detail;
  }
}

// Each bug found with its class on a random sample (the first cases that trigger it
// are enough; the sample is fixed, so the result is deterministic).
TEST(MutantZoo, RandomSampleFindsEveryBugWithItsClass) {
  const std::map<std::string, std::string> expected{{"ignores_dlse", "mismatch"},    {"tf32_backward", "contract_violation"},
                                                    {"causal_align", "mismatch"},    {"last_tile_unmasked", "mismatch"},
                                                    {"masked_rows_nan", "semantic"}, {"gqa_backward_map", "mismatch"},
                                                    {"underflow_rows_masked", "mismatch"}, {"batch_dependent_split", "batch_variant"},
                                                    {"split_exp_overflow", "nan_inf"}};
  for (const auto& [name, cls] : expected) {
    auto be = mutant(name);
    int hits = 0, cases = 0;
    for (uint64_t seed = 0; seed < 400 && hits < 3; ++seed) {
      RandomCaseOptions opt;
      if (name == "tf32_backward") opt.dtypes = {DType::f32};
      if (name == "underflow_rows_masked") opt.p_breaking_values = 0.25;  // its trigger: rows far below zero
      if (name == "split_exp_overflow") opt.p_breaking_values = 0.25;     // its trigger: extreme logits in a key split
      const Case c = random_case(seed + 77, opt);
      ++cases;
      const auto classes = found_classes(*be, c);
      hits += classes.count(cls) > 0;
    }
    EXPECT_GE(hits, 3) << name << ": expected class " << cls << " found in " << hits << " of " << cases << " random cases";
  }
}

// split_exp_overflow needs extreme logits and a key split together: either alone passes.
TEST(MutantZoo, SplitExpOverflowNeedsLargeLogitsAndAKeySplit) {
  auto be = mutant("split_exp_overflow");
  auto case_with = [](bool large_logits, bool split) {
    std::string json = R"({"format":"attnfuzz-case/1","seed":3,"dtype":"bf16",
      "shape":{"batch":1,"heads_q":2,"heads_kv":2,"seq_q":16,"seq_kv":40,"head_dim_qk":16,"head_dim_v":16},
      "grads":{"d_out":{"dist":"normal"}})";
    if (large_logits) json += R"(,"values":{"q":{"dist":"normal","sigma":8},"k":{"dist":"normal","sigma":8}})";
    if (split) json += R"(,"composition":{"kind":"kv_split","bounds":[24]})";
    return case_from_string(json + "}");
  };
  EXPECT_EQ(found_classes(*be, case_with(true, true)).count("nan_inf"), 1u);
  EXPECT_TRUE(found_classes(*be, case_with(true, false)).empty());
  EXPECT_TRUE(found_classes(*be, case_with(false, true)).empty());
}

// The JAX seed's situation as a pair: two kernels that each keep their contract (TF32 for fp32)
// but compute at different precisions, one in fp32, the other its backward in TF32. Alone each
// passes; together they are a consistency finding on the gradients (never on O or LSE, which
// both compute in fp32), which minimizes to a small case that still shows it.
TEST(MutantZoo, APairAtTwoPrecisionsOfOneContractIsInconsistent) {
  auto strict = mutant("tf32_declared_strict");
  auto loose = mutant("tf32_declared_tf32_backward");
  const OracleSet oracles = default_oracles();
  std::optional<Reproducer> found;
  int cases = 0;
  for (uint64_t seed = 0; seed < 200 && !found; ++seed) {
    RandomCaseOptions opt;
    opt.dtypes = {DType::f32};
    const Case c = random_case(seed + 91, opt);
    ++cases;
    EXPECT_TRUE(found_classes(*strict, c).empty()) << write_case(c);
    EXPECT_TRUE(found_classes(*loose, c).empty()) << write_case(c);
    const DiffReport run = run_differential(c, {strict.get(), loose.get()}, oracles);
    for (const auto& f : run.findings) {
      EXPECT_EQ(f.signature.cls, FindingClass::consistency) << f.signature.to_string() << " " << f.detail;
      EXPECT_EQ(f.signature.backend, "plugin.mutant_tf32_declared_strict~plugin.mutant_tf32_declared_tf32_backward");
      EXPECT_TRUE(f.signature.tensor == TensorId::dQ || f.signature.tensor == TensorId::dK || f.signature.tensor == TensorId::dV) << f.signature.to_string();
      if (!found) found = reproducer_of(c, {}, f, run, {});
    }
  }
  ASSERT_TRUE(found) << "no consistency finding in " << cases << " random fp32 cases";
  const Judge judge = in_process_judge({strict.get(), loose.get()}, oracles, false);
  ShrinkReport rep;
  const Reproducer m = minimize(*found, judge, shrink_candidates, case_size, &rep);
  std::cout << "minimized the pair in " << rep.steps << " steps: " << describe_shape(m.c.shape) << " -> " << m.finding.signature.to_string()
            << "\n";
  EXPECT_EQ(m.finding.signature, found->finding.signature);
  EXPECT_TRUE(signature_holds(judge, m.c, found->finding.signature));
  EXPECT_LT(rep.size_after, rep.size_before);
}

// A kernel that reads outside its view (here its rows' padding, as a vector load wider than
// the row would) is invisible while that memory holds zeros, and found once the case's
// surround is NaN or the largest finite value; the minimizer keeps the surround that shows it.
TEST(MutantZoo, AReadOutsideTheViewShowsOnlyThroughTheSurround) {
  auto be = mutant("reads_row_padding");
  auto ok = mutant("ok");
  Case c = case_from_string(R"({"format":"attnfuzz-case/1","seed":5,"shape":{"heads_q":2,"seq_q":8,"head_dim_qk":12},
    "layouts":{"q":{"order":"bhsd","row_padding":4},"k":{"order":"bshd","row_padding":5}}})");
  EXPECT_TRUE(found_classes(*be, c).empty()) << "zero padding hides the bug";
  for (Surround::Fill fill : {Surround::Fill::nan, Surround::Fill::large}) {
    c.layouts.surround = {fill, 8};
    EXPECT_FALSE(found_classes(*be, c).empty()) << fill_name(fill);
    EXPECT_TRUE(found_classes(*ok, c).empty()) << fill_name(fill) << ": a kernel that reads only its view";
  }
  c.layouts.surround = {Surround::Fill::nan, 64};
  const OracleSet oracles = default_oracles();
  const DiffReport run = run_differential(c, {be.get()}, oracles);
  ASSERT_FALSE(run.findings.empty());
  const Reproducer found = reproducer_of(c, {}, run.findings[0], run, {});
  ShrinkReport rep;
  const Reproducer m = minimize(found, in_process_judge({be.get()}, oracles, false), shrink_candidates, case_size, &rep);
  EXPECT_EQ(m.c.layouts.surround.fill, Surround::Fill::nan) << describe(m.c.layouts);
  EXPECT_EQ(m.c.layouts.surround.guard, 0) << describe(m.c.layouts);
  EXPECT_GT(m.c.layouts[TensorId::Q].row_padding + m.c.layouts[TensorId::K].row_padding, 0) << describe(m.c.layouts);
}

// A minimization whose time is spent stops between candidates with the smallest case it has
// found, which still shows the finding; without a limit it goes on to the end.
TEST(MutantZoo, AMinimizationOutOfTimeKeepsTheSmallestCaseSoFar) {
  auto be = mutant("ignores_dlse");
  const Case seed = case_from_string(kSeedCase);
  const OracleSet oracles = default_oracles();
  const DiffReport run = run_differential(seed, {be.get()}, oracles);
  ASSERT_FALSE(run.findings.empty());
  const Reproducer found = reproducer_of(seed, {}, run.findings[0], run, {});
  const Judge judge = in_process_judge({be.get()}, oracles, false);
  int checks = 0;
  ShrinkReport cut, full;
  const Reproducer early = minimize(found, judge, shrink_candidates, case_size, &cut, [&checks] { return ++checks > 5; });
  const Reproducer whole = minimize(found, judge, shrink_candidates, case_size, &full);
  EXPECT_TRUE(cut.out_of_time);
  EXPECT_EQ(cut.attempts, 5);
  EXPECT_FALSE(full.out_of_time);
  EXPECT_GT(full.attempts, cut.attempts);
  EXPECT_LE(case_size(early.c), case_size(seed));
  EXPECT_LE(case_size(whole.c), case_size(early.c));
  EXPECT_EQ(early.finding.signature, found.finding.signature) << "the case kept still shows the finding";
}

// The loader hands plugins real views (each tensor its own order, padding, unaligned
// offset; packed QKV and gradients): the correct mutant and the documented minimal plugin,
// which honour strides, agree with the reference on every layout.
TEST(PluginLoader, CorrectPluginsAgreeWithTheReferenceInEveryLayout) {
  auto ok = mutant("ok");
  auto minimal = make_backend(std::string("plugin:") + ATTNFUZZ_PLUGIN_DIR + "/libattnfuzz_plugin_minimal.so");
  RandomCaseOptions opt;
  opt.p_tensor_layouts = 1.0;
  std::map<std::string, int> seen;
  for (uint64_t seed = 0; seed < 120; ++seed) {
    const Case c = random_case(seed + 9000, opt);
    const DiffReport r = run_differential(c, {ok.get(), minimal.get()}, default_oracles());
    for (const auto& f : r.findings) ADD_FAILURE() << f.signature.to_string() << " " << f.detail << "\n" << describe(c.layouts);
    for (const auto& run : r.runs) seen[run.backend + (run.skipped ? " skipped" : " ran")] += 1;
    seen["packed inputs"] += c.layouts.inputs != Packing::none && packing_applies(c.layouts.inputs, c.shape);
    seen["packed grads"] += c.layouts.grads != Packing::none && packing_applies(c.layouts.grads, c.shape);
    for (TensorId t : kLaidOutTensors) seen["unaligned"] += c.layouts[t].offset % 8 != 0;
  }
  EXPECT_GE(seen["plugin.mutant_ok ran"], 100);
  EXPECT_GE(seen["packed inputs"], 5);
  EXPECT_GE(seen["packed grads"], 3);
  EXPECT_GE(seen["unaligned"], 50);
}

TEST(PluginLoader, RefusesAnotherAbiVersionClearly) {
  try {
    load_plugin(std::string(ATTNFUZZ_PLUGIN_DIR) + "/libattnfuzz_plugin_wrong_abi.so");
    FAIL() << "loaded a plugin of ABI version 999";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("ABI version 999, this attnfuzz speaks 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_plugin("/nonexistent/lib.so"), std::runtime_error);
}

// A declared envelope (attnfuzz_plugin_envelope) is what campaigns aim at, narrowed to the
// contract's dtypes; without one, the contract's dtypes are; a bad one refuses the plugin.
TEST(PluginLoader, DeclaredEnvelopeIsWhatCampaignsAimAt) {
  auto be = load_plugin(std::string(ATTNFUZZ_PLUGIN_DIR) + "/libattnfuzz_plugin_envelope.so");
  const SupportEnvelope e = be->envelope();
  EXPECT_EQ(e.dtypes, std::vector<DType>{DType::bf16});  // fp16 is not in its contract
  EXPECT_EQ(e.max_head_dim, 64);
  EXPECT_EQ(e.head_dim_multiple, 8);
  EXPECT_EQ(e.masks, MaskSupport::causal_or_none);
  EXPECT_EQ(e.max_seq, SupportEnvelope::kUnbounded);  // left out: unrestricted
  EXPECT_FALSE(e.decided_by_library(EnvelopeClause::dtype));
  EXPECT_TRUE(e.decided_by_library(EnvelopeClause::head_dim));  // supports() has the last word

  CaseMix mix;
  mix.targets = {{be->name(), e, false}};
  mix.edge_share = 0;
  int inside = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    const Case c = aimed_campaign_case(17, i, mix).c;
    inside += c.dtype == DType::bf16 && c.shape.head_dim_qk <= 64 && c.shape.head_dim_v <= 64 && c.shape.head_dim_qk % 8 == 0 &&
              c.shape.head_dim_v % 8 == 0;
  }
  EXPECT_EQ(inside, 200);

  EXPECT_EQ(load_plugin(std::string(ATTNFUZZ_PLUGIN_DIR) + "/libattnfuzz_plugin_minimal.so")->envelope().dtypes,
            std::vector<DType>{DType::f32});
  try {
    load_plugin(std::string(ATTNFUZZ_PLUGIN_DIR) + "/libattnfuzz_plugin_envelope_bad.so");
    FAIL() << "loaded a plugin whose envelope has an unknown key";
  } catch (const std::runtime_error& ex) {
    EXPECT_NE(std::string(ex.what()).find("malformed attnfuzz_plugin_envelope(): envelope: unknown key 'max_headdim'"), std::string::npos)
        << ex.what();
  }
}

TEST(PluginLoader, DocumentedMinimalPluginLoadsAndPasses) {
  auto be = make_backend(std::string("plugin:") + ATTNFUZZ_PLUGIN_DIR + "/libattnfuzz_plugin_minimal.so");
  Case c = case_from_string(kSeedCase);
  c.d_lse = ValueDist{};
  const DiffReport r = run_differential(c, {be.get()}, default_oracles());
  for (const auto& f : r.findings) ADD_FAILURE() << f.signature.to_string() << " " << f.detail;
  ASSERT_FALSE(r.runs.empty());
  EXPECT_FALSE(r.runs[0].skipped) << r.runs[0].skip_reason;
  c.dtype = DType::bf16;
  const DiffReport skipped = run_differential(c, {be.get()}, default_oracles());
  EXPECT_TRUE(skipped.runs[0].skipped);  // the plugin's contract has no bf16
}

// ---- The varlen interface (ABI 3): tests/plugins/varlen_plugin.c through the loader ----

std::unique_ptr<Backend> test_plugin(const std::string& name) {
  return load_plugin(std::string(ATTNFUZZ_PLUGIN_DIR) + "/libattnfuzz_plugin_" + name + ".so");
}

// A ragged batch in every case, each edge of the varlen interfaces in a good share (gaps between
// Q's and K's sequences, a tail, pages of K and V, maxima past the longest sequence, misaligned
// buffers: more often than random_ragged draws them), sequences of 0 and 1 rows as random_ragged
// draws them; masks none or causal (top-left is each sequence's bottom-right where it is square,
// and declined elsewhere), half with a composition as random_case draws them. Every tenth batch is
// dense (a varlen plugin gets it packed too, every sequence full).
Case varlen_case(uint64_t seed, std::vector<DType> dtypes = {DType::f32, DType::f16, DType::bf16}) {
  RandomCaseOptions opt;
  opt.max_batch = 4;
  opt.p_ragged = 1.0;
  opt.dtypes = std::move(dtypes);
  Case c = random_case(seed + 6'000'000, opt);
  c.mask = seed % 3 == 0 ? MaskExpr::all_visible() : MaskExpr::causal_mask(seed % 3 == 1 ? Align::bottom_right : Align::top_left);
  SplitMix r(splitmix64(seed ^ 0x7661726c656e2121ull));
  Ragged& g = *c.ragged;
  g.gap_q = r.chance(0.5) ? r.range(1, 5) : 0;
  g.gap_kv = r.chance(0.5) ? r.range(1, 5) : 0;
  g.tail = r.chance(0.5) ? r.range(1, 6) : 0;
  g.page_size = r.chance(0.5) ? r.range(1, 9) : 0;
  g.max_slack = r.chance(0.3) ? r.range(1, 40) : 0;
  g.misaligned = r.chance(0.3);
  if (seed % 10 == 9) c.ragged.reset();
  validate(c);
  return c;
}
constexpr int kVarlenCases = 300;

// The loader's packing, against harness/case.h's offsets and page table: every row in its place,
// NaN in the gaps, the tail, past each sequence's keys in its last page and before a misaligned
// buffer; an output's poison counted where the plugin must write and guarded everywhere else.
TEST(VarlenPlugin, PackedRowsFollowTheRaggedOffsetsAndThePageTable) {
  Case c;
  c.seed = 17;
  c.shape = {3, 2, 1, 6, 9, 4, 4};
  Ragged g;
  g.lens_q = {2, 0, 6};
  g.lens_kv = {9, 3, 5};
  g.gap_q = 1, g.gap_kv = 2, g.tail = 3, g.page_size = 4, g.max_slack = 5, g.misaligned = true;
  c.ragged = g;
  validate(c);
  const Problem p = full_problem(c, generate_inputs(c));
  const PackedGeometry geo = packed_geometry(p, true);
  EXPECT_EQ(geo.q.starts, g.starts_q());
  EXPECT_EQ(geo.kv.starts, g.starts_kv());
  EXPECT_EQ(geo.q.starts, (std::vector<int64_t>{0, 3, 4, 10}));  // the gap after each sequence but the last
  EXPECT_EQ(geo.q.total, 13);                                    // and the tail after it
  EXPECT_EQ(geo.kv.total, 24);
  EXPECT_EQ(geo.max_q, 6 + 5);
  EXPECT_EQ(geo.max_kv, 9 + 5);
  EXPECT_EQ(geo.lead, 1);
  const PageTable t = page_table(g, c.seed);
  EXPECT_EQ(geo.pages, t.pages);
  EXPECT_EQ(geo.pages_per_seq, 3);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(geo.table[static_cast<size_t>(b * 3 + i)], t.at(b, i)) << b << " " << i;
  EXPECT_EQ(geo.table[4], -1);  // sequence 1 has one page

  PieceBuffer q = PieceBuffer::packed(geo.q, 2, 4, ElementType::f32, geo.lead, false);
  q.store(p.q);
  const af_tensor qt = q.tensor();
  EXPECT_EQ(qt.ndim, 4);
  EXPECT_EQ(std::vector<int64_t>(qt.shape, qt.shape + 4), (std::vector<int64_t>{1, 2, 13, 4}));
  EXPECT_EQ(std::vector<int64_t>(qt.strides, qt.strides + 4), (std::vector<int64_t>{13 * 2 * 4, 4, 8, 1}));
  EXPECT_EQ(static_cast<unsigned char*>(qt.data), q.base() + 4);  // one fp32 element in
  const float* qf = static_cast<const float*>(qt.data);
  EXPECT_EQ(qf[(4 + 5) * 8 + 1 * 4 + 3], static_cast<float>(p.q.at(2, 1, 5)[3]));  // sequence 2's query 5, head 1
  for (int64_t row : {2, 3, 10, 11, 12}) EXPECT_TRUE(std::isnan(qf[row * 8])) << "row " << row << " is a gap or the tail";
  EXPECT_TRUE(std::isnan(qf[-1]));
  size_t poisoned = 0;
  const Tensor back = q.load({3, 2, 6, 4}, 0.0, &poisoned);
  EXPECT_EQ(poisoned, 0u);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(back.at(b, 1, i)[2], i < g.lens_q[static_cast<size_t>(b)] ? p.q.at(b, 1, i)[2] : 0.0);

  PieceBuffer lse = PieceBuffer::packed(geo.q, 2, 0, ElementType::f32, geo.lead, true);
  const af_tensor lt = lse.tensor();
  EXPECT_EQ(lt.ndim, 3);
  EXPECT_EQ(std::vector<int64_t>(lt.strides, lt.strides + 3), (std::vector<int64_t>{2 * 13, 13, 1}));
  lse.load({3, 2, 6}, 0.0, &poisoned);
  EXPECT_EQ(poisoned, 2u * 8u);  // every sequence row of both heads still poisoned
  EXPECT_EQ(lse.written_outside(), 0u);
  static_cast<float*>(lt.data)[1 * 13 + 2] = 0.0f;  // head 1, the gap after sequence 0
  EXPECT_EQ(lse.written_outside(), 1u);

  PieceBuffer k = PieceBuffer::pool(geo, 1, 4, ElementType::f32);
  k.store(p.k);
  const af_tensor kt = k.tensor();
  EXPECT_EQ(std::vector<int64_t>(kt.shape, kt.shape + 4), (std::vector<int64_t>{t.pages, 1, 4, 4}));
  const float* kf = static_cast<const float*>(kt.data);
  EXPECT_EQ(kf[t.at(0, 1) * kt.strides[0] + 1 * kt.strides[2] + 2], static_cast<float>(p.k.at(0, 0, 5)[2]));  // sequence 0's key 5
  EXPECT_TRUE(std::isnan(kf[t.at(1, 0) * kt.strides[0] + 3 * kt.strides[2]])) << "past sequence 1's 3 keys";
}

// Every output and gradient of the clean plugin through the single call and the case's
// composition, on ragged cases with every edge: no finding, and most runs taken.
TEST(VarlenPlugin, CleanPluginPassesRaggedCasesWithEveryEdge) {
  auto be = test_plugin("varlen");
  EXPECT_TRUE(be->envelope().ragged) << "AF_TAKES_PACKED implies ragged batches";
  EXPECT_EQ(be->envelope().masks, MaskSupport::causal_or_none);
  const OracleSet oracles = default_oracles();
  std::map<std::string, int> seen, skipped;
  for (uint64_t seed = 0; seed < kVarlenCases; ++seed) {
    const Case c = varlen_case(seed);
    const DiffReport r = run_differential(c, {be.get()}, oracles);
    for (const auto& f : r.findings) ADD_FAILURE() << f.signature.to_string() << " " << f.detail << "\n" << write_case(c);
    int ran = 0;
    for (const auto& run : r.runs) {
      ++seen["runs"];
      if (run.skipped) ++skipped[run.skip_reason.substr(0, 120)];
      ran += !run.skipped;
    }
    seen["runs taken"] += ran;
    if (!ran) continue;
    ++seen["cases run"];
    if (!c.ragged) {
      ++seen["dense"];
      continue;
    }
    const Ragged& g = *c.ragged;
    seen["gap_q"] += g.gap_q > 0 && c.shape.batch > 1;
    seen["gap_kv"] += g.gap_kv > 0 && c.shape.batch > 1;
    seen["tail"] += g.tail > 0;
    seen["paged"] += g.page_size > 0;
    seen["max_slack"] += g.max_slack > 0;
    seen["misaligned"] += g.misaligned;
    seen["16-bit"] += c.dtype != DType::f32;
    seen["composition"] += ran > 1;
  }
  for (const auto& [why, n] : skipped) std::cout << "  skipped " << n << "x: " << why << "\n";
  for (const auto& [what, n] : seen) std::cout << "  " << what << ": " << n << "\n";
  EXPECT_GT(seen["runs taken"] * 2, seen["runs"]);
  for (const char* edge : {"gap_q", "gap_kv", "tail", "paged", "max_slack", "misaligned", "16-bit", "composition", "dense"})
    EXPECT_GE(seen[edge], 20) << edge;
}

// Whether a build of the plugin returns other bits than the clean build for the case's single
// call (forward, then backward on the clean forward's O and LSE): the planted bug showed. An
// out-of-bounds write shows too.
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape == b.shape && std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(double)) == 0;
}
bool bug_shows(Backend& clean, Backend& bug, const Case& c) {
  const Inputs in = generate_inputs(c);
  const Problem p = full_problem(c, in);
  if (clean.unsupported_reason(p)) return false;
  try {
    const Forward f = clean.forward(p), fb = bug.forward(p);
    if (!same_bits(f.o, fb.o) || !same_bits(f.lse, fb.lse)) return true;
    const Gradients g = clean.backward(p, f, in.d_out, in.d_lse), gb = bug.backward(p, f, in.d_out, in.d_lse);
    return !same_bits(g.dq, gb.dq) || !same_bits(g.dk, gb.dk) || !same_bits(g.dv, gb.dv);
  } catch (const OutOfBoundsWrite&) {
    return true;
  }
}

// Each planted bug is flagged in (nearly) every case where it changes what the plugin returns,
// with one of the classes it can cause; where it does not show, the case passes.
void expect_planted_bug_flagged(const std::string& build, const std::set<FindingClass>& classes, double share) {
  auto clean = test_plugin("varlen");
  auto bug = test_plugin(build);
  const OracleSet oracles = default_oracles();
  DiffOptions opt;
  opt.check_determinism = false;  // the bugs are deterministic; the clean test runs the check
  int showed = 0, flagged = 0;
  std::map<std::string, int> found;
  for (uint64_t seed = 0; seed < kVarlenCases; ++seed) {
    const Case c = varlen_case(seed);
    const bool shows = bug_shows(*clean, *bug, c);
    const DiffReport r = run_differential(c, {bug.get()}, oracles, opt);
    bool hit = false;
    for (const auto& f : r.findings) {
      ++found[to_string(f.signature.cls)];
      EXPECT_TRUE(classes.count(f.signature.cls)) << f.signature.to_string() << " " << f.detail << "\n" << write_case(c);
      hit = true;
    }
    showed += shows;
    flagged += shows && hit;
    if (shows && !hit) std::cout << "  unflagged: " << write_case(c) << "\n";
  }
  for (const auto& [cls, n] : found) std::cout << "  " << cls << ": " << n << " finding(s)\n";
  std::cout << "  " << build << ": showed in " << showed << " of " << kVarlenCases << " cases, flagged in " << flagged << "\n";
  EXPECT_GE(showed, 50) << build << " showed in too few cases to say anything";
  EXPECT_GE(flagged, share * showed) << build;
}

TEST(VarlenPlugin, PlantedReadPastTheSequenceIsFlagged) {
  // A wrong key's weight is an error of any size: a NaN, a mismatch, a convention broken on a row
  // that sees no key, or an error small enough to read as a coarser precision.
  expect_planted_bug_flagged(
      "varlen_off_by_one", {FindingClass::mismatch, FindingClass::nan_inf, FindingClass::semantic, FindingClass::contract_violation}, 0.9);
}

TEST(VarlenPlugin, PlantedWriteIntoTheTailIsFlaggedOutOfBounds) {
  expect_planted_bug_flagged("varlen_writes_tail", {FindingClass::out_of_bounds}, 1.0);
}

// A plugin of ABI version 2 that takes ragged batches (the minimal plugin declaring "ragged":
// true) gets them as before: padded, through the dense mask, and passes.
TEST(VarlenPlugin, AnOlderPluginTakesRaggedBatchesPaddedAsBefore) {
  auto be = test_plugin("minimal_ragged_v2");
  EXPECT_TRUE(be->envelope().ragged);
  const OracleSet oracles = default_oracles();
  int ran = 0, runs = 0;
  for (uint64_t seed = 0; seed < 30; ++seed) {
    const Case c = varlen_case(seed, {DType::f32});
    const DiffReport r = run_differential(c, {be.get()}, oracles);
    for (const auto& f : r.findings) ADD_FAILURE() << f.signature.to_string() << " " << f.detail << "\n" << write_case(c);
    for (const auto& run : r.runs) {
      ++runs;
      ran += !run.skipped;
      EXPECT_FALSE(run.skipped) << run.skip_reason;  // it reads the dense mask: every mask, every composition
    }
  }
  EXPECT_EQ(ran, runs);
  EXPECT_GE(ran, 30);
}

// The flags of version 3 on a plugin that speaks version 2 (its af_problem would end before the
// fields they hand over): refused at load, in one line naming the flag and the version.
TEST(VarlenPlugin, Version3FlagsOnAnOlderPluginAreRefusedAtLoad) {
  try {
    test_plugin("varlen_v2");
    FAIL() << "loaded a version 2 plugin that sets AF_TAKES_PACKED";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("sets AF_TAKES_PACKED, a flag of ABI version 3, but speaks version 2"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

// Declarations that contradict the varlen interface: refused at load, each in one line.
TEST(VarlenPlugin, ContradictoryDeclarationsAreRefusedAtLoad) {
  const std::map<std::string, std::string> expected{{"varlen_paged_only", "sets AF_TAKES_PAGED_KV without AF_TAKES_PACKED"},
                                                    {"varlen_not_ragged", "declares \"ragged\": false, but sets AF_TAKES_PACKED"}};
  for (const auto& [build, why] : expected) {
    try {
      test_plugin(build);
      ADD_FAILURE() << "loaded " << build;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace attnfuzz

namespace attnfuzz {
namespace {

// Every zoo bug minimizes to a tiny reproducer (B = 1, Hq <= 2, Sq, Skv <= 16, D <= 16)
// that still shows the same signature. The TF32 bug needs enough elements for its
// fingerprint to separate from fp32 (a few hundred): its bound on sizes is the same.
TEST(MutantZoo, EveryBugMinimizesToATinyReproducerWithTheSameSignature) {
  const std::map<std::string, std::string> expected{{"ignores_dlse", "mismatch"},    {"tf32_backward", "contract_violation"},
                                                    {"causal_align", "mismatch"},    {"last_tile_unmasked", "mismatch"},
                                                    {"masked_rows_nan", "semantic"}, {"gqa_backward_map", "mismatch"},
                                                    {"underflow_rows_masked", "mismatch"}, {"batch_dependent_split", "batch_variant"},
                                                    {"split_exp_overflow", "nan_inf"}};
  const OracleSet oracles = default_oracles();
  for (const auto& [name, cls] : expected) {
    auto be = mutant(name);
    std::optional<Reproducer> found;
    for (uint64_t seed = 0; seed < 400 && !found; ++seed) {
      RandomCaseOptions opt;
      if (name == "tf32_backward") opt.dtypes = {DType::f32};
      if (name == "underflow_rows_masked") opt.p_breaking_values = 0.25;  // its trigger: rows far below zero
      if (name == "split_exp_overflow") opt.p_breaking_values = 0.25;     // its trigger: extreme logits in a key split
      const Case c = random_case(seed + 77, opt);
      const DiffReport run = run_differential(c, {be.get()}, oracles);
      for (const auto& f : run.findings)
        if (to_string(f.signature.cls) == cls) {
          found = reproducer_of(c, {}, f, run, {});
          break;
        }
    }
    ASSERT_TRUE(found) << name;
    ShrinkReport rep;
    const Judge judge = in_process_judge({be.get()}, oracles, needs_determinism(found->finding.signature));
    const Reproducer m = minimize(*found, judge, shrink_candidates, case_size, &rep);
    const Shape& s = m.c.shape;
    SCOPED_TRACE(name + ": " + describe_shape(s) + " mask " + describe(m.c.mask) + " composition " + describe(m.c.composition));
    std::cout << "minimized " << name << " in " << rep.steps << " steps: " << describe_shape(s) << " " << to_string(m.c.dtype) << " mask "
              << describe(m.c.mask) << " composition " << describe(m.c.composition) << " dLSE " << to_string(m.c.d_lse.kind) << " -> "
              << m.finding.signature.to_string() << "\n";
    EXPECT_EQ(s.batch, 1);
    // The GQA mapping bug needs Hkv >= 2 and a group >= 2: its floor is Hq = 4, Hkv = 2.
    EXPECT_LE(s.heads_q, name == "gqa_backward_map" ? 4 : 2);
    EXPECT_LE(s.seq_q, 16);
    EXPECT_LE(s.seq_kv, 16);
    EXPECT_LE(s.head_dim_qk, 16);
    EXPECT_LE(s.head_dim_v, 16);
    // No zoo bug depends on memory layout: the shrinker takes every tensor back to the default.
    EXPECT_EQ(m.c.layouts, Layouts{}) << describe(m.c.layouts);
    EXPECT_LT(rep.size_after, rep.size_before);
    EXPECT_TRUE(signature_holds(judge, m.c, found->finding.signature));
    EXPECT_EQ(m.finding.signature, found->finding.signature);
    // Deterministic: the same input minimizes to the same case.
    EXPECT_EQ(minimize(*found, judge, shrink_candidates, case_size).c, m.c);
  }
}

}  // namespace
}  // namespace attnfuzz
