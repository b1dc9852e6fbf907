// Shape-checked QWeight views over checkpoint tensors.
#include "model/weight_loader.h"

#include <algorithm>

#include "core/error.h"

namespace moeflux {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

void expect_shape(const TensorInfo& t, const std::vector<int64_t>& want) {
  if (t.shape != want)
    fail(t.file, ": tensor '", t.name, "' has shape ", t.shape_str(), ", expected ", shape_str(want),
         " from config.json");
}

std::vector<int64_t> stacked(int64_t n, std::vector<int64_t> s) {
  if (n > 0) s.insert(s.begin(), n);
  return s;
}

}  // namespace

QWeight WeightLoader::load(const std::string& module, int64_t n_stack, int64_t rows, int64_t cols,
                           size_t* data_stride, size_t* scale_stride) const {
  const TensorInfo& w = store_.get(module + ".weight");
  QWeight q;
  q.rows = rows;
  q.cols = cols;
  q.data = w.data;
  const TensorInfo* scales = store_.find(module + ".scales");
  const TensorInfo* scale_inv = store_.find(module + ".weight_scale_inv");
  if (scales) {
    q.format = WFormat::Affine;
    q.dtype = DType::U32;
    if (w.dtype != DType::U32) fail(w.file, ": quantised tensor '", w.name, "' must be U32, is ", dtype_name(w.dtype));
    const TensorInfo& biases = store_.get(module + ".biases");
    QuantSpec spec = cfg_.quant.for_module(module);
    if (spec.bits == 0) {
      if (cfg_.quant.kind != QuantConfig::Kind::Affine)
        fail(cfg_.path, ": tensor '", w.name, "' is quantised but config.json has no 'quantization'");
      fail(cfg_.path, ": 'quantization' marks '", module, "' unquantised but the checkpoint has scales");
    }
    if (w.shape.empty() || (w.shape.back() * 32) % spec.bits != 0 ||
        w.shape.back() * 32 / spec.bits != cols)
      fail(w.file, ": tensor '", w.name, "' ", w.shape_str(), " does not hold ", cols, " inputs at ",
           spec.bits, " bits (config.json 'quantization')");
    if (cols % spec.group_size != 0)
      fail(w.file, ": tensor '", w.name, "': ", cols, " inputs are not a multiple of group_size ", spec.group_size);
    expect_shape(w, stacked(n_stack, {rows, cols * spec.bits / 32}));
    expect_shape(*scales, stacked(n_stack, {rows, cols / spec.group_size}));
    expect_shape(biases, stacked(n_stack, {rows, cols / spec.group_size}));
    if (!dtype_is_float(scales->dtype) || scales->dtype != biases.dtype)
      fail(w.file, ": scales/biases of '", module, "' must share one float dtype");
    q.bits = spec.bits;
    q.group_size = spec.group_size;
    q.sdtype = scales->dtype;
    q.scales = scales->data;
    q.biases = biases.data;
    if (scale_stride) *scale_stride = size_t(rows * (cols / spec.group_size)) * dtype_size(q.sdtype);
  } else if (w.dtype == DType::F8_E4M3) {
    if (!scale_inv) fail(w.file, ": FP8 tensor '", w.name, "' has no '", module, ".weight_scale_inv'");
    q.format = WFormat::Fp8Block;
    q.dtype = DType::F8_E4M3;
    q.block_rows = cfg_.quant.fp8_block_rows;
    q.block_cols = cfg_.quant.fp8_block_cols;
    expect_shape(w, stacked(n_stack, {rows, cols}));
    const int64_t br = (rows + q.block_rows - 1) / q.block_rows, bc = (cols + q.block_cols - 1) / q.block_cols;
    expect_shape(*scale_inv, stacked(n_stack, {br, bc}));
    if (!dtype_is_float(scale_inv->dtype) || scale_inv->dtype == DType::F8_E4M3)
      fail(scale_inv->file, ": '", scale_inv->name, "' must be F32, BF16 or F16");
    q.sdtype = scale_inv->dtype;
    q.block_scales = scale_inv->data;
    if (scale_stride) *scale_stride = size_t(br * bc) * dtype_size(q.sdtype);
  } else {
    if (!dtype_is_float(w.dtype) || w.dtype == DType::F64)
      fail(w.file, ": tensor '", w.name, "' has dtype ", dtype_name(w.dtype), "; expected F32, F16 or BF16");
    q.format = WFormat::Dense;
    q.dtype = w.dtype;
    expect_shape(w, stacked(n_stack, {rows, cols}));
    if (scale_stride) *scale_stride = 0;
  }
  if (data_stride) *data_stride = q.data_bytes();
  if (be_) prepare(q, std::max<int64_t>(1, n_stack));
  return q;
}

void WeightLoader::prepare(QWeight& q, int64_t n_stack) const {
  const bool first = !prepared_.count(q.data);
  if (be_->prepare_weight(q, n_stack, first) && first) prepared_.insert(q.data);
}

QWeight WeightLoader::linear(const std::string& module, int64_t rows, int64_t cols) const {
  return load(module, 0, rows, cols, nullptr, nullptr);
}

std::vector<float> WeightLoader::tensor_f32(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorInfo& t = store_.get(name);
  expect_shape(t, shape);
  if (!dtype_is_float(t.dtype))
    fail(t.file, ": tensor '", name, "' must be a float tensor, is ", dtype_name(t.dtype));
  std::vector<float> v(size_t(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_f32(t.dtype, t.data, i);
  return v;
}

std::vector<float> WeightLoader::vec(const std::string& name, int64_t n) const {
  return tensor_f32(name, {n});
}

std::vector<QWeight> WeightLoader::expert_linears(const std::string& moe, const std::string& proj,
                                                  int64_t n_experts, int64_t rows, int64_t cols) const {
  std::vector<QWeight> out;
  const std::string per0 = moe + ".experts.0." + proj;
  const std::string stack = moe + ".switch_mlp." + proj;
  if (store_.has(per0 + ".weight")) {
    for (int64_t e = 0; e < n_experts; ++e)
      out.push_back(load(moe + ".experts." + std::to_string(e) + "." + proj, 0, rows, cols, nullptr, nullptr));
  } else if (store_.has(stack + ".weight")) {
    size_t ds = 0, ss = 0;
    QWeight base = load(stack, n_experts, rows, cols, &ds, &ss);
    for (int64_t e = 0; e < n_experts; ++e) {
      QWeight q = base;
      q.data += size_t(e) * ds;
      if (q.scales) q.scales += size_t(e) * ss, q.biases += size_t(e) * ss;
      if (q.block_scales) q.block_scales += size_t(e) * ss;
      out.push_back(q);
    }
  } else {
    fail(store_.dir(), ": missing experts: neither '", per0, ".weight' nor '", stack, ".weight'");
  }
  return out;
}

}  // namespace moeflux
