// Checkpoint -> pack conversion (see convert.h): classification by name, then dense tensors
// in source order, then one record per expert, layer by layer.
#include "convert/convert.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "convert/dst_guard.h"
#include "convert/interrupt.h"
#include "convert/pack_writer.h"
#include "convert/progress.h"
#include "convert/side_files.h"
#include "core/error.h"
#include "format/pack_store.h"
#include "format/tensor_store.h"
#include "model/check_weights.h"

namespace moeflux {

namespace fs = std::filesystem;

Target parse_target(const std::string& s, int group, const std::string& option) {
  if (group != 32 && group != 64 && group != 128) fail("--group-size: ", group, " is not 32, 64 or 128");
  Target t;
  t.group_size = group;
  if (s == "2" || s == "3" || s == "4" || s == "5" || s == "6" || s == "8") {
    t.kind = Target::Kind::Affine;
    t.bits = s[0] - '0';
  } else if (s == "16" || s == "bf16") {
    t.kind = Target::Kind::Bf16;
  } else if (s == "fp8") {
    t.kind = Target::Kind::Fp8;
  } else {
    fail(option, ": '", s, "' is not one of 2, 3, 4, 5, 6, 8, 16, fp8");
  }
  return t;
}

namespace {

class CheckpointSource : public ConvertSource {
 public:
  explicit CheckpointSource(const std::string& dir) : dir_(dir) {
    if (is_pack_dir(dir)) fail(dir, ": is already a pack (manifest.json); convert takes a checkpoint");
    cfg_ = load_model_config(dir);
    store_ = TensorStore::open_dir(dir);
    try {
      check_model_weights(*store_, cfg_);
    } catch (const Error& e) {
      fail(dir, ": not a valid ", cfg_.arch, " checkpoint (nothing written): ", e.what());
    }
    std::vector<const TensorInfo*> infos;
    for (const auto& n : store_->names()) infos.push_back(&store_->get(n));
    std::sort(infos.begin(), infos.end(), [](auto* a, auto* b) {
      return a->file != b->file ? a->file < b->file : a->offset < b->offset;
    });
    for (auto* i : infos) {
      tensors_.push_back(SrcTensor{i->name, i->dtype, i->shape, i->nbytes});
      if (i->name.find(".switch_mlp.") != std::string::npos) mlx_ = true;
    }
    if (cfg_.quant.kind == QuantConfig::Kind::Affine) mlx_ = true;
  }
  const ModelConfig& config() const override { return cfg_; }
  std::string layout() const override { return mlx_ ? "mlx" : "hf"; }
  const std::vector<SrcTensor>& tensors() const override { return tensors_; }
  const uint8_t* acquire(const std::string& name) override { return store_->get(name).data; }
  void release(const std::string& name) override {
    const TensorInfo& t = store_->get(name);
    drop_mapped_pages(t.data, t.nbytes);
  }
  bool file_backed() const override { return true; }
  std::string dir() const override { return dir_; }

 private:
  std::string dir_;
  ModelConfig cfg_;
  std::unique_ptr<TensorStore> store_;
  std::vector<SrcTensor> tensors_;
  bool mlx_ = false;
};

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// A linear (weight + companions) or a single other tensor.
struct Item {
  std::string name;  // module name of a linear; tensor name otherwise
  bool linear = false;
  const SrcTensor *w = nullptr, *s = nullptr, *b = nullptr, *si = nullptr, *raw = nullptr;
  bool expert = false, stacked = false;
  size_t e = 0;
  int64_t layer = -1;
  std::string prefix, rel;  // experts: MoE module and the name inside the expert
  std::vector<const SrcTensor*> all() const {
    std::vector<const SrcTensor*> v;
    for (auto* t : {w, s, b, si, raw})
      if (t) v.push_back(t);
    return v;
  }
};

int64_t layer_of(const std::string& prefix) {
  const size_t p = prefix.rfind("layers.");
  if (p == std::string::npos) return -1;
  size_t i = p + 7, j = i;
  while (j < prefix.size() && isdigit(static_cast<unsigned char>(prefix[j]))) ++j;
  if (j == i || j - i > 6 || (j < prefix.size() && prefix[j] != '.')) return -1;
  return std::stoll(prefix.substr(i, j - i));
}

// Sets the expert fields of `it` when its name matches a per-expert or stacked pattern.
void classify_expert(Item& it) {
  const std::string& n = it.name;
  if (size_t p = n.find(".experts."); p != std::string::npos) {
    size_t i = p + 9, j = i;
    while (j < n.size() && isdigit(static_cast<unsigned char>(n[j]))) ++j;
    if (j > i && j - i <= 7 && j < n.size() && n[j] == '.') {
      it.expert = true;
      it.prefix = n.substr(0, p);
      it.e = std::stoul(n.substr(i, j - i));
      it.rel = n.substr(j + 1);
    }
  } else if (size_t q = n.find(".switch_mlp."); q != std::string::npos) {
    it.expert = it.stacked = true;
    it.prefix = n.substr(0, q);
    it.rel = n.substr(q + 12);
  }
  if (it.expert) {
    it.layer = layer_of(it.prefix);
    if (it.layer < 0) fail("tensor '", n, "': expert tensors must live under 'layers.N.'");
  }
}

Item raw_item(const SrcTensor* t) {
  Item it;
  it.name = t->name;
  it.raw = t;
  return it;
}

std::vector<Item> classify(const std::vector<SrcTensor>& tensors) {
  std::map<std::string, Item> modules;
  std::vector<std::string> order;
  std::vector<Item> raws;
  for (const auto& t : tensors) {
    const SrcTensor** slot = nullptr;
    std::string mod;
    for (auto [suf, which] : {std::pair{".weight_scale_inv", 3}, {".scales", 1}, {".biases", 2}, {".weight", 0}}) {
      if (!ends_with(t.name, suf)) continue;
      mod = t.name.substr(0, t.name.size() - std::string(suf).size());
      Item& m = modules[mod];
      if (m.name.empty()) m.name = mod, order.push_back(mod);
      slot = which == 0 ? &m.w : which == 1 ? &m.s : which == 2 ? &m.b : &m.si;
      break;
    }
    if (slot) *slot = &t;
    else raws.push_back(raw_item(&t));
  }
  std::vector<Item> items;
  for (const auto& mod : order) {
    Item m = modules[mod];
    const bool stacked_name = mod.find(".switch_mlp.") != std::string::npos;
    if (m.s && !m.b) fail("tensor '", mod, ".scales' has no '", mod, ".biases'");
    if (m.w) {
      const size_t nd = m.w->shape.size();
      m.linear = m.s || m.si ||
                 (dtype_is_float(m.w->dtype) && (nd == 2 || (nd == 3 && stacked_name)));
    }
    if (m.linear) {
      items.push_back(m);
    } else {
      for (auto* t : m.all()) items.push_back(raw_item(t));
    }
  }
  items.insert(items.end(), raws.begin(), raws.end());
  for (auto& it : items) {
    classify_expert(it);
    if (it.stacked && !it.linear) fail("tensor '", it.name, "': stacked non-linear expert tensors are not supported");
  }
  return items;
}

bool is_router(const std::string& module) {
  return ends_with(module, ".gate") || ends_with(module, "shared_expert_gate");
}

struct Converter {
  ConvertSource& src;
  const ConvertOptions& opt;
  PackWriter& out;
  Progress& progress;
  ConvertStats& stats;
  std::set<std::string> notes;

  Target target_for(const std::string& module, const QWeight& w, bool expert) {
    if (is_router(module)) return Target{};
    Target t = expert && opt.expert_bits_set ? opt.expert_bits : opt.bits;
    // Default: a quantised checkpoint keeps every tensor as it is (its float linears were left
    // unquantised on purpose, e.g. DeepSeek FP8's embeddings); a float one becomes 4-bit.
    if (t.kind == Target::Kind::Keep && src.config().quant.kind == QuantConfig::Kind::None)
      t = Target{Target::Kind::Affine, 4, opt.bits.group_size};
    if (!target_fits(t, w.cols)) {
      const std::string note = "note: '" + module + "' (" + std::to_string(w.cols) + " inputs) cannot be " +
                               t.describe() + "; kept as source";
      if (notes.insert(note).second && !opt.quiet) std::fprintf(stderr, "%s\n", note.c_str());
      return Target{};
    }
    return t;
  }

  LinearSrc linear_src(const Item& it) {
    LinearSrc l;
    l.module = it.name;
    l.wdtype = it.w->dtype;
    l.wshape = it.w->shape;
    l.w = src.acquire(it.w->name);
    l.wbytes = it.w->nbytes;
    if (it.s) {
      l.scales = src.acquire(it.s->name), l.biases = src.acquire(it.b->name);
      l.sdtype = it.s->dtype, l.sbytes = it.s->nbytes;
      if (it.b->dtype != it.s->dtype || it.b->nbytes != it.s->nbytes)
        fail("'", it.name, "': scales and biases differ in dtype or size");
    } else if (it.si) {
      l.scale_inv = src.acquire(it.si->name);
      l.sdtype = it.si->dtype, l.sbytes = it.si->nbytes;
    }
    return l;
  }

  void release(const Item& it, bool count) {
    for (auto* t : it.all()) {
      src.release(t->name);
      if (count) progress.add(t->nbytes);
    }
  }

  void dense(const Item& it) {
    throw_if_interrupted();
    if (!it.linear) {
      OutPart p;
      p.dtype = it.raw->dtype;
      p.shape = it.raw->shape;
      p.nbytes = it.raw->nbytes;
      p.data = src.acquire(it.raw->name);
      out.add_dense(it.name, p, src.file_backed());
      ++stats.n_dense;
    } else {
      const QWeight w = view_linear(linear_src(it), src.config(), -1, 0);
      auto parts = encode_linear(w, target_for(it.name, w, false), src.file_backed());
      for (const auto& p : parts) {
        out.add_dense(it.name + p.suffix, p, src.file_backed() && p.owned.empty());
        ++stats.n_dense;
      }
    }
    release(it, true);
  }

  void layer(int64_t L, const std::vector<const Item*>& items) {
    const std::string& prefix = items.front()->prefix;
    size_t n = 0;
    std::map<const Item*, LinearSrc> stacked;
    for (auto* it : items) {
      if (it->prefix != prefix) fail("layer ", L, " has two expert sets: '", prefix, "' and '", it->prefix, "'");
      if (it->stacked) {
        const size_t ne = size_t(it->w->shape.at(0));
        if (n && ne != n) fail("'", it->name, "' stacks ", ne, " experts, other tensors of layer ", L, " ", n);
        n = ne;
        stacked[it] = linear_src(*it);
      }
    }
    if (!stacked.empty()) {
      for (auto* it : items)
        if (!it->stacked && it->e >= n) fail("'", it->name, "': expert ", it->e, " beyond the ", n, " stacked experts");
    } else {
      for (auto* it : items) n = std::max(n, it->e + 1);
    }
    std::vector<std::vector<const Item*>> per(n);
    for (auto* it : items)
      if (!it->stacked) per[it->e].push_back(it);
    for (size_t e = 0; e < n; ++e) {
      std::vector<std::pair<std::string, const Item*>> members;
      for (auto* it : items)
        if (it->stacked) members.push_back({it->rel, it});
      for (auto* it : per[e]) members.push_back({it->rel, it});
      if (members.empty()) fail("layer ", L, " ('", prefix, "'): expert ", e, " has no tensors");
      std::sort(members.begin(), members.end(), [](auto& a, auto& b) { return a.first < b.first; });
      std::vector<std::vector<OutPart>> keep_alive;
      std::vector<OutPart> raws;
      raws.reserve(members.size());
      keep_alive.reserve(members.size());
      std::vector<RecordPart> parts;
      std::vector<std::string> names;
      for (auto& [rel, it] : members) {
        if (!it->linear) {
          OutPart p;
          p.dtype = it->raw->dtype, p.shape = it->raw->shape, p.nbytes = it->raw->nbytes;
          p.data = src.acquire(it->raw->name);
          raws.push_back(std::move(p));
          parts.push_back(RecordPart{rel, &raws.back()});
          continue;
        }
        const LinearSrc ls = it->stacked ? stacked[it] : linear_src(*it);
        const QWeight w = view_linear(ls, src.config(), it->stacked ? int64_t(e) : -1, int64_t(n));
        const std::string module = expert_module(prefix, e, rel);
        keep_alive.push_back(encode_linear(w, target_for(module, w, true)));
        for (const auto& p : keep_alive.back()) parts.push_back(RecordPart{rel + p.suffix, &p});
      }
      throw_if_interrupted();
      out.add_record(L, prefix, e, parts);
      ++stats.n_records;
      for (auto* it : per[e]) release(*it, true);
      for (auto* it : items)
        if (it->stacked)
          for (auto* t : it->all()) progress.add(t->nbytes / n);
    }
    for (auto& [it, ls] : stacked) release(*it, false);
  }

  static std::string expert_module(const std::string& prefix, size_t e, const std::string& rel) {
    return prefix + ".experts." + std::to_string(e) + "." + rel;
  }
};

}  // namespace

std::unique_ptr<ConvertSource> open_checkpoint_source(const std::string& dir) {
  return std::make_unique<CheckpointSource>(dir);
}

namespace {

// Checks the pack written into `tmp` the way verify does (so a writer bug never reaches DST),
// then copies the side files.
void finish_pack_dir(const ConvertSource& src, const std::string& tmp) {
  try {
    auto pack = PackStore::open(tmp);
    check_model_weights(*pack, pack->model_config());
  } catch (const Error& e) {
    fail("the written pack is incomplete (a converter bug; nothing kept): ", e.what());
  }
  if (!src.dir().empty()) copy_side_files(src.dir(), tmp);
}

// Replaces the pack at `dst` (checked again: it may have changed during the conversion) by
// `tmp`: the old pack is moved aside first and moved back if the new one cannot take its place.
void replace_pack(const std::string& tmp, const std::string& dst) {
  check_replaceable_pack(dst);
  std::string old = dst + ".old-XXXXXX";
  if (!::mkdtemp(old.data())) fail(dst, ": cannot create a directory next to it: ", std::strerror(errno));
  const std::string aside = old + "/pack";
  fs::rename(dst, aside);
  try {
    fs::rename(tmp, dst);
  } catch (...) {
    std::error_code ec;
    fs::rename(aside, dst, ec);
    fs::remove(old, ec);
    throw;
  }
  std::error_code ec;
  if (fs::remove_all(old, ec) == static_cast<std::uintmax_t>(-1) || ec)
    std::fprintf(stderr, "warning: %s: the replaced pack could not be removed (%s); delete it with: rm -r '%s'\n",
                 old.c_str(), ec.message().c_str(), old.c_str());
}

ConvertStats convert_to_pack_dir(ConvertSource& src, const std::string& dst_in, const ConvertOptions& opt) {
  std::string dst = dst_in;
  while (dst.size() > 1 && dst.back() == '/') dst.pop_back();
  const DstState state = check_destination(src.dir(), dst, opt.force);
  for (const auto& d : stale_temp_dirs(dst))
    std::fprintf(stderr,
                 "warning: %s: temporary directory of an interrupted convert (or one still running); "
                 "not removed: if no convert is running, delete it with: rm -r '%s'\n",
                 d.c_str(), d.c_str());
  if (!src.dir().empty() && !has_tokenizer(src.dir()))
    std::fprintf(stderr,
                 "warning: %s has no tokenizer.json: the pack will need `--tokenizer DIR` to run "
                 "(copy the tokenizer files into the checkpoint and convert again to make it self-contained)\n",
                 src.dir().c_str());
  InterruptGuard guard;  // before the temporary directory exists: a signal now only sets a flag
  std::string tmpl = dst + ".tmp-XXXXXX";
  if (!::mkdtemp(tmpl.data())) fail(dst, ": cannot create a temporary directory next to it: ", std::strerror(errno));
  const std::string tmp = tmpl;
  ConvertStats stats;
  try {
    fs::create_directory(fs::path(tmp) / "experts");
    const auto items = classify(src.tensors());
    for (const auto& t : src.tensors()) stats.source_bytes += t.nbytes;
    Progress progress("convert", stats.source_bytes, opt.quiet);
    PackWriter out(tmp);
    Converter c{src, opt, out, progress, stats, {}};
    std::map<int64_t, std::vector<const Item*>> layers;
    for (const auto& it : items) {
      if (it.expert) layers[it.layer].push_back(&it);
      else c.dense(it);
    }
    for (const auto& [L, its] : layers) c.layer(L, its);
    stats.dense_bytes = out.dense_bytes();
    PackManifest m;
    m.architecture = src.config().arch;
    m.config = src.config().raw;
    m.source_layout = src.layout();
    out.finish(std::move(m));
    progress.finish();
    stats.seconds = progress.seconds();
    for (const auto& e : fs::directory_iterator(fs::path(tmp) / "experts")) stats.expert_bytes += e.file_size();
    finish_pack_dir(src, tmp);
    throw_if_interrupted();
    if (state == DstState::Pack) replace_pack(tmp, dst);
    else fs::rename(tmp, dst);  // an empty directory is replaced; anything else makes rename fail
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return stats;
}

}  // namespace

ConvertStats convert_to_pack(ConvertSource& src, const std::string& dst, const ConvertOptions& opt) {
  try {
    return convert_to_pack_dir(src, dst, opt);
  } catch (const fs::filesystem_error& e) {  // an I/O failure is an error message, not an abort
    fail(dst, ": ", e.what());
  }
}

}  // namespace moeflux
