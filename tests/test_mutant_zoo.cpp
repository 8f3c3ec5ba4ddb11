// Every mutant of the zoo (tests/mutants/) through the full differential check: found,
// with the expected signature class, on the seed scenario where the bug can show there
// and on a random sample of cases; the ABI loader refuses other versions.
#include <gtest/gtest.h>

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
#include "backends/plugin.h"
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
