#pragma once
// Internal to the `cudnn` backends (backends/cudnn_sdpa.cpp; cudnn.varlen and cudnn.paged in
// backends/cudnn_varlen.cpp): cuDNN frontend SDPA graphs,
// built once per configuration and cached, and the device memory they run on. The
// frontend's headers stay inside cudnn_graph.cpp (they are heavy); this header needs
// no CUDA or cuDNN header.
#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "harness/dtype.h"

namespace attnfuzz::cudnn_detail {

using Strides = std::array<int64_t, 4>;  // in elements, for the logical [B][H][S][D] indices

// Everything that determines an SDPA graph (forward and backward alike). Sequence
// lengths and the bias values are data, not part of the graph. The whole struct is the
// graph cache's key (operator<=>, every field): a field that shapes a graph and is left out
// of the comparison would hand one configuration's graph to another.
struct GraphSpec {
  DType dtype = DType::f16;  // io type of Q, K, V, O and their gradients (and of the bias)
  int64_t batch = 1, heads_q = 1, heads_kv = 1, seq_q = 1, seq_kv = 1, dim_qk = 8, dim_v = 8;
  Strides q_stride{}, k_stride{}, v_stride{}, o_stride{};
  Strides d_o_stride{}, d_q_stride{}, d_k_stride{}, d_v_stride{};  // each tensor its own layout
  uint32_t scale_bits = 0;                                         // the fp32 softmax scale's bit pattern
  bool padding = false;                                            // seq_len_q / seq_len_kv inputs [B,1,1,1] int32
  std::optional<int64_t> left_bound, right_bound;
  bool bottom_right = false;  // diagonal alignment (only with a bound)
  bool bias = false;          // bias input [bias_batch, bias_heads, Sq, Skv], contiguous
  int64_t bias_batch = 1, bias_heads = 1;
  // The backward's dBias output (set_dbias): [dbias_batch, dbias_heads, Sq, Skv], contiguous, in
  // the io type; cuDNN sums dS over the batch (heads) where its extent is 1. Only with a bias
  // input. The forward graph does not read these, but they stay in its key too: the
  // forward and backward graphs of one selection are built and cached as a pair.
  bool dbias = false;
  int64_t dbias_batch = 1, dbias_heads = 1;
  // Packed (THD) sequences (`cudnn.varlen`, backends/cudnn_varlen.h): Q, K, V, O and, in the
  // backward, dO, dQ, dK, dV carry ragged offset tensors (set_ragged_offset), [B + 1, 1, 1, 1] in
  // elements, INT64 (INT32 where offsets_int32: cuDNN before 9.6). Q and dQ share one, O and dO
  // one, K and dK one, V and dV one; their strides above are THD's ([B][H][S][D] indices over
  // [tokens][H][D]). Only with padding (cuDNN takes ragged offsets only with its padding mask).
  // Stats stay the packed [B, Hq, Sq, 1] tensor, not ragged.
  bool ragged = false;
  bool offsets_int32 = false;
  // A paged K/V cache (`cudnn.paged`): K and V are page pools [pages][Hkv][page_size][D] (packed)
  // read through page tables [B, 1, table_size, 1] INT32 (set_paged_attention_k_table, _v_table),
  // with set_paged_attention_max_seq_len_kv(seq_kv); 0: not paged. Forward only: cuDNN's
  // backward takes no page table, so prepare() refuses a paged backward graph.
  int64_t page_size = 0, pages = 0, table_size = 0;

  float scale() const;
  auto operator<=>(const GraphSpec&) const = default;
};

enum class Pass { forward, backward };

// Device pointers of one execution; the ones a graph does not use stay null.
struct DevicePointers {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *bias = nullptr, *seq_len_q = nullptr, *seq_len_kv = nullptr;
  void* o = nullptr;      // forward output; backward input
  void* stats = nullptr;  // forward output (fp32 [B,Hq,Sq,1], natural-log LSE); backward input
  const void* d_o = nullptr;
  void *d_q = nullptr, *d_k = nullptr, *d_v = nullptr;
  void* d_bias = nullptr;  // backward output with GraphSpec::dbias
  // GraphSpec::ragged: the offsets (B + 1 elements each, int64 or int32 as the spec says).
  const void *ragged_q = nullptr, *ragged_k = nullptr, *ragged_v = nullptr, *ragged_o = nullptr;
  // GraphSpec::page_size > 0: the page table (int32 [B][table_size]), for K and V alike.
  const void* page_table = nullptr;
};

// Owns a cuDNN handle (created on first use), the built graphs and a workspace.
class GraphCache {
 public:
  GraphCache();
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // Builds the graph (or finds it built) and checks that cuDNN supports it: nothing when
  // it does, the frontend's message when not. Never throws.
  std::optional<std::string> prepare(const GraphSpec& spec, Pass pass);
  // Runs a graph prepare() accepted, then waits for the device (unless `wait` is false: the
  // benchmarks queue calls back to back). Throws std::runtime_error.
  void execute(const GraphSpec& spec, Pass pass, const DevicePointers& ptrs, bool wait = true);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One cudaMalloc'd allocation, zero-filled at birth. Throws std::runtime_error on CUDA errors.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;
  void zero();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// The cuDNN runtime's version (cudnnGetVersion()), the one the headers declare, and the frontend's.
size_t cudnn_runtime_version();
size_t cudnn_compiled_version();
std::string cudnn_frontend_version();
// Probes the CUDA device and cuDNN (see cudnn_sdpa_available); the reason when unusable.
std::optional<std::string> probe_cudnn();

}  // namespace attnfuzz::cudnn_detail
