// Expert records on the device: how far an expert's views reach into its record, and its
// weights' device views once the record's bytes are on the device.
#pragma once
#include <algorithm>

#include "backend/blocks.h"
#include "backend/cuda/cuda_backend_impl.cuh"

namespace moeflux::cuda {

// The bytes of an expert's record its views reach, from `base`.
inline size_t record_extent(const SwiGlu& s, const uint8_t* base) {
  size_t end = 0;
  for (const QWeight* w : {&s.gate, &s.up, &s.down}) {
    end = std::max(end, size_t(w->data - base) + w->data_bytes());
    const size_t sb = scale_bytes(*w);
    for (const uint8_t* p : {w->scales, w->biases, w->block_scales})
      if (p) end = std::max(end, size_t(p - base) + sb);
  }
  return end;
}

// proto (a view of w's shape) with w's pointers, already on the device.
inline DW on_device(DW proto, const QWeight& w) {
  proto.data = w.data;
  proto.scales = w.format == WFormat::Fp8Block ? w.block_scales : w.scales;
  proto.biases = w.biases;
  return proto;
}

}  // namespace moeflux::cuda
