// Reference RoPE: frequency tables (default, linear, YaRN as in transformers 5's
// _compute_yarn_parameters: attention_factor, else mscale / mscale_all_dim ratio when both are
// set, else 0.1 ln(factor) + 1; inv_freq blended over the beta_fast..beta_slow correction range)
// and rotate-half application.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "backend/ref/ref.h"

namespace moeflux {

namespace {
double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}
double yarn_correction_dim(double n_rot, double dim, double base, double max_pos) {
  return dim * std::log(max_pos / (n_rot * 2.0 * M_PI)) / (2.0 * std::log(base));
}
}  // namespace

RopeTable make_rope_table(const RopeConfig& cfg, int64_t head_dim) {
  RopeTable t;
  t.rot_dim = int64_t(double(head_dim) * cfg.partial_rotary_factor);
  t.rot_dim -= t.rot_dim % 2;
  MF_ASSERT(t.rot_dim > 0);
  const int64_t half = t.rot_dim / 2;
  t.inv_freq.resize(size_t(half));
  const float base = float(cfg.theta);
  for (int64_t i = 0; i < half; ++i)  // f32 like torch: base ** (arange(0, d, 2) / d)
    t.inv_freq[i] = 1.0f / std::pow(base, float(2 * i) / float(t.rot_dim));
  if (cfg.type == "linear") {
    for (auto& f : t.inv_freq) f /= float(cfg.factor);
  } else if (cfg.type == "yarn") {
    const double factor = cfg.factor;
    if (cfg.attention_factor > 0) t.attn_factor = float(cfg.attention_factor);
    else if (cfg.mscale != 0 && cfg.mscale_all_dim != 0)
      t.attn_factor = float(yarn_get_mscale(factor, cfg.mscale) / yarn_get_mscale(factor, cfg.mscale_all_dim));
    else t.attn_factor = float(yarn_get_mscale(factor, 1.0));
    const double orig = double(cfg.original_max_position_embeddings);
    MF_ASSERT(orig > 0);
    double lo = yarn_correction_dim(cfg.beta_fast, double(t.rot_dim), cfg.theta, orig);
    double hi = yarn_correction_dim(cfg.beta_slow, double(t.rot_dim), cfg.theta, orig);
    if (cfg.truncate) lo = std::floor(lo), hi = std::ceil(hi);
    lo = std::max(lo, 0.0);
    hi = std::min(hi, double(t.rot_dim - 1));
    if (lo == hi) hi += 0.001;
    for (int64_t i = 0; i < half; ++i) {
      const float pos_freq = std::pow(base, float(2 * i) / float(t.rot_dim));
      const float extra = 1.0f / pos_freq, inter = 1.0f / (float(factor) * pos_freq);
      const float ramp = std::clamp(float((double(i) - lo) / (hi - lo)), 0.0f, 1.0f);
      const float extra_w = 1.0f - ramp;
      t.inv_freq[i] = inter * (1.0f - extra_w) + extra * extra_w;
    }
  }
  return t;
}

void rope_angles(const RopeTable& t, int64_t pos, float* cs) {
  const int64_t half = t.rot_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float ang = float(pos) * t.inv_freq[i];  // f32 product, as transformers
    cs[i] = std::cos(ang) * t.attn_factor;
    cs[half + i] = std::sin(ang) * t.attn_factor;
  }
}

void rope_apply(float* v, const RopeTable& t, const float* cs) {
  const int64_t half = t.rot_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float c = cs[i], s = cs[half + i];
    const float x1 = v[i], x2 = v[i + half];
    v[i] = x1 * c - x2 * s;
    v[i + half] = x2 * c + x1 * s;
  }
}

void rope_ref(float* v, const RopeTable& t, int64_t pos) {
  std::vector<float> cs(static_cast<size_t>(t.rot_dim));
  rope_angles(t, pos, cs.data());
  rope_apply(v, t, cs.data());
}

}  // namespace moeflux
