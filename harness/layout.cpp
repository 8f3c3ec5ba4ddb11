#include "harness/layout.h"

#include <limits>

#include "harness/case.h"

namespace attnfuzz {
namespace {

constexpr std::array<const char*, kAllOrders.size()> kOrderNames{"bhsd", "bshd", "hbsd", "hsbd", "sbhd", "shbd"};
constexpr std::array<const char*, 3> kPackingNames{"none", "qkv", "kv"};
constexpr std::array<const char*, 3> kFillNames{"zero", "nan", "large"};

// Logical dim index (0 = B, 1 = H, 2 = S) of the order's dims, outermost first.
std::array<int, 3> order_dims(TensorLayout::Order o) {
  using O = TensorLayout::Order;
  switch (o) {
    case O::bhsd:
      return {0, 1, 2};
    case O::bshd:
      return {0, 2, 1};
    case O::hbsd:
      return {1, 0, 2};
    case O::hsbd:
      return {1, 2, 0};
    case O::sbhd:
      return {2, 0, 1};
    case O::shbd:
      return {2, 1, 0};
  }
  return {0, 1, 2};
}

// The packed group `r` belongs to: its packing and its index in the group, or none.
struct GroupSlot {
  Packing packing = Packing::none;
  int64_t index = 0, members = 1;
  TensorId first = TensorId::Q;
};
GroupSlot group_slot(const Layouts& l, TensorId r) {
  using R = TensorId;
  const bool grad = r == R::dQ || r == R::dK || r == R::dV;
  const bool input = r == R::Q || r == R::K || r == R::V;
  if (!grad && !input) return {};
  const Packing p = grad ? l.grads : l.inputs;
  const int64_t pos = r == R::Q || r == R::dQ ? 0 : r == R::K || r == R::dK ? 1 : 2;
  if (p == Packing::qkv) return {p, pos, 3, grad ? R::dQ : R::Q};
  if (p == Packing::kv && pos > 0) return {p, pos - 1, 2, grad ? R::dK : R::K};
  return {};
}

}  // namespace

const char* order_name(TensorLayout::Order o) { return kOrderNames[static_cast<size_t>(o)]; }
std::optional<TensorLayout::Order> order_from_name(std::string_view name) {
  for (TensorLayout::Order o : kAllOrders)
    if (name == order_name(o)) return o;
  return std::nullopt;
}

const char* packing_name(Packing p) { return kPackingNames[static_cast<size_t>(p)]; }
std::optional<Packing> packing_from_name(std::string_view name) {
  for (Packing p : {Packing::none, Packing::qkv, Packing::kv})
    if (name == packing_name(p)) return p;
  return std::nullopt;
}

const char* fill_name(Surround::Fill f) { return kFillNames[static_cast<size_t>(f)]; }
std::optional<Surround::Fill> fill_from_name(std::string_view name) {
  for (Surround::Fill f : {Surround::Fill::zero, Surround::Fill::nan, Surround::Fill::large})
    if (name == fill_name(f)) return f;
  return std::nullopt;
}

double surround_value(Surround::Fill f, DType d) {
  switch (f) {
    case Surround::Fill::zero:
      return 0.0;
    case Surround::Fill::nan:
      return std::numeric_limits<double>::quiet_NaN();
    case Surround::Fill::large:
      return largest_finite(d);
  }
  return 0.0;
}

Layouts Layouts::uniform(const TensorLayout& l) {
  Layouts out;
  out.tensors_.fill(l);
  return out;
}

std::optional<TensorLayout> Layouts::as_uniform() const {
  if (inputs != Packing::none || grads != Packing::none || !(surround == Surround{})) return std::nullopt;
  for (const TensorLayout& t : tensors_)
    if (!(t == tensors_[0])) return std::nullopt;
  return tensors_[0];
}

int64_t Placement::numel() const { return sizes[0] * sizes[1] * sizes[2] * (ndim == 4 ? sizes[3] : 1); }

std::array<int64_t, 4> role_sizes(TensorId r, const Shape& s, int32_t* ndim) {
  using R = TensorId;
  if (ndim) *ndim = r == R::LSE || r == R::dLSE ? 3 : 4;
  switch (r) {
    case R::Q:
    case R::dQ:
      return {s.batch, s.heads_q, s.seq_q, s.head_dim_qk};
    case R::K:
    case R::dK:
      return {s.batch, s.heads_kv, s.seq_kv, s.head_dim_qk};
    case R::V:
    case R::dV:
      return {s.batch, s.heads_kv, s.seq_kv, s.head_dim_v};
    case R::dO:
    case R::O:
      return {s.batch, s.heads_q, s.seq_q, s.head_dim_v};
    case R::LSE:
    case R::dLSE:
      return {s.batch, s.heads_q, s.seq_q, 1};
    case R::mask:  // not laid out: the bridge passes it dense, [B][Hq][Sq][Skv]
    case R::Bias:  // not laid out: dense, its broadcast dimensions of extent 1 (harness/case.h, ScoreBias)
    case R::dBias:  // as the bias
      break;
  }
  return {};
}

bool packing_applies(Packing packing, const Shape& s) {
  switch (packing) {
    case Packing::none:
      return false;
    case Packing::qkv:
      return s.heads_q == s.heads_kv && s.seq_q == s.seq_kv && s.head_dim_qk == s.head_dim_v;
    case Packing::kv:
      return s.head_dim_qk == s.head_dim_v;
  }
  return false;
}

namespace {
Placement place_unguarded(const Layouts& layouts, TensorId r, const Shape& s) {
  Placement p;
  p.sizes = role_sizes(r, s, &p.ndim);
  p.buffer = r;
  const int64_t width = p.sizes[3];
  p.strides[3] = 1;
  const GroupSlot g = group_slot(layouts, r);
  if (g.packing != Packing::none && packing_applies(g.packing, s)) {
    const TensorLayout& l = layouts[g.first];
    const int64_t st_h = width + l.row_padding, st_n = p.sizes[1] * st_h, st_s = g.members * st_n, st_b = p.sizes[2] * st_s;
    p.strides[0] = st_b;
    p.strides[1] = st_h;
    p.strides[2] = st_s;
    p.offset = l.offset + g.index * st_n;
    p.extent = l.offset + p.sizes[0] * st_b;
    p.buffer = g.first;
    return p;
  }
  const TensorLayout& l = layouts[r];
  const std::array<int, 3> dims = order_dims(l.order);
  int64_t stride = width + l.row_padding, inner_size = 1;
  for (int i = 2; i >= 0; --i) {
    const int dim = dims[static_cast<size_t>(i)];
    if (i < 2) stride *= inner_size;
    if (dim == 1) stride += l.head_padding;
    p.strides[static_cast<size_t>(dim)] = stride;
    inner_size = p.sizes[static_cast<size_t>(dim)];
  }
  p.offset = l.offset;
  p.extent = l.offset + p.sizes[static_cast<size_t>(dims[0])] * p.strides[static_cast<size_t>(dims[0])];
  if (p.ndim == 3) {
    p.sizes[3] = 1;
    p.strides[3] = 0;
  }
  return p;
}
}  // namespace

Placement place(const Layouts& layouts, TensorId r, const Shape& s) {
  Placement p = place_unguarded(layouts, r, s);
  p.offset += layouts.surround.guard;
  p.extent += 2 * layouts.surround.guard;
  return p;
}

std::string describe(const Layouts& l) {
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : " ") + s; };
  for (TensorId r : kLaidOutTensors) {
    const TensorLayout& t = l[r];
    if (t == TensorLayout{}) continue;
    std::string s = std::string(case_key(r)) + ":" + order_name(t.order);
    if (t.row_padding) s += "+row" + std::to_string(t.row_padding);
    if (t.head_padding) s += "+head" + std::to_string(t.head_padding);
    if (t.offset) s += "@" + std::to_string(t.offset);
    add(s);
  }
  if (l.inputs != Packing::none) add(std::string("inputs:") + packing_name(l.inputs));
  if (l.grads != Packing::none) add(std::string("grads:") + packing_name(l.grads));
  if (!(l.surround == Surround{}))
    add(std::string("surround:") + fill_name(l.surround.fill) + (l.surround.guard ? "+guard" + std::to_string(l.surround.guard) : ""));
  return out.empty() ? "default" : out;
}

}  // namespace attnfuzz
