// bench_sensitivity: the verdict's detection thresholds against the natural error of a
// correct kernel (the mutant zoo's mutant_ok), per dtype, size, output and planted error.
//
//   build/cpu/bench/bench_sensitivity [--dtype bf16] [--seq 16,64,256,1024] [--dim 16,64,128] [--csv out.csv]
//                                     [--plugin SO | --backend NAME] [--oracle-device cpu|cuda] [--no-mask]
//                                     [--outliers MAGNITUDE] [--tied k|v|kv] [--group G] [--bias tensor|alibi|relative [--dbias]]
//                                     [--shifted A] [--tensor-cores] [--near-constant-v SIGMA]
//                                     [--seq-q N] [--ragged [--page-size P]]
//
// --ragged: a ragged batch of two sequences (sensitivity.h), the plants inside the first; needs a
// backend that takes one (--backend torch.math; on a GPU cuda.flash.varlen, cudnn.varlen, ...).
// --page-size P: K and V in pages of P keys, for a paged backend (cuda.flash.paged, cudnn.paged).
// --seq-q N: the decode step, N queries (1 to 16) against --seq keys (each sequence's, with --ragged).
// --near-constant-v SIGMA: V near constant (mean 0.1, that sigma), so O's rows are near-equal
// elements whose stored rounding errs as one number (harness/error_model.h, storage_sources).
// --shifted A: rows whose scores all sit far below zero (Q's column 0 at -A in half the rows, K's
// at +A in every row: those rows' LSE near -A^2 scale). --tensor-cores: the correct kernel's LSE
// is summed as tensor cores sum it (oracles/emulated.h, tensor_core_lse; bf16 and fp16), and it
// says it accumulates on them, so the LSE's truncation part is in the model (harness/error_model.h).
//
// --dbias makes the bias require a gradient: dBias gets its rows (a backend that returns it:
// --backend torch.math, say; the plugins take no bias).
// --oracle-device cuda judges with the GPU oracle set (a gpu-preset build on a GPU machine):
// the same reference, baselines and error terms (docs/gpu.md), minutes faster at S >= 1024.
// --backend takes any registered backend as the correct kernel. The default, mutant_ok, is a
// tiled kernel that rounds like a fused one (P and dS to the dtype, fp32 accumulation);
// torch.math, LibTorch's unfused path, also stores S, P and dP in the dtype, so its natural
// error is about that of the naive baselines.
//
// Prints one markdown table per configuration; the ratio column is the planted error at the
// threshold over the natural error, in the same units (sensitivity.h; goal: <= 8).
// docs/verdicts.md holds the measured tables.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/sensitivity/sensitivity.h"
#include "backends/registry.h"
#include "oracles/emulated.h"

namespace {

// The correct kernel with its 16-bit LSE summed as tensor cores sum it (--tensor-cores); its
// backward runs from its own forward, so the LSE alone changes.
class TensorCoreLse final : public attnfuzz::Backend {
 public:
  explicit TensorCoreLse(std::unique_ptr<attnfuzz::Backend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  std::optional<attnfuzz::Contract> contract(attnfuzz::DType d) const override { return inner_->contract(d); }
  bool masked_rows_zero() const override { return inner_->masked_rows_zero(); }
  bool accumulates_on_tensor_cores() const override { return true; }
  attnfuzz::SupportEnvelope envelope() const override { return inner_->envelope(); }
  bool backward_takes_dlse() const override { return inner_->backward_takes_dlse(); }
  attnfuzz::Forward forward(const attnfuzz::Problem& p) override {
    attnfuzz::Forward f = inner_->forward(p);
    if (p.dtype != attnfuzz::DType::f32) f.lse = attnfuzz::tensor_core_lse(p);
    return f;
  }
  attnfuzz::Gradients backward(const attnfuzz::Problem& p, const attnfuzz::Forward&, const attnfuzz::Tensor& d_out,
                               const attnfuzz::Tensor& d_lse) override {
    return inner_->backward(p, inner_->forward(p), d_out, d_lse);
  }

 private:
  std::unique_ptr<attnfuzz::Backend> inner_;
};

std::string fmt_sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", x);
  return buf;
}

std::vector<long> parse_list(const char* s) {
  std::vector<long> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stol(item));
  return out;
}

int run(int argc, char** argv) {
  using namespace attnfuzz;
  std::vector<DType> dtypes{DType::f32, DType::f16, DType::bf16};
  std::vector<long> seqs{16, 64, 256}, dims{16, 64, 128};
  std::string csv_path, plugin = ATTNFUZZ_CORRECT_PLUGIN, backend;
  bool causal = true;
  double outliers = 0;
  std::string tied;
  long group = 1;
  Device oracle_device = Device::cpu;
  std::optional<ScoreBias> bias;
  bool dbias = false, tensor_cores = false;
  double shifted = 0;
  bool ragged = false;
  int64_t page_size = 0, seq_q = 0;
  double near_constant_v = 0;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(argv[i]) + " needs a value");
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--dtype")) {
      dtypes.clear();
      for (const auto& name : {std::string(next())}) {
        std::stringstream ss(name);
        std::string item;
        while (std::getline(ss, item, ',')) dtypes.push_back(dtype_from_string(item));
      }
    } else if (!std::strcmp(argv[i], "--seq")) {
      seqs = parse_list(next());
    } else if (!std::strcmp(argv[i], "--dim")) {
      dims = parse_list(next());
    } else if (!std::strcmp(argv[i], "--csv")) {
      csv_path = next();
    } else if (!std::strcmp(argv[i], "--plugin")) {
      plugin = next();
    } else if (!std::strcmp(argv[i], "--backend")) {
      backend = next();
    } else if (!std::strcmp(argv[i], "--oracle-device")) {
      const char* name = next();
      const auto device = device_from_string(name);
      if (!device) throw std::invalid_argument(std::string("--oracle-device: cpu or cuda, not ") + name);
      oracle_device = *device;
    } else if (!std::strcmp(argv[i], "--no-mask")) {
      causal = false;
    } else if (!std::strcmp(argv[i], "--outliers")) {
      outliers = std::stod(next());
      if (!(outliers >= 0 && outliers <= 1e4)) throw std::invalid_argument("--outliers takes a magnitude in [0, 1e4]");
    } else if (!std::strcmp(argv[i], "--tied")) {
      tied = next();
      if (tied != "k" && tied != "v" && tied != "kv") throw std::invalid_argument("--tied takes k, v or kv, not " + tied);
    } else if (!std::strcmp(argv[i], "--group")) {
      group = std::stol(next());
      if (group < 1 || group > 16) throw std::invalid_argument("--group takes 1 to 16 query heads per key-value head");
    } else if (!std::strcmp(argv[i], "--tensor-cores")) {
      tensor_cores = true;
    } else if (!std::strcmp(argv[i], "--ragged")) {
      ragged = true;
    } else if (!std::strcmp(argv[i], "--page-size")) {
      page_size = std::stoll(next());
      if (page_size < 1 || page_size > 4096) throw std::invalid_argument("--page-size takes 1 to 4096 keys a page");
    } else if (!std::strcmp(argv[i], "--seq-q")) {
      seq_q = std::stoll(next());
      if (seq_q < 1 || seq_q > 16) throw std::invalid_argument("--seq-q takes 1 to 16 queries (the decode step)");
    } else if (!std::strcmp(argv[i], "--shifted")) {
      shifted = std::stod(next());
      if (!(shifted > 0 && shifted <= 1e3)) throw std::invalid_argument("--shifted takes a magnitude in (0, 1e3]");
    } else if (!std::strcmp(argv[i], "--near-constant-v")) {
      near_constant_v = std::stod(next());
      if (!(near_constant_v > 0 && near_constant_v <= 1.0)) throw std::invalid_argument("--near-constant-v takes a sigma in (0, 1]");
    } else if (!std::strcmp(argv[i], "--dbias")) {
      dbias = true;
    } else if (!std::strcmp(argv[i], "--bias")) {
      const char* name = next();
      const auto kind = bias_kind_from_string(name);
      if (!kind) throw std::invalid_argument(std::string("--bias: tensor, alibi or relative, not ") + name);
      bias = ScoreBias{};
      bias->kind = *kind;
      if (*kind == ScoreBias::Kind::tensor) bias->spans = {false, true, true, true};  // one bias per head, as a learned one
    } else {
      std::fprintf(
          stderr, "usage: bench_sensitivity [--dtype fp32,fp16,bf16] [--seq 16,64] [--dim 16,64] [--csv FILE] [--plugin SO | --backend NAME] [--oracle-device cpu|cuda] [--no-mask] [--outliers M] [--tied k|v|kv] [--group G] [--bias tensor|alibi|relative [--dbias]] [--shifted A] [--tensor-cores] [--near-constant-v SIGMA] [--seq-q N] [--ragged [--page-size P]]\n");
      return 2;
    }
  }
  if (dbias && !bias) throw std::invalid_argument("--dbias needs --bias");
  if (page_size && !ragged) throw std::invalid_argument("--page-size needs --ragged");
  if (bias) bias->requires_grad = dbias;
  std::unique_ptr<Backend> correct = make_backend(backend.empty() ? "plugin:" + plugin : backend);
  if (tensor_cores) correct = std::make_unique<TensorCoreLse>(std::move(correct));
  const OracleSet oracles = make_oracles(oracle_device);
  std::ofstream csv;
  if (!csv_path.empty()) {
    csv.open(csv_path);
    csv << "dtype,seq,dim,tensor,plant,natural,threshold,planted,moved,ratio,correct_passes\n";
  }
  double worst = 0;
  for (DType d : dtypes)
    for (long s : seqs)
      for (long dim : dims) {
        SensitivityConfig cfg;
        cfg.dtype = d;
        cfg.seq = s;
        cfg.dim = dim;
        cfg.causal = causal;
        cfg.outliers = outliers;
        cfg.tied = tied;
        cfg.shifted = shifted;
        cfg.ragged = ragged;
        cfg.page_size = page_size;
        cfg.seq_q = seq_q;
        cfg.near_constant_v = near_constant_v;
        cfg.group = group;
        cfg.bias = bias;
        const auto t0 = std::chrono::steady_clock::now();
        const auto points = measure_sensitivity(cfg, *correct, oracles);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("\n### %s, S=%ld, D=%ld, H=%s, %s%s%s (%.1f s)\n\n| tensor | plant | natural | threshold | planted error | ratio |\n|---|---|---|---|---|---|\n",
                    std::string(to_string(d)).c_str(), s, dim, group > 1 ? ("2 (Hq=" + std::to_string(2 * group) + ")").c_str() : "2",
                    causal ? "causal" : "no mask",
                    ((outliers > 0 ? ", outliers of " + std::to_string(outliers).substr(0, 5) : tied.empty() ? "" : ", tied " + tied) +
                     (shifted > 0 ? ", shifted rows of " + std::to_string(shifted).substr(0, 5) : "") +
                     (near_constant_v > 0 ? ", V near constant (sigma " + std::to_string(near_constant_v).substr(0, 7) + ")" : "") + (tensor_cores ? ", tensor cores" : "") + (ragged ? ", ragged batch (B=2)" : "") +
                     (page_size ? ", pages of " + std::to_string(page_size) : "") + (seq_q ? ", " + std::to_string(seq_q) + " queries" : ""))
                        .c_str(),
                    bias ? (", bias " + std::string(to_string(bias->kind)) + (dbias ? " with dBias" : "")).c_str() : "", secs);
        for (const auto& p : points) {
          const std::string planted = p.threshold <= 0     ? "-"
                                      : p.moved.empty()       ? "(the threshold)"
                                                              : fmt_sci(p.planted) + " of " + p.moved;
          std::printf("| %s | %s | %.2e | %s | %s | %s |\n", p.tensor.c_str(), to_string(p.plant), p.natural,
                      p.threshold > 0 ? fmt_sci(p.threshold).c_str() : "not found", planted.c_str(),
                      !p.correct_passes ? "FALSE ALARM at delta=0"
                      : p.ratio() > 0   ? std::to_string(p.ratio()).substr(0, 5).c_str()
                                        : "-");
          if (p.ratio() > worst) worst = p.ratio();
          if (csv.is_open())
            csv << to_string(d) << ',' << s << ',' << dim << ',' << p.tensor << ',' << to_string(p.plant) << ',' << p.natural << ','
                << p.threshold << ',' << p.planted << ',' << p.moved << ',' << p.ratio() << ',' << p.correct_passes << '\n';
        }
        std::fflush(stdout);
        // A long grid killed part way keeps the configurations it finished.
        if (csv.is_open()) csv.flush();
      }
  std::printf("\nworst ratio: %.2f (goal <= 8)\n", worst);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A bad argument, an unloadable backend or an oracle set that cannot run here: one line, exit 2.
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_sensitivity: %s\n", e.what());
    return 2;
  }
}
