#include "harness/case_json.h"

#include <set>

#include "harness/errors.h"
#include "harness/json_input.h"

namespace attnfuzz {
using nlohmann::json;

namespace {

// Walks one JSON object, remembering which keys were read, so unknown keys can be reported.
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j_.is_object()) throw CaseError(path_.empty() ? "<root>" : path_, "expected a JSON object");
  }
  std::string field(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& get(const std::string& key) {
    seen_.insert(key);
    if (!j_.contains(key)) throw CaseError(field(key), "is required");
    return j_.at(key);
  }
  const json* maybe(const std::string& key) {
    seen_.insert(key);
    return has(key) ? &j_.at(key) : nullptr;
  }
  int64_t integer(const std::string& key, std::optional<int64_t> def = std::nullopt) {
    const json* v = def ? maybe(key) : &get(key);
    if (!v) return *def;
    if (!v->is_number_integer()) throw CaseError(field(key), "expected an integer");
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) throw CaseError(field(key), "out of range");
    return v->get<int64_t>();
  }
  uint64_t uinteger(const std::string& key, std::optional<uint64_t> def = std::nullopt) {
    const json* v = def ? maybe(key) : &get(key);
    if (!v) return *def;
    if (!v->is_number_integer() || (v->is_number_integer() && !v->is_number_unsigned() && v->get<int64_t>() < 0))
      throw CaseError(field(key), "expected a non-negative integer");
    return v->get<uint64_t>();
  }
  double number(const std::string& key, std::optional<double> def = std::nullopt) {
    const json* v = def ? maybe(key) : &get(key);
    if (!v) return *def;
    if (!v->is_number()) throw CaseError(field(key), "expected a number");
    return v->get<double>();
  }
  std::optional<double> optional_number(const std::string& key) {
    const json* v = maybe(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) throw CaseError(field(key), "expected a number or null");
    return v->get<double>();
  }
  std::string string(const std::string& key, std::optional<std::string> def = std::nullopt) {
    const json* v = def ? maybe(key) : &get(key);
    if (!v) return *def;
    if (!v->is_string()) throw CaseError(field(key), "expected a string");
    return v->get<std::string>();
  }
  std::vector<int64_t> int_list(const std::string& key, bool required) {
    const json* v = required ? &get(key) : maybe(key);
    std::vector<int64_t> out;
    if (!v) return out;
    if (!v->is_array()) throw CaseError(field(key), "expected an array of integers");
    if (v->size() > (1u << 20)) throw CaseError(field(key), "too many elements");
    for (const auto& e : *v) {
      if (!e.is_number_integer()) throw CaseError(field(key), "expected an array of integers");
      if (e.is_number_unsigned() && e.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) throw CaseError(field(key), "out of range");
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key())) throw CaseError(field(it.key()), "unknown key");
  }

 private:
  const json& j_;
  std::string path_;
  std::set<std::string> seen_;
};

Align align_from(const std::string& s, const std::string& field) {
  if (s == "top_left") return Align::top_left;
  if (s == "bottom_right") return Align::bottom_right;
  throw CaseError(field, "expected 'top_left' or 'bottom_right', got '" + s + "'");
}
const char* align_name(Align a) { return a == Align::bottom_right ? "bottom_right" : "top_left"; }

MaskExpr::Kind mask_kind_from(const std::string& s, const std::string& field) {
  using K = MaskExpr::Kind;
  for (K k : {K::all, K::causal, K::sliding_window, K::document, K::prefix_lm, K::block_sparse, K::random, K::and_, K::or_, K::not_})
    if (to_string(k) == s) return k;
  throw CaseError(field, "unknown mask kind '" + s + "'");
}

MaskExpr mask_from(const json& j, const std::string& path, int depth) {
  if (depth > 16) throw CaseError(path, "mask expressions nest at most 16 deep");
  ObjectReader r(j, path);
  MaskExpr m;
  m.kind = mask_kind_from(r.string("kind"), r.field("kind"));
  using K = MaskExpr::Kind;
  switch (m.kind) {
    case K::all:
      break;
    case K::causal:
      m.align = align_from(r.string("align", "top_left"), r.field("align"));
      break;
    case K::sliding_window:
      m.align = align_from(r.string("align", "top_left"), r.field("align"));
      m.left = r.integer("left");
      m.right = r.integer("right");
      break;
    case K::document:
      m.segments_q = r.int_list("segments_q", true);
      m.segments_kv = r.int_list("segments_kv", true);
      break;
    case K::prefix_lm:
      m.align = align_from(r.string("align", "top_left"), r.field("align"));
      m.prefix = r.integer("prefix");
      break;
    case K::block_sparse: {
      m.block_q = r.integer("block_q");
      m.block_kv = r.integer("block_kv");
      const json& rows = r.get("rows");
      if (!rows.is_array()) throw CaseError(r.field("rows"), "expected an array of strings of '0' and '1'");
      for (const auto& row : rows) {
        if (!row.is_string()) throw CaseError(r.field("rows"), "expected an array of strings of '0' and '1'");
        m.rows.push_back(row.get<std::string>());
      }
      break;
    }
    case K::random:
      m.density = r.number("density");
      m.seed = r.uinteger("seed");
      break;
    case K::and_:
    case K::or_:
    case K::not_: {
      const json& args = r.get("args");
      if (!args.is_array()) throw CaseError(r.field("args"), "expected an array of mask expressions");
      // Refused before building anything; validate() bounds the whole expression (case.h).
      if (args.size() > kMaxMaskSize) throw CaseError(r.field("args"), "more than " + std::to_string(kMaxMaskSize) + " arguments");
      for (size_t i = 0; i < args.size(); ++i)
        m.args.push_back(mask_from(args[i], r.field("args") + "[" + std::to_string(i) + "]", depth + 1));
      break;
    }
  }
  r.finish();
  return m;
}

ValueDist::Kind dist_kind_from(const std::string& s, const std::string& field) {
  using K = ValueDist::Kind;
  for (K k : {K::normal, K::uniform, K::large_logit, K::near_constant, K::outliers, K::zero, K::row_shift, K::sparse_rows, K::subnormal,
              K::nonfinite})
    if (to_string(k) == s) return k;
  throw CaseError(field, "unknown distribution '" + s + "'");
}

ValueDist dist_from(const json& j, const std::string& path, ValueDist def) {
  ObjectReader r(j, path);
  ValueDist d;
  d.kind = dist_kind_from(r.string("dist", to_string(def.kind)), r.field("dist"));
  const double default_sigma = d.kind == ValueDist::Kind::large_logit ? 8.0 : d.kind == ValueDist::Kind::near_constant ? 0.0 : 1.0;
  d.mean = r.number("mean", d.kind == ValueDist::Kind::near_constant ? 0.1 : 0.0);
  d.sigma = r.number("sigma", default_sigma);
  d.fraction = r.number("fraction", d.kind == ValueDist::Kind::outliers ? 0.01 : d.kind == ValueDist::Kind::row_shift ? 1.0 : 0.0);
  d.magnitude = r.number("magnitude", d.kind == ValueDist::Kind::outliers ? 30.0 : 0.0);
  r.finish();
  return d;
}

Composition::Kind comp_kind_from(const std::string& s, const std::string& field) {
  using K = Composition::Kind;
  for (K k : {K::single, K::kv_split, K::q_split, K::mask_partition})
    if (to_string(k) == s) return k;
  throw CaseError(field, "unknown composition kind '" + s + "'");
}

Composition composition_from(const json& j, const std::string& path, int depth) {
  if (depth > 8) throw CaseError(path, "compositions nest at most 8 deep");
  ObjectReader r(j, path);
  Composition c;
  c.kind = comp_kind_from(r.string("kind"), r.field("kind"));
  if (c.kind == Composition::Kind::kv_split || c.kind == Composition::Kind::q_split) c.bounds = r.int_list("bounds", true);
  if (c.kind == Composition::Kind::mask_partition) {
    ObjectReader w(r.get("window"), r.field("window"));
    c.window_left = w.integer("left");
    c.window_right = w.integer("right");
    c.window_align = align_from(w.string("align", "top_left"), w.field("align"));
    w.finish();
  }
  if (const json* ch = r.maybe("children")) {
    if (!ch->is_array()) throw CaseError(r.field("children"), "expected an array of compositions");
    for (size_t i = 0; i < ch->size(); ++i)
      c.children.push_back(composition_from((*ch)[i], r.field("children") + "[" + std::to_string(i) + "]", depth + 1));
  }
  r.finish();
  return c;
}

// "layouts": {"<tensor>": {"order", "row_padding", "head_padding", "offset"}, ...,
//             "packing": {"inputs": "none|qkv|kv", "grads": "none|qkv|kv"},
//             "surround": {"fill": "zero|nan|large", "guard": elements}}; all keys optional.
Layouts layouts_from(const json& j) {
  ObjectReader r(j, "layouts");
  Layouts out;
  for (TensorId role : kLaidOutTensors) {
    const json* t = r.maybe(case_key(role));
    if (!t) continue;
    ObjectReader tr(*t, r.field(case_key(role)));
    TensorLayout& l = out[role];
    const std::string order = tr.string("order", "bhsd");
    const auto o = order_from_name(order);
    if (!o) throw CaseError(tr.field("order"), "expected one of bhsd, bshd, hbsd, hsbd, sbhd, shbd, got '" + order + "'");
    l.order = *o;
    l.row_padding = tr.integer("row_padding", 0);
    l.head_padding = tr.integer("head_padding", 0);
    l.offset = tr.integer("offset", 0);
    tr.finish();
  }
  if (const json* p = r.maybe("packing")) {
    ObjectReader pr(*p, r.field("packing"));
    for (auto [key, dst] : std::initializer_list<std::pair<const char*, Packing*>>{{"inputs", &out.inputs}, {"grads", &out.grads}}) {
      const std::string name = pr.string(key, "none");
      const auto k = packing_from_name(name);
      if (!k) throw CaseError(pr.field(key), "expected 'none', 'qkv' or 'kv', got '" + name + "'");
      *dst = *k;
    }
    pr.finish();
  }
  if (const json* p = r.maybe("surround")) {
    ObjectReader sr(*p, r.field("surround"));
    const std::string name = sr.string("fill", "zero");
    const auto f = fill_from_name(name);
    if (!f) throw CaseError(sr.field("fill"), "expected 'zero', 'nan' or 'large', got '" + name + "'");
    out.surround.fill = *f;
    out.surround.guard = sr.integer("guard", 0);
    if (out.surround.guard < 0 || out.surround.guard > kMaxSurroundGuard)
      throw CaseError(sr.field("guard"), "expected 0 to " + std::to_string(kMaxSurroundGuard) + " elements, got " + std::to_string(out.surround.guard));
    sr.finish();
  }
  r.finish();
  return out;
}

json layouts_to_json(const Layouts& l) {
  json j = json::object();
  for (TensorId role : kLaidOutTensors) {
    const TensorLayout& t = l[role];
    if (t == TensorLayout{}) continue;
    j[case_key(role)] =
        json{{"order", order_name(t.order)}, {"row_padding", t.row_padding}, {"head_padding", t.head_padding}, {"offset", t.offset}};
  }
  if (l.inputs != Packing::none || l.grads != Packing::none)
    j["packing"] = json{{"inputs", packing_name(l.inputs)}, {"grads", packing_name(l.grads)}};
  if (!(l.surround == Surround{})) j["surround"] = json{{"fill", fill_name(l.surround.fill)}, {"guard", l.surround.guard}};
  return j;
}

json dist_to_json(const ValueDist& d) {
  return json{{"dist", to_string(d.kind)}, {"mean", d.mean}, {"sigma", d.sigma}, {"fraction", d.fraction}, {"magnitude", d.magnitude}};
}

}  // namespace

json to_json(const MaskExpr& m) {
  using K = MaskExpr::Kind;
  json j{{"kind", to_string(m.kind)}};
  switch (m.kind) {
    case K::all:
      break;
    case K::causal:
      j["align"] = align_name(m.align);
      break;
    case K::sliding_window:
      j["align"] = align_name(m.align);
      j["left"] = m.left;
      j["right"] = m.right;
      break;
    case K::document:
      j["segments_q"] = m.segments_q;
      j["segments_kv"] = m.segments_kv;
      break;
    case K::prefix_lm:
      j["align"] = align_name(m.align);
      j["prefix"] = m.prefix;
      break;
    case K::block_sparse:
      j["block_q"] = m.block_q;
      j["block_kv"] = m.block_kv;
      j["rows"] = m.rows;
      break;
    case K::random:
      j["density"] = m.density;
      j["seed"] = m.seed;
      break;
    case K::and_:
    case K::or_:
    case K::not_: {
      json args = json::array();
      for (const auto& a : m.args) args.push_back(to_json(a));
      j["args"] = args;
      break;
    }
  }
  return j;
}

json to_json(const Composition& c) {
  json j{{"kind", to_string(c.kind)}};
  if (c.kind == Composition::Kind::kv_split || c.kind == Composition::Kind::q_split) j["bounds"] = c.bounds;
  if (c.kind == Composition::Kind::mask_partition)
    j["window"] = json{{"left", c.window_left}, {"right", c.window_right}, {"align", align_name(c.window_align)}};
  if (!c.children.empty()) {
    json ch = json::array();
    for (const auto& x : c.children) ch.push_back(to_json(x));
    j["children"] = ch;
  }
  return j;
}

namespace {
// "bias": {"kind", "spans" (tensor only: the dimensions it spans, of batch, heads, q, kv),
// "values" (tensor and relative), "requires_grad" (default false: no dBias)}.
json bias_to_json(const ScoreBias& b) {
  json j{{"kind", to_string(b.kind)}};
  if (b.kind == ScoreBias::Kind::tensor) {
    json spans = json::array();
    for (size_t d = 0; d < 4; ++d)
      if (b.spans[d]) spans.push_back(kBiasDimNames[d]);
    j["spans"] = spans;
  }
  if (b.kind != ScoreBias::Kind::alibi) j["values"] = dist_to_json(b.values);
  if (b.requires_grad) j["requires_grad"] = true;
  return j;
}

ScoreBias bias_from(const json& j) {
  ObjectReader r(j, "bias");
  ScoreBias b;
  const std::string kind = r.string("kind", "tensor");
  const auto k = bias_kind_from_string(kind);
  if (!k) throw CaseError("bias.kind", "expected 'tensor', 'alibi' or 'relative', got '" + kind + "'");
  b.kind = *k;
  if (const json* spans = r.maybe("spans")) {
    if (b.kind != ScoreBias::Kind::tensor) throw CaseError("bias.spans", "only a bias of kind tensor is broadcast");
    if (!spans->is_array() || spans->size() > 4) throw CaseError("bias.spans", "expected a list of dimensions among batch, heads, q, kv");
    b.spans = {false, false, false, false};
    for (const auto& e : *spans) {
      size_t d = 0;
      while (d < 4 && !(e.is_string() && e.get<std::string>() == kBiasDimNames[d])) ++d;
      if (d == 4) throw CaseError("bias.spans", "expected a list of dimensions among batch, heads, q, kv");
      if (b.spans[d]) throw CaseError("bias.spans", std::string("'") + kBiasDimNames[d] + "' given twice");
      b.spans[d] = true;
    }
  }
  if (const json* v = r.maybe("values")) {
    if (b.kind == ScoreBias::Kind::alibi) throw CaseError("bias.values", "ALiBi's values follow from the shape");
    b.values = dist_from(*v, "bias.values", b.values);
  }
  if (const json* g = r.maybe("requires_grad")) {
    if (!g->is_boolean()) throw CaseError("bias.requires_grad", "expected true or false");
    b.requires_grad = g->get<bool>();
  }
  r.finish();
  return b;
}

// "ragged": {"lens_q", "lens_kv" (one per batch entry), "gap_q", "gap_kv", "tail", "page_size",
// "max_slack" (default 0), "misaligned" (default false)}.
json ragged_to_json(const Ragged& r) {
  json j{{"lens_q", r.lens_q}, {"lens_kv", r.lens_kv}};
  if (r.gap_q) j["gap_q"] = r.gap_q;
  if (r.gap_kv) j["gap_kv"] = r.gap_kv;
  if (r.tail) j["tail"] = r.tail;
  if (r.page_size) j["page_size"] = r.page_size;
  if (r.max_slack) j["max_slack"] = r.max_slack;
  if (r.misaligned) j["misaligned"] = true;
  return j;
}

Ragged ragged_from(const json& j) {
  ObjectReader r(j, "ragged");
  Ragged g;
  g.lens_q = r.int_list("lens_q", true);
  g.lens_kv = r.int_list("lens_kv", true);
  g.gap_q = r.integer("gap_q", 0);
  g.gap_kv = r.integer("gap_kv", 0);
  g.tail = r.integer("tail", 0);
  g.page_size = r.integer("page_size", 0);
  g.max_slack = r.integer("max_slack", 0);
  if (const json* m = r.maybe("misaligned")) {
    if (!m->is_boolean()) throw CaseError("ragged.misaligned", "expected true or false");
    g.misaligned = m->get<bool>();
  }
  r.finish();
  return g;
}
}  // namespace

json to_json(const Case& c) {
  const Shape& s = c.shape;
  json j;
  j["format"] = kCaseFormat;
  j["seed"] = c.seed;
  j["shape"] = json{{"batch", s.batch},   {"heads_q", s.heads_q},         {"heads_kv", s.heads_kv},    {"seq_q", s.seq_q},
                    {"seq_kv", s.seq_kv}, {"head_dim_qk", s.head_dim_qk}, {"head_dim_v", s.head_dim_v}};
  j["dtype"] = std::string(to_string(c.dtype));
  // The old one-layout key while it can say it, so such cases stay readable by older builds.
  const std::optional<TensorLayout> one = c.layouts.as_uniform();
  if (one && one->head_padding == 0 && one->offset == 0 &&
      (one->order == TensorLayout::Order::bhsd || one->order == TensorLayout::Order::bshd))
    j["layout"] = json{{"order", order_name(one->order)}, {"row_padding", one->row_padding}};
  else
    j["layouts"] = layouts_to_json(c.layouts);
  j["scale"] = c.scale ? json(*c.scale) : json(nullptr);
  j["softcap"] = c.softcap ? json(*c.softcap) : json(nullptr);
  if (c.bias) j["bias"] = bias_to_json(*c.bias);
  if (c.ragged) j["ragged"] = ragged_to_json(*c.ragged);
  j["mask"] = to_json(c.mask);
  using T = TensorId;
  j["values"] = json{{case_key(T::Q), dist_to_json(c.q)}, {case_key(T::K), dist_to_json(c.k)}, {case_key(T::V), dist_to_json(c.v)}};
  j["grads"] = json{{case_key(T::dO), dist_to_json(c.d_out)}, {case_key(T::dLSE), dist_to_json(c.d_lse)}};
  j["composition"] = to_json(c.composition);
  return j;
}

Case case_from_json(const json& j, const Limits& limits) {
  ObjectReader r(j, "");
  const std::string format = r.string("format");
  if (format != kCaseFormat) throw CaseError("format", "expected '" + std::string(kCaseFormat) + "', got '" + format + "'");
  Case c;
  c.seed = r.uinteger("seed");
  {
    ObjectReader s(r.get("shape"), "shape");
    c.shape.batch = s.integer("batch", 1);
    c.shape.heads_q = s.integer("heads_q");
    c.shape.heads_kv = s.integer("heads_kv", c.shape.heads_q);
    c.shape.seq_q = s.integer("seq_q");
    c.shape.seq_kv = s.integer("seq_kv", c.shape.seq_q);
    c.shape.head_dim_qk = s.integer("head_dim_qk");
    c.shape.head_dim_v = s.integer("head_dim_v", c.shape.head_dim_qk);
    s.finish();
  }
  try {
    c.dtype = dtype_from_string(r.string("dtype", "fp32"));
  } catch (const std::invalid_argument& e) {
    throw CaseError("dtype", e.what());
  }
  if (r.has("layout") && r.has("layouts")) throw CaseError("layouts", "give either 'layout' (one for every tensor) or 'layouts', not both");
  if (const json* l = r.maybe("layout")) {
    ObjectReader lr(*l, "layout");
    const std::string order = lr.string("order", "bhsd");
    if (order != "bhsd" && order != "bshd") throw CaseError("layout.order", "expected 'bhsd' or 'bshd'");
    TensorLayout one;
    one.order = order == "bshd" ? TensorLayout::Order::bshd : TensorLayout::Order::bhsd;
    one.row_padding = lr.integer("row_padding", 0);
    lr.finish();
    c.layouts = Layouts::uniform(one);
  }
  if (const json* l = r.maybe("layouts")) c.layouts = layouts_from(*l);
  c.scale = r.optional_number("scale");
  c.softcap = r.optional_number("softcap");
  if (const json* b = r.maybe("bias")) c.bias = bias_from(*b);
  if (const json* g = r.maybe("ragged")) c.ragged = ragged_from(*g);
  if (const json* m = r.maybe("mask")) c.mask = mask_from(*m, "mask", 0);
  // Each tensor's distribution, under its case key in "values" (Q, K, V) or "grads" (dO, dLSE).
  auto read_dists = [&](const char* key, std::initializer_list<std::pair<TensorId, ValueDist*>> tensors) {
    const json* d = r.maybe(key);
    if (!d) return;
    ObjectReader dr(*d, key);
    for (auto [t, dist] : tensors)
      if (const json* x = dr.maybe(case_key(t))) *dist = dist_from(*x, std::string(key) + "." + case_key(t), *dist);
    dr.finish();
  };
  read_dists("values", {{TensorId::Q, &c.q}, {TensorId::K, &c.k}, {TensorId::V, &c.v}});
  read_dists("grads", {{TensorId::dO, &c.d_out}, {TensorId::dLSE, &c.d_lse}});
  if (const json* comp = r.maybe("composition")) c.composition = composition_from(*comp, "composition", 0);
  r.finish();
  validate(c, limits);
  return c;
}

Case case_from_string(const std::string& text, const Limits& limits) {
  const json j = parse_strict_json(text);
  if (j.is_object() && j.contains("case")) {  // a reproducer: its case
    const auto f = j.find("format");
    if (f == j.end()) throw CaseError("format", "is required");
    if (!(f->is_string() && f->get<std::string>() == kCaseFormat)) return case_from_json(j.at("case"), limits);
  }
  return case_from_json(j, limits);
}

Case load_case_file(const std::string& path, const Limits& limits) { return case_from_string(read_input_file(path), limits); }

std::string write_case(const Case& c) { return to_json(c).dump(2) + "\n"; }

}  // namespace attnfuzz
