// cudnn_paged_ragged_probe: a standalone check of two suspected cuDNN SDPA (forward) problems, through
// the cuDNN frontend's graph API only (no attnfuzz code):
//   Q1 paged K/V: does cuDNN honour the strides of a page container [pages, Hkv, P, D], or does it read
//      it as vLLM's [pages][P][Hkv][D] (or as contiguous head-major) whatever the strides say? And does
//      NaN in the unused rows of used pages (masked keys) reach O?
//   Q2 ragged (THD) offsets that are not a multiple of 8 elements (16 bytes): refused, wrong, or a
//      cudaErrorMisalignedAddress fault at run time with no graph check refusing it?
//
// Build (checked with CUDA 13.0, cuDNN 9.19, cuDNN frontend 1.32.0 headers; one line, from /work/main):
//   g++ -std=c++20 -O2 -Wall -Wextra -isystem /work/main/.deps/cudnn_frontend/include -isystem /usr/local/cuda/include docs/findings/standalone/cudnn_paged_ragged_probe.cpp -o /tmp/cudnn_paged_ragged_probe -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudnn -lcudart -lnvrtc
// (-lnvrtc: the frontend headers reference NVRTC for their own runtime-compiled engines.)
//
// Run: one variant per process (a CUDA fault is sticky and ends the process's CUDA use):
//   ./cudnn_paged_ragged_probe dense | paged-vllm | paged-headmajor | ragged-aligned | ragged-odd | ...
//   ./cudnn_paged_ragged_probe all        # the variants expected not to fault
//   ./cudnn_paged_ragged_probe            # usage only; touches no CUDA
// Options: --d=128 (head dim, default 64), --i64 (INT64 ragged offsets, default INT32), --seed=N.
// Every result is one line; the exit status is 0 whatever the variants did (2 for a bad command line).
#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace {
namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

struct Options {
  int64_t d = 64;
  bool offsets_i64 = false;
  uint32_t seed = 1234;
};
Options g_opt;
cudnnHandle_t g_handle = nullptr;
bool g_sticky = false;  // a CUDA fault happened: nothing after it can run in this process

// ---- bf16 (own helpers: round to nearest even, NaN kept quiet) ----
uint16_t f2bf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7fc0u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
double bf2d(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
constexpr uint16_t kNaN = 0x7fc0, kZero = 0x0000;

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}
std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", x);
  return buf;
}
std::string cuda_str(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }
void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cuda_str(e));
}

// Device memory, zero-filled. Errors on free are ignored (after a fault nothing can be freed).
struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n) : bytes(std::max<size_t>(n, 256)) {
    ck(cudaMalloc(&p, bytes), "cudaMalloc");
    ck(cudaMemset(p, 0, bytes), "cudaMemset");
  }
  ~DevBuf() {
    if (p) (void)cudaFree(p);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <class T>
  void up(const std::vector<T>& h) { ck(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload"); }
  template <class T>
  std::vector<T> down(size_t count) const {
    std::vector<T> h(count);
    ck(cudaMemcpy(h.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }
  void* at_elem(int64_t elems, size_t elem_bytes) const { return static_cast<char*>(p) + elems * elem_bytes; }
};

// ---- The problem and its float64 reference ----
struct Problem {
  int64_t B, Hq, Hkv, Sq, Skv, D;
  std::vector<int32_t> lq, lkv;  // actual lengths (seq_len_q, seq_len_kv)
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(D)); }
};

// Dense host inputs from one fixed-seed stream: bf16 bits and their exact values, [B][H][S][D];
// rows past a sequence's length are 0 (the dense control hands them to cuDNN as they are).
struct Inputs {
  std::vector<uint16_t> q, k, v;  // q [B][Hq][Sq][D], k and v [B][Hkv][Skv][D]
};
Inputs make_inputs(const Problem& p) {
  std::mt19937 gen(g_opt.seed);
  std::normal_distribution<float> n01(0.f, 1.f);
  auto fill = [&](int64_t H, int64_t S, const std::vector<int32_t>& len) {
    std::vector<uint16_t> t(static_cast<size_t>(p.B * H * S * p.D), kZero);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t d = 0; d < p.D; ++d) {
            const uint16_t x = f2bf(n01(gen));  // drawn for every element, so the stream is layout-free
            if (s < len[b]) t[((b * H + h) * S + s) * p.D + d] = x;
          }
    return t;
  };
  Inputs in;
  in.q = fill(p.Hq, p.Sq, p.lq);
  in.k = fill(p.Hkv, p.Skv, p.lkv);
  in.v = fill(p.Hkv, p.Skv, p.lkv);
  return in;
}

// O [B][Hq][Sq][D] and LSE [B][Hq][Sq] of rows i < lq[b] over keys j < lkv[b] (GQA: query head h reads
// kv head h / (Hq/Hkv)). LSE as cuDNN's Stats: natural log of the softmax denominator of the scaled
// scores, max included: m + log(sum exp(s - m)). k and v are doubles [B][Hkv][Skv][D] (NaN allowed).
struct Ref {
  std::vector<double> o, lse;
};
Ref reference(const Problem& p, const std::vector<uint16_t>& q, const std::vector<double>& k, const std::vector<double>& v) {
  Ref r{std::vector<double>(static_cast<size_t>(p.B * p.Hq * p.Sq * p.D), 0.0), std::vector<double>(static_cast<size_t>(p.B * p.Hq * p.Sq), 0.0)};
  const int64_t group = p.Hq / p.Hkv;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.lq[b]; ++i) {
        const int64_t hk = h / group;
        std::vector<double> s(static_cast<size_t>(p.lkv[b]));
        double m = -INFINITY;
        for (int64_t j = 0; j < p.lkv[b]; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < p.D; ++d)
            acc += bf2d(q[((b * p.Hq + h) * p.Sq + i) * p.D + d]) * k[((b * p.Hkv + hk) * p.Skv + j) * p.D + d];
          s[j] = acc * p.scale();
          m = std::isnan(s[j]) ? s[j] : std::max(m, s[j]);
        }
        double sum = 0;
        for (double x : s) sum += std::exp(x - m);
        r.lse[(b * p.Hq + h) * p.Sq + i] = m + std::log(sum);
        for (int64_t d = 0; d < p.D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < p.lkv[b]; ++j) acc += std::exp(s[j] - m) / sum * v[((b * p.Hkv + hk) * p.Skv + j) * p.D + d];
          r.o[((b * p.Hq + h) * p.Sq + i) * p.D + d] = acc;
        }
      }
  return r;
}
std::vector<double> widen(const std::vector<uint16_t>& bits) {
  std::vector<double> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf2d(bits[i]);
  return out;
}

// Max |gpu - ref| over the valid rows where both are finite; NaN in cuDNN's valid rows; rows where
// exactly one of the two is NaN (mism). o_gpu is dense [B][Hq][Sq][D] doubles, lse_gpu [B][Hq][Sq].
struct Cmp {
  double o_err = 0, lse_err = 0;
  long o_nan = 0, lse_nan = 0, mism = 0;
};
Cmp compare(const Problem& p, const std::vector<double>& o_gpu, const std::vector<float>& lse_gpu, const Ref& r) {
  Cmp c;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.lq[b]; ++i) {
        const size_t row = static_cast<size_t>((b * p.Hq + h) * p.Sq + i);
        const double gl = lse_gpu[row], rl = r.lse[row];
        c.lse_nan += std::isnan(gl);
        if (std::isnan(gl) != std::isnan(rl)) ++c.mism;
        else if (!std::isnan(gl)) c.lse_err = std::max(c.lse_err, std::fabs(gl - rl));
        for (int64_t d = 0; d < p.D; ++d) {
          const double g = o_gpu[row * p.D + d], x = r.o[row * p.D + d];
          c.o_nan += std::isnan(g);  // elements, not rows
          if (std::isnan(g) != std::isnan(x)) ++c.mism;
          else if (!std::isnan(g)) c.o_err = std::max(c.o_err, std::fabs(g - x));
        }
      }
  return c;
}
// bf16 O (output rounding plus cuDNN's bf16 P in the second matmul) and fp32 LSE.
constexpr double kTolO = 2e-2, kTolLse = 5e-3;
bool passes(const Cmp& c) { return c.o_nan == 0 && c.lse_nan == 0 && c.mism == 0 && c.o_err <= kTolO && c.lse_err <= kTolLse; }
std::string describe(const Cmp& c) {
  return "max|O err|=" + num(c.o_err) + " max|LSE err|=" + num(c.lse_err) + " O_nan_valid=" + std::to_string(c.o_nan) +
         " LSE_nan_valid=" + std::to_string(c.lse_nan) + (c.mism ? " nan_mismatch=" + std::to_string(c.mism) : "");
}

// ---- Graph plumbing ----
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kSeqQ, kSeqKv, kTableK, kTableV, kOffQ, kOffK, kOffV, kOffO };

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}
TensorPtr tensor(fe::graph::Graph& g, const char* name, Uid uid, std::vector<int64_t> dim, std::vector<int64_t> stride,
                 fe::DataType_t type = fe::DataType_t::NOT_SET) {
  auto a = fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(std::move(dim)).set_stride(std::move(stride));
  if (type != fe::DataType_t::NOT_SET) a.set_data_type(type);
  return g.tensor(a);
}
std::vector<int64_t> bhsd(int64_t H, int64_t S, int64_t D) { return {H * S * D, S * D, D, 1}; }

// SDPA forward options shared by every variant: stats, 1/sqrt(D), no causal, the padding mask with
// per-sequence lengths [B,1,1,1] INT32 (paged and ragged both require it).
fe::graph::SDPA_attributes sdpa_options(fe::graph::Graph& g, const Problem& p) {
  auto seq_q = tensor(g, "seq_len_q", kSeqQ, {p.B, 1, 1, 1}, {1, 1, 1, 1}, fe::DataType_t::INT32);
  auto seq_kv = tensor(g, "seq_len_kv", kSeqKv, {p.B, 1, 1, 1}, {1, 1, 1, 1}, fe::DataType_t::INT32);
  return fe::graph::SDPA_attributes()
      .set_name("sdpa")
      .set_generate_stats(true)
      .set_attn_scale(static_cast<float>(p.scale()))
      .set_padding_mask(true)
      .set_seq_len_q(seq_q)
      .set_seq_len_kv(seq_kv);
}
void set_stats(const TensorPtr& stats, const Problem& p) {
  stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({p.B, p.Hq, p.Sq, 1}).set_stride({p.Hq * p.Sq, p.Sq, 1, 1});
}

// The frontend's build sequence, every step's verdict recorded: "validate=ok ... build_plans=FAIL(msg)".
struct Built {
  bool ok = false;
  std::string steps, plan;
  int64_t workspace = 0;
};
Built build(fe::graph::Graph& g) {
  Built r;
  auto step = [&](const char* name, fe::error_t e) {  // get_message() is not const
    r.steps += std::string(r.steps.empty() ? "" : " ") + name + (e.is_good() ? "=ok" : "=FAIL(" + one_line(e.get_message()) + ")");
    return e.is_good();
  };
  try {
    if (!step("validate", g.validate())) return r;
    if (!step("build_operation_graph", g.build_operation_graph(g_handle))) return r;
    if (!step("create_execution_plans", g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}))) return r;
    if (!step("check_support", g.check_support(g_handle))) return r;
    if (!step("build_plans", g.build_plans(g_handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE))) return r;
    if (!step("get_workspace_size", g.get_workspace_size(r.workspace))) return r;
    (void)g.get_plan_name(r.plan);
    r.ok = true;
  } catch (const std::exception& e) {  // parts of the frontend report by exception
    r.steps += " EXCEPTION(" + one_line(e.what()) + ")";
  }
  return r;
}

// execute(), then cudaDeviceSynchronize so that an asynchronous kernel fault is reported here.
struct Ran {
  bool ok = false;
  std::string text;
};
Ran execute(fe::graph::Graph& g, const Built& b, std::unordered_map<int64_t, void*>& pack) {
  Ran r;
  DevBuf ws(static_cast<size_t>(b.workspace));
  fe::error_t e = g.execute(g_handle, pack, ws.p);
  const cudaError_t sync = cudaDeviceSynchronize();
  const cudaError_t last = cudaGetLastError();
  r.text = "execute=" + (e.is_good() ? std::string("ok") : "FAIL(" + one_line(e.get_message()) + ")") + " sync=" + cuda_str(sync);
  if (last != cudaSuccess && last != sync) r.text += " last_error=" + cuda_str(last);
  if (sync != cudaSuccess) g_sticky = true;
  r.ok = e.is_good() && sync == cudaSuccess && last == cudaSuccess;
  return r;
}

void line(const std::string& s) {
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

// ---- Q1: dense control and paged K/V ----
Problem paged_problem() { return {2, 4, 2, 8, 8, g_opt.d, {2, 7}, {8, 5}}; }

// The two container layouts, both described as dims [pages, Hkv, P, D]:
//   vllm:       memory [pages][P][Hkv][D], strides {P*Hkv*D, D, Hkv*D, 1}
//   headmajor:  memory [pages][Hkv][P][D], strides {Hkv*P*D, P*D, D, 1} (contiguous; the frontend's
//               samples and tests use this one, but only with page size 1 in the C++ samples)
// With P = 1 the two are the same memory, which is why page size 1 cannot tell them apart.
enum class Layout { vllm, headmajor };
const char* layout_name(Layout l) { return l == Layout::vllm ? "vllm" : "hm"; }
std::vector<int64_t> pool_strides(Layout l, int64_t P, int64_t H, int64_t D) {
  return l == Layout::vllm ? std::vector<int64_t>{P * H * D, D, H * D, 1} : std::vector<int64_t>{H * P * D, P * D, D, 1};
}
int64_t pool_off(Layout l, int64_t page, int64_t h, int64_t r, int64_t P, int64_t H, int64_t D) {
  return l == Layout::vllm ? ((page * P + r) * H + h) * D : ((page * H + h) * P + r) * D;
}

// Page table [B][T], T = ceil(Skv / P) (the frontend requires exactly that many entries). Physical
// page ids come from a fixed-seed shuffle: each sequence's pages first, then one "pad" page that the
// entries past a sequence's last page name, then two pages no entry names (always NaN).
struct Pool {
  int64_t P = 0, T = 0, pages = 0;
  int32_t pad = 0;
  std::vector<int32_t> table;
};
Pool make_pool(const Problem& p, int64_t P) {
  Pool pool;
  pool.P = P;
  pool.T = (p.Skv + P - 1) / P;
  int64_t used = 0;
  for (int32_t l : p.lkv) used += (l + P - 1) / P;
  pool.pages = used + 3;
  std::vector<int32_t> ids(static_cast<size_t>(pool.pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 gen(g_opt.seed + static_cast<uint32_t>(P));
  std::shuffle(ids.begin(), ids.end(), gen);
  size_t next = 0;
  pool.table.assign(static_cast<size_t>(p.B * pool.T), -1);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t t = 0; t < (p.lkv[b] + P - 1) / P; ++t) pool.table[b * pool.T + t] = ids[next++];
  pool.pad = ids[next++];
  for (int32_t& e : pool.table)
    if (e < 0) e = pool.pad;
  return pool;
}
// The pool's memory in layout l: NaN everywhere; every row of every page the table names set to
// `filler` (0 normally; NaN for the -nantail variants, as attnfuzz's first adapter had it); then
// each sequence's keys j < lkv[b] at page table[b][j/P], row j%P.
std::vector<uint16_t> fill_pool(const Problem& p, const Pool& pool, Layout l, const std::vector<uint16_t>& kv, uint16_t filler) {
  const int64_t P = pool.P, H = p.Hkv, D = p.D;
  std::vector<uint16_t> m(static_cast<size_t>(pool.pages * P * H * D), kNaN);
  for (int32_t page : pool.table)
    for (int64_t r = 0; r < P; ++r)
      for (int64_t h = 0; h < H; ++h) std::fill_n(m.begin() + pool_off(l, page, h, r, P, H, D), D, filler);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t j = 0; j < p.lkv[b]; ++j)
      for (int64_t h = 0; h < H; ++h)
        std::copy_n(kv.begin() + ((b * H + h) * p.Skv + j) * D, D, m.begin() + pool_off(l, pool.table[b * pool.T + j / P], h, j % P, P, H, D));
  return m;
}
// What a kernel would see as the keys j < lkv[b] if it read the pool's memory as layout `as`: dense
// doubles [B][Hkv][Skv][D]. With `as` the layout the pool was written in, this is the true K (or V).
std::vector<double> read_pool_as(const Problem& p, const Pool& pool, Layout as, const std::vector<uint16_t>& m) {
  std::vector<double> out(static_cast<size_t>(p.B * p.Hkv * p.Skv * p.D), 0.0);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t j = 0; j < p.lkv[b]; ++j)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t d = 0; d < p.D; ++d)
          out[((b * p.Hkv + h) * p.Skv + j) * p.D + d] =
              bf2d(m[pool_off(as, pool.table[b * pool.T + j / pool.P], h, j % pool.P, pool.P, p.Hkv, p.D) + d]);
  return out;
}

// Runs one forward with Q, O dense [B][Hq][Sq][D], K and V as given (dense or pools), and returns
// cuDNN's O (dense doubles) and Stats, or an empty O when it did not run.
struct Forward {
  std::string text;
  std::vector<double> o;
  std::vector<float> lse;
};
template <class Setup>
Forward forward_dense_q(const Problem& p, const Inputs& in, fe::graph::Graph& g, const Built& built, Setup&& bind_kv) {
  Forward f;
  f.text = built.steps + " plan=" + (built.plan.empty() ? "-" : built.plan);
  if (!built.ok) return f;
  DevBuf q(in.q.size() * 2), o(static_cast<size_t>(p.B * p.Hq * p.Sq * p.D) * 2), stats(static_cast<size_t>(p.B * p.Hq * p.Sq) * 4);
  DevBuf seq_q(p.B * 4), seq_kv(p.B * 4);
  q.up(in.q);
  seq_q.up(p.lq);
  seq_kv.up(p.lkv);
  std::unordered_map<int64_t, void*> pack{{kQ, q.p}, {kO, o.p}, {kStats, stats.p}, {kSeqQ, seq_q.p}, {kSeqKv, seq_kv.p}};
  auto keep = bind_kv(pack);  // device buffers of K, V (and tables), alive until the end of this call
  const Ran ran = execute(g, built, pack);
  f.text += " " + ran.text;
  if (!ran.ok) return f;
  f.o = widen(o.down<uint16_t>(static_cast<size_t>(p.B * p.Hq * p.Sq * p.D)));
  f.lse = stats.down<float>(static_cast<size_t>(p.B * p.Hq * p.Sq));
  return f;
}

void run_dense() {
  const Problem p = paged_problem();
  const Inputs in = make_inputs(p);
  auto g = new_graph();
  auto Q = tensor(*g, "Q", kQ, {p.B, p.Hq, p.Sq, p.D}, bhsd(p.Hq, p.Sq, p.D));
  auto K = tensor(*g, "K", kK, {p.B, p.Hkv, p.Skv, p.D}, bhsd(p.Hkv, p.Skv, p.D));
  auto V = tensor(*g, "V", kV, {p.B, p.Hkv, p.Skv, p.D}, bhsd(p.Hkv, p.Skv, p.D));
  auto [O, Stats] = g->sdpa(Q, K, V, sdpa_options(*g, p));
  O->set_output(true).set_uid(kO).set_dim({p.B, p.Hq, p.Sq, p.D}).set_stride(bhsd(p.Hq, p.Sq, p.D));
  set_stats(Stats, p);
  const Built built = build(*g);
  Forward f = forward_dense_q(p, in, *g, built, [&](auto& pack) {
    auto k = std::make_shared<DevBuf>(in.k.size() * 2), v = std::make_shared<DevBuf>(in.v.size() * 2);
    k->up(in.k);
    v->up(in.v);
    pack[kK] = k->p;
    pack[kV] = v->p;
    return std::vector<std::shared_ptr<DevBuf>>{k, v};
  });
  std::string verdict = !built.ok ? "REFUSED" : g_sticky ? "FAULT" : "EXEC_FAIL";
  if (!f.o.empty()) {
    const Cmp c = compare(p, f.o, f.lse, reference(p, in.q, widen(in.k), widen(in.v)));
    f.text += " " + describe(c);
    verdict = passes(c) ? "PASS" : "FAIL";
  }
  line("variant=dense " + f.text + " verdict=" + verdict);
}

void run_paged(const std::string& name, Layout kl, Layout vl, bool nantail, int64_t P) {
  const Problem p = paged_problem();
  const Inputs in = make_inputs(p);
  const Pool pool = make_pool(p, P);
  const uint16_t filler = nantail ? kNaN : kZero;
  const std::vector<uint16_t> kmem = fill_pool(p, pool, kl, in.k, filler), vmem = fill_pool(p, pool, vl, in.v, filler);

  auto g = new_graph();
  auto Q = tensor(*g, "Q", kQ, {p.B, p.Hq, p.Sq, p.D}, bhsd(p.Hq, p.Sq, p.D));
  auto K = tensor(*g, "K_pages", kK, {pool.pages, p.Hkv, P, p.D}, pool_strides(kl, P, p.Hkv, p.D));
  auto V = tensor(*g, "V_pages", kV, {pool.pages, p.Hkv, P, p.D}, pool_strides(vl, P, p.Hkv, p.D));
  auto table_k = tensor(*g, "page_table_k", kTableK, {p.B, 1, pool.T, 1}, {pool.T, pool.T, 1, 1}, fe::DataType_t::INT32);
  auto table_v = tensor(*g, "page_table_v", kTableV, {p.B, 1, pool.T, 1}, {pool.T, pool.T, 1, 1}, fe::DataType_t::INT32);
  auto opts = sdpa_options(*g, p);
  opts.set_paged_attention_k_table(table_k).set_paged_attention_v_table(table_v).set_paged_attention_max_seq_len_kv(static_cast<int>(p.Skv));
  auto [O, Stats] = g->sdpa(Q, K, V, opts);
  O->set_output(true).set_uid(kO).set_dim({p.B, p.Hq, p.Sq, p.D}).set_stride(bhsd(p.Hq, p.Sq, p.D));
  set_stats(Stats, p);
  const Built built = build(*g);
  Forward f = forward_dense_q(p, in, *g, built, [&](auto& pack) {
    auto k = std::make_shared<DevBuf>(kmem.size() * 2), v = std::make_shared<DevBuf>(vmem.size() * 2);
    auto t = std::make_shared<DevBuf>(pool.table.size() * 4);
    k->up(kmem);
    v->up(vmem);
    t->up(pool.table);
    pack[kK] = k->p;
    pack[kV] = v->p;
    pack[kTableK] = t->p;  // one table for both: the same pages hold K and V
    pack[kTableV] = t->p;
    return std::vector<std::shared_ptr<DevBuf>>{k, v, t};
  });
  std::string tbl;
  for (size_t i = 0; i < pool.table.size(); ++i) tbl += (i ? (i % pool.T ? "," : "|") : "") + std::to_string(pool.table[i]);
  std::string out = "variant=" + name + " P=" + std::to_string(P) + " K=" + layout_name(kl) + " V=" + layout_name(vl) +
                    " pages=" + std::to_string(pool.pages) + " table=[" + tbl + "] " + f.text;
  std::string verdict = !built.ok ? "REFUSED" : g_sticky ? "FAULT" : "EXEC_FAIL";
  if (!f.o.empty()) {
    // The truth (the pools read in the layouts they were written in), then every other reading of the
    // same memory, to say which one cuDNN's result matches: K read as {vllm, hm} x V read as {vllm, hm}.
    const Cmp truth = compare(p, f.o, f.lse, reference(p, in.q, read_pool_as(p, pool, kl, kmem), read_pool_as(p, pool, vl, vmem)));
    out += " " + describe(truth) + " | as-read:";
    for (Layout rk : {Layout::vllm, Layout::headmajor})
      for (Layout rv : {Layout::vllm, Layout::headmajor}) {
        const Cmp c = compare(p, f.o, f.lse, reference(p, in.q, read_pool_as(p, pool, rk, kmem), read_pool_as(p, pool, rv, vmem)));
        out += std::string(" K") + layout_name(rk) + "/V" + layout_name(rv) + ":O=" + num(c.o_err) + ",LSE=" + num(c.lse_err) +
               (c.mism ? ",nanmism=" + std::to_string(c.mism) : "") + (passes(c) ? ",MATCH" : "");
      }
    verdict = passes(truth) ? "PASS" : "FAIL";
  }
  line(out + " verdict=" + verdict);
}

// ---- Q2: ragged (THD) offsets ----
// Q, K, V, O packed [tokens][H][D], described as [B, H, S, D] with strides {S*H*D, D, H*D, 1} and a
// ragged offset tensor [B+1,1,1,1] each. Offsets are in ELEMENTS (not bytes): the frontend's samples
// compute them as cumulative_len * H * D (fp16_fwd_paged_decode_and_prefill.cpp), its release notes
// for the ragged offset multiplier say the engine scales them "back to element offsets", and attnfuzz
// (backends/cudnn_varlen.cpp) uses starts[b] * H * D.
// Each tensor's allocation holds `lead` elements before its data; by default the offsets count them
// (base pointer aligned, sequences' rows shifted: what the frontend cannot check, since offsets are
// device data); with -ptr the base pointer itself is moved instead (which the frontend's execute()
// checks against the tensor's declared alignment, 16 bytes by default). -align2 declares 2-byte
// alignment on Q, K, V and O (Tensor_attributes::set_alignment), the frontend's own escape hatch.
struct RaggedSpec {
  int64_t lead = 0;
  bool q = true, k = true, v = true, o = true;  // which tensors get the lead
  bool via_pointer = false, align2 = false;
};
bool parse_ragged(const std::string& name, RaggedSpec& s) {
  if (name.rfind("ragged-", 0) != 0) return false;
  bool base = false, only = false;
  size_t pos = 7;
  while (pos <= name.size()) {
    const size_t end = std::min(name.find('-', pos), name.size());
    const std::string t = name.substr(pos, end - pos);
    pos = end + 1;
    if (t == "aligned") s.lead = 0, base = true;
    else if (t == "odd") s.lead = 1, base = true;
    else if (t.rfind("plus", 0) == 0 && t.size() > 4 && std::all_of(t.begin() + 4, t.end(), ::isdigit)) s.lead = std::stoll(t.substr(4)), base = true;
    else if (t == "ptr") s.via_pointer = true;
    else if (t == "align2") s.align2 = true;
    else if (t == "q" || t == "k" || t == "v" || t == "o") {
      if (!only) s.q = s.k = s.v = s.o = false, only = true;
      (t == "q" ? s.q : t == "k" ? s.k : t == "v" ? s.v : s.o) = true;
    } else return false;
  }
  return base;
}

void run_ragged(const std::string& name, const RaggedSpec& spec) {
  const Problem p{2, 2, 2, 8, 8, g_opt.d, {3, 6}, {5, 7}};
  const Inputs in = make_inputs(p);
  const int64_t H = p.Hq, D = p.D, row = H * D;
  std::vector<int64_t> start_q{0}, start_kv{0};  // token starts, B+1
  for (int64_t b = 0; b < p.B; ++b) start_q.push_back(start_q.back() + p.lq[b]), start_kv.push_back(start_kv.back() + p.lkv[b]);
  const int64_t lq = spec.q ? spec.lead : 0, lk = spec.k ? spec.lead : 0, lv = spec.v ? spec.lead : 0, lo = spec.o ? spec.lead : 0;

  // Packed buffer: `lead` zeros, the tokens, then S rows of zero slack, so that a kernel reading whole
  // S-row tiles from a sequence's start stays inside the allocation (a fault is then about alignment).
  auto pack_thd = [&](const std::vector<uint16_t>& dense, int64_t S, const std::vector<int32_t>& len, const std::vector<int64_t>& start, int64_t lead) {
    std::vector<uint16_t> m(static_cast<size_t>(lead + (start.back() + S) * row), kZero);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t i = 0; i < len[b]; ++i)
        for (int64_t h = 0; h < H; ++h) std::copy_n(dense.begin() + ((b * H + h) * S + i) * D, D, m.begin() + lead + (start[b] + i) * row + h * D);
    return m;
  };
  const std::vector<uint16_t> qm = pack_thd(in.q, p.Sq, p.lq, start_q, lq), km = pack_thd(in.k, p.Skv, p.lkv, start_kv, lk),
                              vm = pack_thd(in.v, p.Skv, p.lkv, start_kv, lv);
  // O pre-filled with a NaN sentinel: valid rows left unwritten read NaN, and writes anywhere else are counted.
  constexpr uint16_t kSentinel = 0x7fc1;
  const size_t o_elems = static_cast<size_t>(lo + (start_q.back() + p.Sq) * row);
  const std::vector<uint16_t> om(o_elems, kSentinel);
  auto offsets = [&](const std::vector<int64_t>& start, int64_t lead) {
    std::vector<int64_t> off;
    for (int64_t s : start) off.push_back((spec.via_pointer ? 0 : lead) + s * row);
    return off;
  };
  const std::vector<int64_t> off_q = offsets(start_q, lq), off_k = offsets(start_kv, lk), off_v = offsets(start_kv, lv), off_o = offsets(start_q, lo);

  auto g = new_graph();
  const auto otype = g_opt.offsets_i64 ? fe::DataType_t::INT64 : fe::DataType_t::INT32;
  auto offset_tensor = [&](const char* n, Uid uid) { return tensor(*g, n, uid, {p.B + 1, 1, 1, 1}, {1, 1, 1, 1}, otype); };
  auto rq = offset_tensor("Q_ragged_offset", kOffQ), rk = offset_tensor("K_ragged_offset", kOffK), rv = offset_tensor("V_ragged_offset", kOffV),
       ro = offset_tensor("O_ragged_offset", kOffO);
  const std::vector<int64_t> thd{p.Sq * row, D, row, 1};
  auto packed = [&](const char* n, Uid uid, const TensorPtr& off) {
    auto a = fe::graph::Tensor_attributes().set_name(n).set_uid(uid).set_dim({p.B, H, p.Sq, D}).set_stride(thd).set_ragged_offset(off);
    if (spec.align2) a.set_alignment(2);
    return g->tensor(a);
  };
  auto Q = packed("Q", kQ, rq), K = packed("K", kK, rk), V = packed("V", kV, rv);
  auto [O, Stats] = g->sdpa(Q, K, V, sdpa_options(*g, p));
  O->set_output(true).set_uid(kO).set_dim({p.B, H, p.Sq, D}).set_stride(thd).set_ragged_offset(ro);
  if (spec.align2) O->set_alignment(2);
  set_stats(Stats, p);  // Stats stay non-ragged [B,H,S,1]
  const Built built = build(*g);

  std::string out = "variant=" + name + " lead_elems(q,k,v,o)=" + std::to_string(lq) + "," + std::to_string(lk) + "," + std::to_string(lv) + "," +
                    std::to_string(lo) + (spec.via_pointer ? " shifted=base_pointer" : " shifted=ragged_offsets") +
                    (spec.align2 ? " declared_alignment=2" : "") + " offsets=" + (g_opt.offsets_i64 ? "int64" : "int32") + " off_q=[";
  for (size_t i = 0; i < off_q.size(); ++i) out += (i ? "," : "") + std::to_string(off_q[i]);
  out += "] " + built.steps + " plan=" + (built.plan.empty() ? "-" : built.plan);
  if (!built.ok) return line(out + " verdict=REFUSED");

  DevBuf dq(qm.size() * 2), dk(km.size() * 2), dv(vm.size() * 2), dout(om.size() * 2), stats(static_cast<size_t>(p.B * H * p.Sq) * 4);
  DevBuf seq_q(p.B * 4), seq_kv(p.B * 4), doq(off_q.size() * 8), dok(off_k.size() * 8), dov(off_v.size() * 8), doo(off_o.size() * 8);
  dq.up(qm), dk.up(km), dv.up(vm), dout.up(om), seq_q.up(p.lq), seq_kv.up(p.lkv);
  for (auto [buf, off] : {std::pair{&doq, &off_q}, {&dok, &off_k}, {&dov, &off_v}, {&doo, &off_o}}) {
    if (g_opt.offsets_i64) buf->up(*off);
    else buf->up(std::vector<int32_t>(off->begin(), off->end()));
  }
  auto base = [&](const DevBuf& b, int64_t lead) { return spec.via_pointer ? b.at_elem(lead, 2) : b.p; };
  std::unordered_map<int64_t, void*> pack{{kQ, base(dq, lq)},   {kK, base(dk, lk)},    {kV, base(dv, lv)},    {kO, base(dout, lo)},
                                          {kStats, stats.p},    {kSeqQ, seq_q.p},      {kSeqKv, seq_kv.p},    {kOffQ, doq.p},
                                          {kOffK, dok.p},       {kOffV, dov.p},        {kOffO, doo.p}};
  const Ran ran = execute(*g, built, pack);
  out += " " + ran.text;
  if (!ran.ok) return line(out + (g_sticky ? " verdict=FAULT" : " verdict=EXEC_REFUSED"));

  // O back to dense [B][H][S][D]; count sentinel-changed elements outside the valid rows (stray writes).
  const std::vector<uint16_t> o_bits = dout.down<uint16_t>(o_elems);
  std::vector<double> o(static_cast<size_t>(p.B * H * p.Sq * D), 0.0);
  std::vector<char> valid(o_elems, 0);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t i = 0; i < p.lq[b]; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const size_t at = static_cast<size_t>(lo + (start_q[b] + i) * row + h * D + d);
          valid[at] = 1;
          o[((b * H + h) * p.Sq + i) * D + d] = bf2d(o_bits[at]);
        }
  long stray = 0;
  for (size_t i = 0; i < o_elems; ++i) stray += !valid[i] && o_bits[i] != kSentinel;
  const Cmp c = compare(p, o, stats.down<float>(static_cast<size_t>(p.B * H * p.Sq)), reference(p, in.q, widen(in.k), widen(in.v)));
  line(out + " " + describe(c) + " O_writes_outside_rows=" + std::to_string(stray) + " verdict=" + (passes(c) && stray == 0 ? "PASS" : "FAIL"));
}

// ---- Variant dispatch ----
const std::vector<int64_t> kPageSizes{1, 4, 8};
const char* kAll[] = {"dense",      "paged-vllm",         "paged-headmajor",         "paged-k-headmajor", "paged-v-headmajor",
                      "paged-vllm-nantail", "paged-headmajor-nantail", "ragged-aligned"};

// A parsed variant: every name is checked before any CUDA call, so a typo never costs a GPU run.
struct Job {
  enum Kind { dense, paged, ragged } kind = dense;
  std::string name;
  Layout kl = Layout::vllm, vl = Layout::vllm;
  bool nantail = false;
  std::vector<int64_t> page_sizes;
  RaggedSpec spec;
};
bool parse_job(const std::string& name, Job& j) {
  j.name = name;
  if (name == "dense") return j.kind = Job::dense, true;
  if (parse_ragged(name, j.spec)) return j.kind = Job::ragged, true;
  if (name.rfind("paged-", 0) != 0) return false;
  j.kind = Job::paged;
  std::string rest = name.substr(6);
  j.page_sizes = kPageSizes;
  if (const size_t colon = rest.find(':'); colon != std::string::npos) {  // "paged-vllm:4": one page size
    const std::string n = rest.substr(colon + 1);
    if (n.empty() || !std::all_of(n.begin(), n.end(), ::isdigit) || std::stoll(n) < 1) return false;
    j.page_sizes = {std::stoll(n)};
    rest.resize(colon);
  }
  j.nantail = rest.size() > 8 && rest.compare(rest.size() - 8, 8, "-nantail") == 0;
  if (j.nantail) rest.resize(rest.size() - 8);
  if (rest == "vllm") j.kl = j.vl = Layout::vllm;
  else if (rest == "headmajor") j.kl = j.vl = Layout::headmajor;
  else if (rest == "k-headmajor") j.kl = Layout::headmajor, j.vl = Layout::vllm;
  else if (rest == "v-headmajor") j.kl = Layout::vllm, j.vl = Layout::headmajor;
  else return false;
  return true;
}

void run_job(const Job& j) {
  try {
    if (j.kind == Job::dense) return run_dense();
    if (j.kind == Job::ragged) return run_ragged(j.name, j.spec);
    for (int64_t P : j.page_sizes) {
      if (g_sticky) return line("variant=" + j.name + " P=" + std::to_string(P) + " SKIPPED (an earlier run left a sticky CUDA error)");
      run_paged(j.name, j.kl, j.vl, j.nantail, P);
    }
  } catch (const std::exception& e) {
    line("variant=" + j.name + " ERROR(" + one_line(e.what()) + ")" + (g_sticky ? " verdict=FAULT" : " verdict=ERROR"));
  }
}

void usage() {
  std::printf(
      "usage: cudnn_paged_ragged_probe [--d=64|128] [--i64] [--seed=N] VARIANT...\n"
      "  dense                    control: K, V dense [B,Hkv,Skv,D] + seq_len_kv (must pass)\n"
      "  paged-vllm               K, V pools in memory [pages][P][Hkv][D], strides {P*Hkv*D, D, Hkv*D, 1}\n"
      "  paged-headmajor          K, V pools in memory [pages][Hkv][P][D], strides {Hkv*P*D, P*D, D, 1}\n"
      "  paged-k-headmajor        K head-major, V vllm;  paged-v-headmajor: K vllm, V head-major\n"
      "  paged-...-nantail        unused rows of used pages and the pad page NaN instead of 0\n"
      "  paged-...:N              only page size N (default: each of 1, 4, 8, one line each)\n"
      "  ragged-aligned           THD packed Q, K, V, O with ragged offsets in elements\n"
      "  ragged-odd               every offset +1 element (data starts 2 bytes into the buffer)\n"
      "  ragged-plusN             every offset +N elements (ragged-plus8: 16-byte aligned)\n"
      "  ragged-odd-q|-k|-v|-o    the +1 on that tensor only (tokens combine: ragged-odd-k-v)\n"
      "  ragged-odd-ptr           the base pointers +1 element instead, offsets aligned\n"
      "  ragged-odd-align2        ragged-odd with set_alignment(2) declared on Q, K, V, O\n"
      "  all                      dense, the four paged layouts, the two -nantail, ragged-aligned\n"
      "One line per variant (paged: per page size). Run faulting variants (ragged-odd...) in their own\n"
      "process. Exit status 0 whatever the results.\n");
}
}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return usage(), 0;
    if (a.rfind("--d=", 0) == 0) g_opt.d = std::stoll(a.substr(4));
    else if (a == "--i64") g_opt.offsets_i64 = true;
    else if (a.rfind("--seed=", 0) == 0) g_opt.seed = static_cast<uint32_t>(std::stoul(a.substr(7)));
    else if (a == "all") names.insert(names.end(), std::begin(kAll), std::end(kAll));
    else names.push_back(a);
  }
  std::vector<Job> jobs(names.size());
  for (size_t i = 0; i < names.size(); ++i)
    if (!parse_job(names[i], jobs[i])) return std::fprintf(stderr, "unknown variant: %s\n", names[i].c_str()), usage(), 2;
  if (jobs.empty()) return usage(), 0;  // no CUDA touched

  int dev = 0, count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
    line("# no CUDA device: " + (e != cudaSuccess ? cuda_str(e) : std::string("none found")));
    return 0;
  }
  cudaDeviceProp prop{};
  (void)cudaGetDevice(&dev);
  (void)cudaGetDeviceProperties(&prop, dev);
  int rt = 0;
  (void)cudaRuntimeGetVersion(&rt);
  line("# device=" + std::string(prop.name) + " sm=" + std::to_string(prop.major) + std::to_string(prop.minor) +
       " cuda_runtime=" + std::to_string(rt) + " cudnn_runtime=" + std::to_string(cudnnGetVersion()) +
       " cudnn_compiled=" + std::to_string(CUDNN_VERSION) + " frontend=" + std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." +
       std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_PATCH_VERSION) + " D=" + std::to_string(g_opt.d) +
       " seed=" + std::to_string(g_opt.seed) + " tol_O=" + num(kTolO) + " tol_LSE=" + num(kTolLse));
  if (const cudnnStatus_t st = cudnnCreate(&g_handle); st != CUDNN_STATUS_SUCCESS) {
    line(std::string("# cudnnCreate failed: ") + cudnnGetErrorString(st));
    return 0;
  }
  for (const Job& j : jobs) {
    if (g_sticky) line("variant=" + j.name + " SKIPPED (an earlier variant left a sticky CUDA error)");
    else run_job(j);
  }
  if (!g_sticky) (void)cudnnDestroy(g_handle);  // after a fault the context is gone; leave it
  return 0;
}
