// bench --profile on the CUDA backend: device time per stage from events around each op.
#include "backend/cuda/check.cuh"
#include "backend/cuda/cuda_backend_impl.cuh"

namespace moeflux {

using namespace cuda;

cudaEvent_t CudaBackend::event() {
  if (events_.empty()) {
    cudaEvent_t e = nullptr;
    MF_CUDA(cudaEventCreate(&e));
    return e;
  }
  cudaEvent_t e = events_.back();
  events_.pop_back();
  return e;
}

CudaBackend::Stage::Stage(CudaBackend& b, const char* stage) : b_(b), stage_(stage) {
  if (!b_.profiling_) return;
  start_ = b_.event();
  MF_CUDA(cudaEventRecord(start_, b_.stream_));
}

CudaBackend::Stage::~Stage() {
  if (!start_) return;
  cudaEvent_t end = b_.event();
  cudaEventRecord(end, b_.stream_);
  b_.timed_.push_back({stage_, start_, end});
}

void CudaBackend::set_stage_profiling(bool on) {
  if (on && !profiling_) launches_at_ = launch_count();
  profiling_ = on;
}

Backend::StageTimes CudaBackend::stage_times() {
  MF_CUDA(cudaStreamSynchronize(stream_));
  for (const Timed& t : timed_) {
    float ms = 0;
    MF_CUDA(cudaEventElapsedTime(&ms, t.start, t.end));
    auto it = std::find_if(stage_s_.begin(), stage_s_.end(), [&](const auto& p) { return p.first == t.stage; });
    if (it == stage_s_.end()) it = stage_s_.insert(stage_s_.end(), {t.stage, 0.0});
    it->second += ms / 1e3;
    events_.push_back(t.start), events_.push_back(t.end);
  }
  timed_.clear();
  StageTimes st;
  st.seconds = std::move(stage_s_);
  stage_s_.clear();
  st.launches = launch_count() - launches_at_;
  launches_at_ = launch_count();
  return st;
}

}  // namespace moeflux
