// The io_uring I/O engine: one thread keeps up to `depth` record reads in flight through a
// ring (liburing), taking jobs from the cache as slots free up. Without liburing in the build
// start_uring_worker raises an Error.
#include "core/error.h"
#include "stream/expert_cache.h"

#ifdef MOEFLUX_HAVE_LIBURING
#include <liburing.h>

#include <cstring>
#include <thread>

namespace moeflux {

bool uring_available() { return true; }

namespace {

class UringWorker : public IoWorker {
 public:
  UringWorker(ExpertCache& c, int depth) : c_(c), depth_(depth), slots_(size_t(depth)) {
    const int r = io_uring_queue_init(unsigned(depth), &ring_, 0);
    if (r < 0) fail("io_uring: cannot set up a ring (", std::strerror(-r), "); use --io-engine pread");
    thread_ = std::thread([this] { loop(); });
  }
  // The cache has asked its workers to stop; the loop ends once its reads are done.
  ~UringWorker() override {
    thread_.join();
    io_uring_queue_exit(&ring_);
  }

 private:
  struct Slot {
    ReadJob job;
    uint64_t done = 0;
    std::shared_ptr<const int> fd;
    bool busy = false;
  };

  void fail_job(Slot& s, const std::string& why, bool invalidate) {
    if (invalidate) c_.files().invalidate(s.job.layer);
    s.busy = false;
    s.fd.reset();
    --inflight_;
    c_.finish_job(s.job, c_.files().describe_failure(s.job.layer, s.job.expert, why));
  }

  void submit(Slot& s) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    MF_ASSERT(sqe);
    io_uring_prep_read(sqe, *s.fd, s.job.dst + s.done, unsigned(s.job.size - s.done), s.job.offset + s.done);
    io_uring_sqe_set_data(sqe, &s);
  }

  void start(const ReadJob& job) {
    Slot* s = nullptr;
    for (auto& x : slots_)
      if (!x.busy) s = &x;
    MF_ASSERT(s);
    *s = Slot{job, 0, nullptr, true};
    ++inflight_;
    try {
      c_.files().check_fault(job.layer, job.expert);
      s->fd = c_.files().fd(job.layer);
    } catch (const std::exception& e) {
      return fail_job(*s, e.what(), false);
    }
    submit(*s);
  }

  void complete(io_uring_cqe* cqe) {
    Slot& s = *static_cast<Slot*>(io_uring_cqe_get_data(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    if (res < 0) return fail_job(s, std::string("read failed: ") + std::strerror(-res), true);
    s.done += uint64_t(res);
    if (s.done < s.job.size) {
      if (res == 0 || c_.files().direct())
        return fail_job(s, "file ends after " + std::to_string(s.job.offset + s.done) + " bytes (truncated?)", true);
      return submit(s);  // a short buffered read: ask for the rest
    }
    s.busy = false;
    s.fd.reset();
    --inflight_;
    c_.finish_job(s.job, "");
  }

  void loop() {
    for (;;) {
      ReadJob job;
      while (inflight_ < depth_ && c_.take_job(&job, inflight_ == 0)) start(job);
      if (inflight_ == 0) {
        if (!c_.take_job(&job, true)) return;  // stopping
        start(job);
        continue;
      }
      io_uring_submit(&ring_);
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec ts{0, 50'000};  // look for new jobs every 50 us while reads run
      const int r = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
      if (r == 0 && cqe) {
        complete(cqe);
        while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe) complete(cqe);
      }
    }
  }

  ExpertCache& c_;
  int depth_;
  int inflight_ = 0;
  std::vector<Slot> slots_;
  io_uring ring_{};
  std::thread thread_;
};

}  // namespace

std::unique_ptr<IoWorker> start_uring_worker(ExpertCache& cache, int depth) {
  return std::make_unique<UringWorker>(cache, depth);
}

}  // namespace moeflux

#else

namespace moeflux {
bool uring_available() { return false; }
std::unique_ptr<IoWorker> start_uring_worker(ExpertCache&, int) {
  fail("this build has no io_uring engine (built without liburing); use --io-engine pread");
}
}  // namespace moeflux

#endif
