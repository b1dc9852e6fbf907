// Activations as the backends see them: a (rows, cols) f32 matrix on a device. Backends
// allocate them (Backend::alloc) and read or write them only through their own ops; the host
// reads a device's activations through Backend::to_host.
#pragma once
#include <cstddef>
#include <cstdint>

namespace moeflux {

enum class Device : uint8_t { Host, Cuda };
const char* device_name(Device d);  // "host", "cuda"

// A view of rows x cols floats, row-major with rows `cols` apart, in `device`'s memory.
struct Act {
  float* data = nullptr;
  int64_t rows = 0, cols = 0;
  Device device = Device::Host;

  float* row(int64_t r) const { return data + r * cols; }
  size_t size() const { return size_t(rows * cols); }
  // Rows [r0, r0 + n).
  Act rows_at(int64_t r0, int64_t n) const { return Act{row(r0), n, cols, device}; }
};

// Memory for activations, owned by the backend that allocated it.
class ActBuffer {
 public:
  virtual ~ActBuffer() = default;
  // The first rows * cols floats as a matrix. PRECOND: rows * cols <= capacity().
  Act view(int64_t rows, int64_t cols) const { return Act{data_, rows, cols, device_}; }
  size_t capacity() const { return floats_; }
  Device device() const { return device_; }

 protected:
  ActBuffer(float* data, size_t floats, Device d) : data_(data), floats_(floats), device_(d) {}
  float* data_;
  size_t floats_;
  Device device_;
};

}  // namespace moeflux
