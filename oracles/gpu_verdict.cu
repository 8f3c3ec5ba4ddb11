// The verdict's sums over elements on the GPU: oracles/gpu_verdict.h says what each is.
#include "oracles/device_common.cuh"
#include "oracles/gpu_verdict.h"

namespace attnfuzz::gpu {

namespace {

const double* doubles_of(const DeviceCopy* a) { return a ? a->doubles() : nullptr; }
const uint8_t* bytes_of(const DeviceCopy* a) { return a ? a->bytes_data() : nullptr; }

// The arrays as a kernel reads them.
struct Elements {
  const double *impl, *ref, *fwd, *rev, *sigma, *row_dof;
  const uint8_t* skip;
  double tiny, overflow;
  int64_t rows, width;
};

Elements elements_of(const VerdictArrays& a, const VerdictShape& s) {
  return {doubles_of(a.impl), doubles_of(a.ref),     doubles_of(a.baseline_fwd), doubles_of(a.baseline_rev), doubles_of(a.sigma),
          doubles_of(a.row_dof), bytes_of(a.skip_rows), a.tiny,                     a.overflow,                 s.rows,
          s.width};
}

// harness/metrics.h, overflow_stored.
__device__ bool overflow_stored(double a, double r, double overflow) {
  return isinf(a) && signbit(a) == signbit(r) && fabs(r) * (1.0 + 0x1p-6) >= overflow;
}

// compare()'s sums over one row, into 7 columns of [columns][rows] from `col`.
__device__ void compare_row(const double* a, const double* ref, int64_t row, int64_t width, double overflow, double* cols, int64_t rows,
                            int col) {
  double diff2 = 0, ref2 = 0, sum_abs = 0, finite = 0, max_abs = 0, ref_max_abs = 0, nonfinite = 0;
  for (int64_t d = 0; d < width; ++d) {
    const int64_t e = row * width + d;
    const double x = a[e], r = ref[e];
    if (!isfinite(r) || !isfinite(x)) {
      if (!(isinf(r) && x == r) && !overflow_stored(x, r, overflow)) nonfinite += 1;
      continue;
    }
    const double dd = fabs(x - r);
    max_abs = fmax(max_abs, dd);
    ref_max_abs = fmax(ref_max_abs, fabs(r));
    diff2 += dd * dd;
    ref2 += r * r;
    sum_abs += dd;
    finite += 1;
  }
  const double v[7] = {diff2, ref2, sum_abs, finite, max_abs, ref_max_abs, nonfinite};
  for (int i = 0; i < 7; ++i) cols[(col + i) * rows + row] = v[i];
}

constexpr int kCompareCols = 7;
// Columns 4 and 5 of each compare (max_abs, ref_max_abs) are maxima; the rest sums.
__host__ __device__ bool is_max_column(int col, int compare_cols_end) { return col < compare_cols_end && (col % 7 == 4 || col % 7 == 5); }

__global__ void compare_rows(const double* a, const double* ref, const uint8_t* skip, int64_t rows, int64_t width, double overflow,
                             double* cols, int col) {
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < rows; row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (skip && skip[row]) {
      for (int i = 0; i < kCompareCols; ++i) cols[(col + i) * rows + row] = 0;
      continue;
    }
    compare_row(a, ref, row, width, overflow, cols, rows, col);
  }
}

// One element's terms (oracles/gpu_verdict.h), as harness/verdict.cpp's elementwise makes them.
struct Element {
  bool used = false, exact = false;
  double ref = 0, err = 0, err2 = 0, base2 = 0, model = 0, allow2 = 0;
};

__device__ Element element(const Elements& x, int64_t e, double k) {
  Element t;
  const double r = x.ref[e], a = x.impl[e];
  if (!isfinite(r) || !isfinite(a)) return t;
  t.used = true;
  t.ref = r;
  t.err = a - r;
  t.err2 = (a - r) * (a - r);
  double fwd2 = 0, rev2 = 0;
  if (x.fwd && isfinite(x.fwd[e])) fwd2 = (x.fwd[e] - r) * (x.fwd[e] - r);
  if (x.rev && isfinite(x.rev[e])) rev2 = (x.rev[e] - r) * (x.rev[e] - r);
  t.base2 = (fwd2 + rev2) / 2.0;
  t.model = x.sigma ? x.sigma[e] : 0.0;
  if (k >= 0) {
    const double m = t.model, kkmm = k * k * m * m;
    const double allow = sqrt(kkmm < t.base2 ? t.base2 : kkmm) + x.tiny;
    t.allow2 = allow * allow;
    t.exact = m == 0 && t.base2 == 0;
  }
  return t;
}

// Per row: sum base2, sum m^2, used (columns from `col`), for kappa.
__global__ void model_rows(Elements x, double* cols, int col) {
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < x.rows; row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double base2 = 0, model2 = 0, used = 0;
    if (!(x.skip && x.skip[row]))
      for (int64_t d = 0; d < x.width; ++d) {
        const Element t = element(x, row * x.width + d, -1.0);
        if (!t.used) continue;
        used += 1;
        base2 += t.base2;
        model2 += t.model * t.model;
      }
    cols[col * x.rows + row] = base2;
    cols[(col + 1) * x.rows + row] = model2;
    cols[(col + 2) * x.rows + row] = used;
  }
}

// Each column of [columns][rows] summed (or its maximum taken) by one block: thread t takes
// rows t, t + T, ... in order, then the threads' values pair up in a fixed tree.
constexpr int kReduceThreads = 512;
__global__ void __launch_bounds__(kReduceThreads) reduce_columns(const double* cols, int64_t rows, int compare_cols_end, double* out) {
  __shared__ double part[kReduceThreads];
  const int col = blockIdx.x;
  const bool take_max = is_max_column(col, compare_cols_end);
  double acc = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kReduceThreads) {
    const double v = cols[col * rows + r];
    acc = take_max ? fmax(acc, v) : acc + v;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = kReduceThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) part[threadIdx.x] = take_max ? fmax(part[threadIdx.x], part[threadIdx.x + stride]) : part[threadIdx.x] + part[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[col] = part[0];
}

CompareSums compare_sums(const double* v) { return {v[0], v[1], v[2], v[3], v[4], v[5], v[6]}; }

std::vector<double> reduce(const DeviceBuffer<double>& cols, int64_t rows, int ncols, int compare_cols_end) {
  DeviceBuffer<double> out(static_cast<size_t>(ncols));
  reduce_columns<<<ncols, kReduceThreads>>>(cols.get(), rows, compare_cols_end, out.get());
  AF_CUDA(cudaGetLastError());
  std::vector<double> host(static_cast<size_t>(ncols));
  out.download(host.data());
  return host;
}

// Per row, the fields of oracles/gpu_verdict.h (kRowFields, [field][rows]) and the hash.
__global__ void block_rows(Elements x, double k, double row_scale_variance, double* fields, uint64_t* hashes) {
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < x.rows; row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double err2 = 0, allow2 = 0, n = 0, can_err = 0, max_err2 = -1, allow2_at_max = 0;
    double along = 0, independent = 0, p_allow2 = 0, p_ref2 = 0, p_can = 0;
    uint64_t h = 1469598103934665603ull;
    for (int64_t d = 0; d < x.width; ++d) {
      const int64_t e = row * x.width + d;
      h = (h ^ static_cast<uint64_t>(__double_as_longlong(x.ref[e]))) * 1099511628211ull;
      if (x.skip && x.skip[row]) continue;
      const Element t = element(x, e, k);
      if (!t.used) continue;
      if (t.err2 > max_err2) {
        max_err2 = t.err2;
        allow2_at_max = t.allow2;
      }
      err2 += t.err2;
      allow2 += t.allow2;
      n += 1;
      if (t.exact) continue;
      can_err += 1;
      along += t.err * t.ref;
      independent += t.allow2 * t.ref * t.ref;
      p_allow2 += t.allow2;
      p_ref2 += t.ref * t.ref;
      p_can += 1;
    }
    double along_err2 = 0, along_allow2 = 0, along_n = 0, along_dof = 0;
    if (p_can != 0 && p_allow2 < p_ref2) {
      const double dof = fmax(1.0, x.row_dof ? fmin(p_can, x.row_dof[row]) : p_can);
      const double shared = p_allow2 * p_ref2 / dof;
      along_err2 = along * along;
      along_allow2 = (independent < shared ? shared : independent) + row_scale_variance * p_ref2 * p_ref2;
      along_n = p_can;
      along_dof = 1;
    }
    const double v[kRowFields] = {err2, allow2, n, can_err, along_err2, along_allow2, along_n, along_dof, max_err2, allow2_at_max};
    for (int i = 0; i < kRowFields; ++i) fields[static_cast<int64_t>(i) * x.rows + row] = v[i];
    hashes[row] = h;
  }
}

// Per tile of `tile` rows x `tile` columns: its sums over its elements, rows in order and each
// row's elements in order, and its dof (harness/verdict.cpp, sum_box).
__global__ void block_tiles(Elements x, double k, int64_t seq, int64_t tile, const uint64_t* hashes, double* fields) {
  const int64_t row_tiles = (seq + tile - 1) / tile, col_tiles = (x.width + tile - 1) / tile;
  const int64_t tiles = x.rows / seq * row_tiles * col_tiles;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < tiles; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t head = i / (row_tiles * col_tiles), ti = i / col_tiles % row_tiles, tj = i % col_tiles;
    const int64_t s0 = ti * tile, s1 = min(seq, s0 + tile), d0 = tj * tile, d1 = min(x.width, d0 + tile);
    uint64_t seen[kMaxTileRows];
    int n_seen = 0;
    double err2 = 0, allow2 = 0, n = 0, dof = 0;
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t row = head * seq + s;
      double in_row = 0, can_err = 0;
      if (!(x.skip && x.skip[row]))
        for (int64_t d = d0; d < d1; ++d) {
          const Element t = element(x, row * x.width + d, k);
          if (!t.used) continue;
          err2 += t.err2;
          allow2 += t.allow2;
          in_row += 1;
          can_err += t.exact ? 0 : 1;
        }
      n += in_row;
      if (can_err == 0) continue;
      const double row_dof = x.row_dof ? fmin(can_err, x.row_dof[row]) : can_err;
      bool copy = false;
      for (int j = 0; j < n_seen && !copy; ++j) copy = seen[j] == hashes[row];
      if (!copy) {
        seen[n_seen++] = hashes[row];
        dof += row_dof;
      }
    }
    fields[i * kTileFields + 0] = err2;
    fields[i * kTileFields + 1] = allow2;
    fields[i * kTileFields + 2] = n;
    fields[i * kTileFields + 3] = dof;
  }
}

}  // namespace

VerdictTotals totals(const VerdictArrays& a, const VerdictShape& s) {
  const Elements x = elements_of(a, s);
  constexpr int kCols = 3 * kCompareCols + 3;
  DeviceBuffer<double> cols(static_cast<size_t>(kCols * s.rows));
  const int grid = stride_grid(s.rows);
  const double* compared[3] = {x.impl, x.fwd, x.rev};
  for (int i = 0; i < 3; ++i)
    if (compared[i]) {
      compare_rows<<<grid, kThreads>>>(compared[i], x.ref, x.skip, s.rows, s.width, x.overflow, cols.get(), i * kCompareCols);
      AF_CUDA(cudaGetLastError());
    } else {
      AF_CUDA(cudaMemset(cols.get() + i * kCompareCols * s.rows, 0, sizeof(double) * kCompareCols * s.rows));
    }
  model_rows<<<grid, kThreads>>>(x, cols.get(), 3 * kCompareCols);
  AF_CUDA(cudaGetLastError());
  const std::vector<double> v = reduce(cols, s.rows, kCols, 3 * kCompareCols);
  VerdictTotals t;
  t.impl = compare_sums(&v[0]);
  t.baseline_fwd = compare_sums(&v[kCompareCols]);
  t.baseline_rev = compare_sums(&v[2 * kCompareCols]);
  t.base2 = v[3 * kCompareCols], t.model2 = v[3 * kCompareCols + 1], t.used = v[3 * kCompareCols + 2];
  return t;
}

CompareSums compare(const DeviceCopy& a, const DeviceCopy& ref, const DeviceCopy* skip_rows, const VerdictShape& s, double overflow) {
  DeviceBuffer<double> cols(static_cast<size_t>(kCompareCols * s.rows));
  compare_rows<<<stride_grid(s.rows), kThreads>>>(a.doubles(), ref.doubles(), bytes_of(skip_rows), s.rows, s.width, overflow,
                                                   cols.get(), 0);
  AF_CUDA(cudaGetLastError());
  return compare_sums(reduce(cols, s.rows, kCompareCols, kCompareCols).data());
}

VerdictBlocks blocks(const VerdictArrays& a, const VerdictShape& s, double k, double row_scale_variance, int64_t tile) {
  if (tile < 1 || tile > kMaxTileRows) throw std::invalid_argument("gpu::blocks: tile " + std::to_string(tile) + " outside [1, 64]");
  const Elements x = elements_of(a, s);
  const int64_t tiles = s.rows / s.seq * ((s.seq + tile - 1) / tile) * ((s.width + tile - 1) / tile);
  DeviceBuffer<double> rows(static_cast<size_t>(kRowFields * s.rows)), tile_fields(static_cast<size_t>(kTileFields * tiles));
  DeviceBuffer<uint64_t> hashes(static_cast<size_t>(s.rows));
  block_rows<<<stride_grid(s.rows), kThreads>>>(x, k, row_scale_variance, rows.get(), hashes.get());
  AF_CUDA(cudaGetLastError());
  block_tiles<<<stride_grid(tiles), kThreads>>>(x, k, s.seq, tile, hashes.get(), tile_fields.get());
  AF_CUDA(cudaGetLastError());
  VerdictBlocks b;
  std::vector<double> by_field(static_cast<size_t>(kRowFields * s.rows));
  rows.download(by_field.data());
  b.rows.resize(by_field.size());
  for (int64_t r = 0; r < s.rows; ++r)
    for (int f = 0; f < kRowFields; ++f) b.rows[static_cast<size_t>(r * kRowFields + f)] = by_field[static_cast<size_t>(f * s.rows + r)];
  b.hashes.resize(static_cast<size_t>(s.rows));
  hashes.download(b.hashes.data());
  b.tiles.resize(static_cast<size_t>(kTileFields * tiles));
  tile_fields.download(b.tiles.data());
  return b;
}

}  // namespace attnfuzz::gpu
