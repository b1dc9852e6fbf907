// CudaBackend's steps: the staging of a step's ids and positions, cache room, and the CUDA
// graphs of decode steps (recorded at the second step of a shape, replayed from the third).
#include "backend/cuda/check.cuh"
#include "backend/cuda/cuda_backend_impl.cuh"
#include "backend/cuda/gdn_state.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/kv_cache.cuh"
#include "backend/cuda/launch.cuh"

namespace moeflux {

using namespace cuda;

void CudaBackend::begin_step(const StepInfo& step) {
  in_step_ = true, mode_ = Mode::Eager, replay_ = nullptr;
  const size_t R = step.ids.size(), S = step.seqs.size();
  if (R + S > staging_cap_) {  // the graphs read the old buffers: they go too
    for (auto& [k, g] : graphs_) cudaGraphExecDestroy(g.exec), cudaFree(g.logits);
    graphs_.clear();
    cudaFreeHost(staging_);
    cudaFree(step_in_);
    staging_cap_ = std::max<size_t>(2 * (R + S), 4096);
    MF_CUDA(cudaHostAlloc(&staging_, staging_cap_ * sizeof(int32_t), cudaHostAllocDefault));
    MF_CUDA(cudaMalloc(&step_in_, staging_cap_ * sizeof(int32_t)));
  }
  std::copy(step.ids.begin(), step.ids.end(), staging_);
  step_rows_ = int64_t(R);
  step_seq_at_row_.clear();
  step_arm_ = -1, step_class_ = -1;
  if (opt_.moe_misses == MoeMisses::Auto && !opt_.expert_cache.empty() && int64_t(R) <= kAutoRows) {
    step_class_ = int64_t(R) <= kTierRows ? 0 : 1;
    step_misses0_ = tiers_.copied;
    if (auto_misses_[step_class_]) {
      step_arm_ = auto_arms_[step_class_].pick();
      step_t0_ = std::chrono::steady_clock::now();
    } else {
      ++auto_quiet_[step_class_];
    }
  }
  // profiling times each op; the split arm waits for the host's work
  step_graphable_ = !step.host_reads && !profiling_ && step_graphs_ && step_arm_ != 1;
  step_key_.assign({uintptr_t(R), uintptr_t(S), uintptr_t(wide_), uintptr_t(device_tables_), uintptr_t(tc_prefill_),
                    uintptr_t(flash_attention_)});
  for (size_t i = 0; i < S; ++i) {
    const StepSeq& q = step.seqs[i];
    staging_[R + i] = int32_t(q.pos0);
    step_seq_at_row_[q.row0] = int(i);
    step_graphable_ = step_graphable_ && q.rows == 1;
    // Every device state a recorded step reads or writes is part of its shape: a new
    // sequence's state may sit where an ended one's did for one kind and elsewhere for another.
    for (const auto& st : q.states)
      if (auto* kv = dynamic_cast<KvCacheDev*>(st.get())) {
        kv->reserve(q.pos0 + q.rows);  // no allocation or sync inside a recorded step
        step_key_.push_back(uintptr_t(kv->k()));
      } else if (auto* g = dynamic_cast<GdnStateDev*>(st.get())) {
        step_key_.push_back(uintptr_t(g->conv())), step_key_.push_back(uintptr_t(g->recurrent()));
      }
  }
  step_recordable_ = step_graphable_;
  if (step_graphable_) {
    if (auto it = graphs_.find(step_key_); it != graphs_.end()) {
      mode_ = Mode::Replay, replay_ = &it->second;
      // The graph copies the staging itself; it runs while the host walks the step's ops.
      MF_CUDA(cudaGraphLaunch(replay_->exec, stream_));
      return;
    }
    if (recordable_.count(step_key_)) {
      MF_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
      mode_ = Mode::Capture;
      overlap_launches() = true;  // until the capture ends
    }
  }
  MF_CUDA(cudaMemcpyAsync(step_in_, staging_, (R + S) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::end_step(bool ok) {
  if (!held_.empty()) {  // the host cache may not outlive the step; no throwing here
    cudaStreamSynchronize(stream_);
    try {
      release_layer();
    } catch (const Error&) {
      held_.clear();
    }
  }
  if (gpu_experts_) gpu_experts_->settle();
  if (ok) admit_routed();  // the step's logits were read: its work is done
  if (mode_ == Mode::Capture) {  // the step ended (or threw) before logits() ended the capture
    overlap_launches() = false;
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream_, &g);
    if (g) cudaGraphDestroy(g);
    recordable_.erase(step_key_);
  } else if (!ok) {
    recordable_.erase(step_key_);
  } else if (ok && mode_ == Mode::Eager && step_graphable_ && step_recordable_) {
    recordable_.insert(step_key_);
  }
  if (ok && step_class_ >= 0) {
    if (step_arm_ != 1) auto_misses_[step_class_] = tiers_.copied > step_misses0_;
    if (step_arm_ >= 0)
      auto_arms_[step_class_].record(
          step_arm_, std::chrono::duration<double>(std::chrono::steady_clock::now() - step_t0_).count(), step_rows_);
  }
  in_step_ = false, mode_ = Mode::Eager, replay_ = nullptr, step_arm_ = -1, step_class_ = -1;
}

const int32_t* CudaBackend::positions(std::span<const SeqRows> seqs, Scratch& sc) {
  if (in_step_) {  // the sequences of an op are the step's, in order
    const auto it = step_seq_at_row_.find(seqs[0].row0);
    MF_ASSERT(it != step_seq_at_row_.end());
    return step_in_ + step_rows_ + it->second;
  }
  std::vector<int32_t> pos(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) pos[i] = int32_t(seqs[i].pos0);
  int32_t* d = sc.get<int32_t>(pos.size());
  MF_CUDA(cudaMemcpyAsync(d, pos.data(), pos.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  MF_CUDA(cudaStreamSynchronize(stream_));  // pos is a temporary
  return d;
}

const float* CudaBackend::head_pass(const QWeight& head, Act x, float* y) {
  const size_t n = size_t(x.rows * head.rows);
  if (mode_ == Mode::Replay) {
    MF_ASSERT(replay_->logits_floats == n);  // the graph was launched by begin_step
    return replay_->logits;
  }
  if (mode_ == Mode::Capture) {
    StepGraph g;
    MF_CUDA(cudaMalloc(&g.logits, n * sizeof(float)));
    g.logits_floats = n;
    mm(dw(head), x.data, x.rows, g.logits);
    cudaGraph_t graph = nullptr;
    mode_ = Mode::Eager, overlap_launches() = false;  // the capture is over whatever happens next
    MF_CUDA(cudaStreamEndCapture(stream_, &graph));
    const cudaError_t e = cudaGraphInstantiate(&g.exec, graph, 0);
    cudaGraphDestroy(graph);
    MF_CUDA(e);
    auto& kept = graphs_[step_key_] = g;
    MF_CUDA(cudaGraphLaunch(kept.exec, stream_));
    return kept.logits;
  }
  mm(dw(head), x.data, x.rows, y);
  return y;
}

void CudaBackend::logits(const QWeight& head, Act x, float* logits) {
  const size_t n = size_t(x.rows * head.rows);
  const Stage st(*this, "lm_head");
  Scratch sc(*pool_);
  const float* y = head_pass(head, x, mode_ == Mode::Eager ? sc.get<float>(n) : nullptr);
  MF_CUDA(cudaMemcpyAsync(logits, y, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  MF_CUDA(cudaStreamSynchronize(stream_));
}

void CudaBackend::logits_top(const QWeight& head, Act x, int64_t n, int pass, float* vals, int32_t* ids) {
  MF_ASSERT(pass >= 0 && n >= 1 && n <= head.rows);
  const Stage st(*this, "lm_head");
  if (kept_.size() <= size_t(pass)) kept_.resize(size_t(pass) + 1);
  KeptPass& k = kept_[size_t(pass)];
  const size_t floats = size_t(x.rows * head.rows);
  if (mode_ == Mode::Eager && k.cap < floats) {
    cudaFree(k.own);
    k.own = nullptr, k.cap = 0;
    MF_CUDA(cudaMalloc(&k.own, floats * sizeof(float)));
    k.cap = floats;
  }
  k.logits = head_pass(head, x, k.own);
  k.rows = x.rows, k.cols = head.rows;
  if (n > kTopMax) {  // a long list: the whole rows to the host
    std::vector<float> all(floats);
    MF_CUDA(cudaMemcpyAsync(all.data(), k.logits, floats * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    MF_CUDA(cudaStreamSynchronize(stream_));
    for (int64_t r = 0; r < k.rows; ++r) top_logits_host(all.data() + r * k.cols, k.cols, n, vals + r * n, ids + r * n);
    return;
  }
  Scratch sc(*pool_);
  uint64_t* scratch = sc.get<uint64_t>(size_t(top_logits_scratch(k.rows, k.cols, n)));
  float* dv = sc.get<float>(size_t(k.rows * n));
  int32_t* di = sc.get<int32_t>(size_t(k.rows * n));
  top_logits(k.logits, k.rows, k.cols, n, scratch, dv, di, stream_);
  MF_CUDA(cudaMemcpyAsync(vals, dv, size_t(k.rows * n) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  MF_CUDA(cudaMemcpyAsync(ids, di, size_t(k.rows * n) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  MF_CUDA(cudaStreamSynchronize(stream_));
}

void CudaBackend::kept_logits(int pass, int64_t row, std::span<const int32_t> ids, float* out) {
  if (pass < 0 || size_t(pass) >= kept_.size() || !kept_[size_t(pass)].logits || row < 0 || row >= kept_[size_t(pass)].rows)
    fail("kept_logits: no row ", row, " of a kept head pass ", pass);
  const KeptPass& k = kept_[size_t(pass)];
  const float* r = k.logits + row * k.cols;
  if (ids.empty()) {
    MF_CUDA(cudaMemcpyAsync(out, r, size_t(k.cols) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    MF_CUDA(cudaStreamSynchronize(stream_));
    return;
  }
  for (int32_t id : ids)
    if (id < 0 || id >= k.cols) fail("kept_logits: token ", id, " outside the head's ", k.cols, " rows");
  Scratch sc(*pool_);
  int32_t* di = sc.get<int32_t>(ids.size());
  float* dv = sc.get<float>(ids.size());
  MF_CUDA(cudaMemcpyAsync(di, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  gather_logits(r, di, int64_t(ids.size()), dv, stream_);
  MF_CUDA(cudaMemcpyAsync(out, dv, ids.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  MF_CUDA(cudaStreamSynchronize(stream_));
}

}  // namespace moeflux
