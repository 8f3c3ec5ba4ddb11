// Per-tensor memory layouts (harness/layout.h): the one strides function, the case format
// (new key, old key, round trip), values independent of layout, and the generators, fuzz
// decoder and shrinker reaching every layout.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <optional>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "campaign/repro.h"
#include "generators/fuzz_decode.h"
#include "generators/random_case.h"
#include "generators/shrink.h"
#include "harness/case_json.h"
#include "harness/errors.h"
#include "harness/inputs.h"

namespace attnfuzz {
namespace {

using R = TensorId;
using O = TensorLayout::Order;
using Strides = std::array<int64_t, 4>;

const Shape kShape{2, 6, 3, 5, 7, 8, 4};  // B, Hq, Hkv, Sq, Skv, Dqk, Dv

Layouts with(R r, TensorLayout l) {
  Layouts out;
  out[r] = l;
  return out;
}

TEST(Place, DefaultIsContiguousBhsd) {
  const Placement q = place(Layouts{}, R::Q, kShape);
  EXPECT_EQ(q.ndim, 4);
  EXPECT_EQ(q.sizes, (Strides{2, 6, 5, 8}));
  EXPECT_EQ(q.strides, (Strides{6 * 5 * 8, 5 * 8, 8, 1}));
  EXPECT_EQ(q.offset, 0);
  EXPECT_EQ(q.extent, 2 * 6 * 5 * 8);
  EXPECT_EQ(q.buffer, R::Q);
  const Placement lse = place(Layouts{}, R::LSE, kShape);
  EXPECT_EQ(lse.ndim, 3);
  EXPECT_EQ(lse.strides[0], 6 * 5);
  EXPECT_EQ(lse.strides[1], 5);
  EXPECT_EQ(lse.strides[2], 1);
  EXPECT_EQ(lse.extent, 2 * 6 * 5);
  const Placement v = place(Layouts{}, R::dV, kShape);
  EXPECT_EQ(v.sizes, (Strides{2, 3, 7, 4}));
}

TEST(Place, OrdersPaddingsAndOffsetsByHand) {
  // BSHD, rows padded by 3, offset 5: stride(H) = D + 3, stride(S) = H (D + 3), stride(B) = S H (D + 3).
  Placement p = place(with(R::K, {O::bshd, 3, 0, 5}), R::K, kShape);
  EXPECT_EQ(p.strides, (Strides{7 * 3 * 11, 11, 3 * 11, 1}));
  EXPECT_EQ(p.offset, 5);
  EXPECT_EQ(p.extent, 5 + 2 * 7 * 3 * 11);
  // BHSD with heads padded apart by 4: stride(S) = D, stride(H) = S D + 4, stride(B) = H (S D + 4).
  p = place(with(R::O, {O::bhsd, 0, 4, 0}), R::O, kShape);
  EXPECT_EQ(p.strides, (Strides{6 * (5 * 4 + 4), 5 * 4 + 4, 4, 1}));
  // BSHD with rows and heads padded: H innermost gets both.
  p = place(with(R::O, {O::bshd, 1, 2, 0}), R::O, kShape);
  EXPECT_EQ(p.strides, (Strides{5 * 6 * 7, 7, 6 * 7, 1}));
  // HSBD: H outermost, then S, then B.
  p = place(with(R::Q, {O::hsbd, 0, 0, 3}), R::Q, kShape);
  EXPECT_EQ(p.strides, (Strides{8, 5 * 2 * 8, 2 * 8, 1}));
  EXPECT_EQ(p.extent, 3 + 6 * 5 * 2 * 8);
  // SBHD for the 3-D LSE: width 1, rows padded by 2 spread its elements.
  p = place(with(R::LSE, {O::sbhd, 2, 0, 1}), R::LSE, kShape);
  EXPECT_EQ(p.strides[2], 2 * 6 * 3);
  EXPECT_EQ(p.strides[0], 6 * 3);
  EXPECT_EQ(p.strides[1], 3);
  EXPECT_EQ(p.offset, 1);
}

TEST(Place, PackedQkvIsOneBufferOfThreeViews) {
  const Shape s{2, 4, 4, 6, 6, 8, 8};
  Layouts l;
  l[R::Q] = {O::hbsd, 2, 9, 3};  // the group takes Q's row padding and offset, not its order
  l[R::K] = {O::shbd, 7, 7, 7};  // ignored inside the group
  l.inputs = Packing::qkv;
  const int64_t st_h = 8 + 2, st_n = 4 * st_h, st_s = 3 * st_n, st_b = 6 * st_s;
  for (auto [r, i] : std::initializer_list<std::pair<R, int64_t>>{{R::Q, 0}, {R::K, 1}, {R::V, 2}}) {
    const Placement p = place(l, r, s);
    EXPECT_EQ(p.buffer, R::Q);
    EXPECT_EQ(p.strides, (Strides{st_b, st_h, st_s, 1}));
    EXPECT_EQ(p.offset, 3 + i * st_n);
    EXPECT_EQ(p.extent, 3 + 2 * st_b);
  }
  // Shapes that do not allow it: each keeps its own layout.
  const Shape gqa{2, 4, 2, 6, 6, 8, 8};
  EXPECT_EQ(place(l, R::K, gqa).buffer, R::K);
  EXPECT_EQ(place(l, R::K, gqa).offset, 7);
  // kv packs K and V (first member K), gradients independently.
  l.inputs = Packing::none;
  l.grads = Packing::kv;
  EXPECT_EQ(place(l, R::dV, gqa).buffer, R::dK);
  EXPECT_EQ(place(l, R::dV, gqa).offset, 2 * 8);
  EXPECT_EQ(place(l, R::dQ, gqa).buffer, R::dQ);
}

// Any layout: every element of every tensor at a distinct place inside its buffer, and the
// members of a packed group never share an element.
RC_GTEST_PROP(Place, ElementsAreDistinctAndInsideTheBuffer, (uint64_t seed)) {
  RandomCaseOptions opt;
  opt.p_tensor_layouts = 1.0;
  const Case c = random_case(seed, opt);
  std::map<R, std::set<size_t>> used;  // by buffer
  for (R r : kLaidOutTensors) {
    if (r == R::dQ || r == R::dK || r == R::dV) continue;  // checked below, apart from Q, K, V
    const Placement p = place(c.layouts, r, c.shape);
    size_t n = 0;
    p.for_each([&](size_t, size_t off) {
      RC_ASSERT(off < static_cast<size_t>(p.extent));
      RC_ASSERT(used[p.buffer].insert(off).second);
      ++n;
    });
    RC_ASSERT(n == static_cast<size_t>(p.numel()));
  }
  used.clear();
  for (R r : {R::dQ, R::dK, R::dV}) {
    const Placement p = place(c.layouts, r, c.shape);
    p.for_each([&](size_t, size_t off) {
      RC_ASSERT(off < static_cast<size_t>(p.extent));
      RC_ASSERT(used[p.buffer].insert(off).second);
    });
  }
}

// ---- The case format ----

TEST(LayoutJson, PerTensorLayoutsRoundTrip) {
  SplitMix r(5);
  for (int i = 0; i < 300; ++i) {
    Case c;
    c.seed = static_cast<uint64_t>(i);
    c.shape = {2, 4, 4, 9, 9, 16, 16};
    c.layouts = random_layouts(r, c.shape);
    validate(c);
    const std::string text = write_case(c);
    const Case back = case_from_string(text);
    ASSERT_EQ(back, c) << text;
    EXPECT_EQ(write_case(back), text);
    const bool one_old_key = text.find("\"layout\"") != std::string::npos;
    EXPECT_NE(one_old_key, text.find("\"layouts\"") != std::string::npos) << text;
  }
  Case c;
  c.shape = {1, 2, 2, 4, 4, 8, 8};
  c.layouts[R::LSE] = {O::hbsd, 0, 16, 0};
  c.layouts[R::dK] = {O::sbhd, 0, 0, 1};
  c.layouts.inputs = Packing::qkv;
  const nlohmann::json j = to_json(c).at("layouts");
  EXPECT_EQ(j.size(), 3u) << j.dump();  // only the tensors not in the default layout, and the packing
  EXPECT_EQ(j.at("lse").at("order"), "hbsd");
  EXPECT_EQ(j.at("d_k").at("offset"), 1);
  EXPECT_EQ(j.at("packing").at("inputs"), "qkv");
  EXPECT_EQ(j.at("packing").at("grads"), "none");
}

const char* kOld = R"({"format":"attnfuzz-case/1","seed":1,"shape":{"heads_q":2,"seq_q":8,"head_dim_qk":16})";

TEST(LayoutJson, OldCasesLoadUnchanged) {
  const Case none = case_from_string(std::string(kOld) + "}");
  EXPECT_EQ(none.layouts, Layouts{});
  const Case old = case_from_string(std::string(kOld) + R"(,"layout":{"order":"bshd","row_padding":3}})");
  for (R r : kLaidOutTensors) EXPECT_EQ(old.layouts[r], (TensorLayout{O::bshd, 3, 0, 0})) << case_key(r);
  EXPECT_EQ(old.layouts.inputs, Packing::none);
  // Written back with the old key, as older builds read it.
  const nlohmann::json j = to_json(old);
  EXPECT_FALSE(j.contains("layouts"));
  EXPECT_EQ(j.at("layout"), (nlohmann::json{{"order", "bshd"}, {"row_padding", 3}}));
  // The new key: missing tensors keep the default.
  const Case fresh = case_from_string(std::string(kOld) + R"(,"layouts":{"v":{"order":"shbd","offset":3}}})");
  EXPECT_EQ(fresh.layouts[R::V], (TensorLayout{O::shbd, 0, 0, 3}));
  EXPECT_EQ(fresh.layouts[R::Q], TensorLayout{});
}

std::string rejected_field(const std::string& tail) {
  try {
    case_from_string(std::string(kOld) + tail);
  } catch (const CaseError& e) {
    return e.field();
  }
  return "";
}

TEST(LayoutJson, RejectsBadLayoutsNamingTheField) {
  EXPECT_EQ(rejected_field(R"(,"layout":{},"layouts":{}})"), "layouts");
  EXPECT_EQ(rejected_field(R"(,"layouts":{"x":{}}})"), "layouts.x");
  EXPECT_EQ(rejected_field(R"(,"layouts":{"q":{"order":"bhds"}}})"), "layouts.q.order");
  EXPECT_EQ(rejected_field(R"(,"layouts":{"q":{"offset":-1}}})"), "layouts.q.offset");
  EXPECT_EQ(rejected_field(R"(,"layouts":{"o":{"head_padding":5000}}})"), "layouts.o.head_padding");
  EXPECT_EQ(rejected_field(R"(,"layouts":{"o":{"row_padding":1.5}}})"), "layouts.o.row_padding");
  EXPECT_EQ(rejected_field(R"(,"layouts":{"packing":{"inputs":"qk"}}})"), "layouts.packing.inputs");
  EXPECT_EQ(rejected_field(R"(,"layouts":{"packing":{"outputs":"qkv"}}})"), "layouts.packing.outputs");
  EXPECT_EQ(rejected_field(R"(,"layout":{"order":"sbhd"}})"), "layout.order");  // the old key keeps its two orders
}

// Values never depend on the layout: the recorded reproducers and corpus cases regenerate
// the same inputs in any layout, and their checksums are unchanged.
TEST(LayoutJson, InputsAndRecordedChecksumsDoNotDependOnLayouts) {
  namespace fs = std::filesystem;
  int files = 0;
  // Not corpus/fuzz/: the parser fuzzer's inputs are malformed on purpose.
  for (const char* sub : {"corpus", "corpus/repro", "docs/findings/repro", "docs/findings/fixed"})
    for (const auto& e : fs::directory_iterator(fs::path(ATTNFUZZ_SOURCE_DIR) / sub)) {
      if (e.path().extension() != ".json") continue;
      SCOPED_TRACE(e.path().string());
      std::ifstream in(e.path());
      std::stringstream ss;
      ss << in.rdbuf();
      const bool is_repro = ss.str().find("attnfuzz-repro/1") != std::string::npos;
      const std::optional<Reproducer> r = is_repro ? std::optional<Reproducer>(load_repro(e.path().string())) : std::nullopt;
      Case c = r ? r->c : case_from_string(ss.str());
      ++files;
      if (!r) {
        EXPECT_TRUE(c.layouts.as_uniform().has_value()) << "corpus cases predate per-tensor layouts";
      }
      const uint64_t before = checksum(generate_inputs(c));
      if (r && r->input_checksum) {
        EXPECT_EQ(before, r->input_checksum);
      }
      SplitMix gen(static_cast<uint64_t>(files));
      c.layouts = random_layouts(gen, c.shape);
      EXPECT_EQ(checksum(generate_inputs(c)), before);
    }
  EXPECT_GE(files, 8);
}

// ---- Generators, decoder, shrinker ----

TEST(LayoutDomain, FuzzDecoderReachesEveryLayout) {
  std::map<std::string, int> seen;
  SplitMix r(11);
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> bytes(static_cast<size_t>(r.range(0, 160)));
    for (auto& b : bytes) b = static_cast<uint8_t>(r.next());
    const Case c = decode_case(bytes.data(), bytes.size());
    validate(c);
    for (R t : kLaidOutTensors) {
      const TensorLayout& l = c.layouts[t];
      seen[std::string(case_key(t)) + " " + order_name(l.order)] += 1;
      seen["row padding"] += l.row_padding > 0;
      seen["head padding"] += l.head_padding > 0;
      seen["offset not 16-byte aligned"] += l.offset % 8 != 0;
    }
    seen["per-tensor"] += !c.layouts.as_uniform();
    seen["inputs qkv"] += c.layouts.inputs == Packing::qkv;
    seen["inputs kv"] += c.layouts.inputs == Packing::kv;
    seen["grads qkv"] += c.layouts.grads == Packing::qkv;
    seen["grads kv"] += c.layouts.grads == Packing::kv;
  }
  EXPECT_EQ(seen.size(), kLaidOutTensors.size() * kAllOrders.size() + 8);
  for (const auto& [what, n] : seen) EXPECT_GE(n, 5) << what;
}

TEST(Place, SurroundGuardShiftsEveryBuffer) {
  Layouts l;
  l[R::K] = {O::bshd, 2, 0, 3};
  l.inputs = Packing::none;
  const Placement plain = place(l, R::K, kShape);
  l.surround = {Surround::Fill::nan, 64};
  const Placement guarded = place(l, R::K, kShape);
  EXPECT_EQ(guarded.offset, plain.offset + 64);
  EXPECT_EQ(guarded.extent, plain.extent + 128);
  EXPECT_EQ(guarded.strides, plain.strides);
  // A packed group: one buffer, every member shifted by the same guard.
  Layouts p;
  p.inputs = Packing::qkv;
  const Shape sq{1, 2, 2, 4, 4, 8, 8};
  const Placement q0 = place(p, R::Q, sq), v0 = place(p, R::V, sq);
  p.surround.guard = 8;
  EXPECT_EQ(place(p, R::Q, sq).offset, q0.offset + 8);
  EXPECT_EQ(place(p, R::V, sq).offset, v0.offset + 8);
  EXPECT_EQ(place(p, R::V, sq).extent, v0.extent + 16);
  EXPECT_EQ(surround_value(Surround::Fill::zero, DType::f16), 0.0);
  EXPECT_TRUE(std::isnan(surround_value(Surround::Fill::nan, DType::f16)));
  EXPECT_EQ(surround_value(Surround::Fill::large, DType::f16), 65504.0);
  EXPECT_EQ(surround_value(Surround::Fill::large, DType::bf16), 3.3895313892515355e38);
  EXPECT_EQ(surround_value(Surround::Fill::large, DType::f32), 3.4028234663852886e38);
}

TEST(LayoutJson, SurroundRoundTripsAndIsRefusedByName) {
  Case c;
  c.shape = {1, 2, 2, 4, 4, 8, 8};
  c.layouts.surround = {Surround::Fill::large, 1024};
  const std::string text = write_case(c);
  EXPECT_EQ(case_from_string(text), c) << text;
  const nlohmann::json j = to_json(c);
  ASSERT_TRUE(j.contains("layouts")) << text;  // the old one-layout key cannot say it
  EXPECT_EQ(j.at("layouts").at("surround").at("fill"), "large");
  EXPECT_EQ(j.at("layouts").at("surround").at("guard"), 1024);
  EXPECT_EQ(describe(c.layouts), "surround:large+guard1024");
  // The default is written as nothing, so cases and reproducers without it are unchanged.
  EXPECT_EQ(write_case(Case{}).find("surround"), std::string::npos);
  auto refused = [](const std::string& surround) {
    const std::string t = std::string(R"({"format":"attnfuzz-case/1","seed":1,"shape":{"heads_q":1,"seq_q":4,"head_dim_qk":8},)") +
                          R"("layouts":{"surround":)" + surround + "}}";
    try {
      case_from_string(t);
    } catch (const CaseError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refused(R"({"fill":"ones"})").find("layouts.surround.fill"), std::string::npos);
  EXPECT_NE(refused(R"({"guard":-1})").find("layouts.surround.guard"), std::string::npos);
  EXPECT_NE(refused(R"({"guard":100000})").find("layouts.surround.guard"), std::string::npos);
  EXPECT_NE(refused(R"({"fill":"nan","colour":1})").find("colour"), std::string::npos);
}

TEST(LayoutDomain, GeneratorDrawsSurroundsTheShrinkerDropsThem) {
  int nonzero = 0, guarded = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const Case c = random_case(seed, RandomCaseOptions{});
    nonzero += c.layouts.surround.fill != Surround::Fill::zero;
    guarded += c.layouts.surround.guard > 0;
    EXPECT_EQ(c.layouts.surround.guard % 8, 0);  // a guard keeps every pointer as aligned as without it
  }
  EXPECT_GE(nonzero, 80);  // p_surround = 0.3
  EXPECT_LE(nonzero, 160);
  EXPECT_GE(guarded, 40);
  // Candidates: the surround zero, or unguarded, each alone.
  Case c;
  c.shape = {1, 1, 1, 4, 4, 8, 8};
  c.layouts.surround = {Surround::Fill::nan, 64};
  bool zeroed = false, unguarded = false;
  for (const Case& x : shrink_candidates(c)) {
    EXPECT_LT(case_size(x), case_size(c));
    zeroed |= x.layouts.surround == Surround{Surround::Fill::zero, 64};
    unguarded |= x.layouts.surround == Surround{Surround::Fill::nan, 0};
  }
  EXPECT_TRUE(zeroed && unguarded);
}

TEST(LayoutDomain, ShrinkerReachesTheDefaultLayouts) {
  // Greedy, as the minimizer: the first candidate that keeps the property, until none does.
  auto shrink = [](Case c, auto&& keeps) {
    for (bool moved = true; moved;) {
      moved = false;
      for (const Case& x : shrink_candidates(c))
        if (keeps(x)) {
          EXPECT_LT(case_size(x), case_size(c));
          c = x;
          moved = true;
          break;
        }
    }
    return c;
  };
  RandomCaseOptions opt;
  opt.p_tensor_layouts = 1.0;
  int exotic = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const Case c = random_case(seed, opt);
    exotic += !(c.layouts == Layouts{});
    // A finding that does not depend on layout ends in the default layouts.
    EXPECT_EQ(shrink(c, [](const Case&) { return true; }).layouts, Layouts{});
    // One that needs dK at an unaligned offset keeps that and nothing else.
    Case needs = c;
    needs.layouts[R::dK].offset = 3;
    const Case m = shrink(needs, [](const Case& x) { return x.layouts[R::dK].offset % 2 == 1; });
    Layouts expect;
    expect[R::dK] = m.layouts[R::dK];
    EXPECT_EQ(m.layouts, expect) << describe(m.layouts);
    EXPECT_EQ(m.layouts[R::dK].offset, 3);
  }
  EXPECT_GE(exotic, 35);
}

}  // namespace
}  // namespace attnfuzz
