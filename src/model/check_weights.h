// Completeness of a checkpoint or pack against its architecture: the architecture's own
// builder runs over the tensors (views only; norms and other small vectors are read), so every
// tensor it needs is checked for presence, dtype and the shape config.json implies, with the
// loader's messages. Used by convert before it writes anything and by verify.
#pragma once
#include <string>

#include "format/config.h"
#include "format/tensor_store.h"

namespace moeflux {

// Error naming the first missing or misshapen tensor, an inconsistent config.json field, or
// an unknown model_type.
void check_model_weights(const TensorStore& store, const ModelConfig& cfg);

}  // namespace moeflux
