// Integrity checks at load (docs/pack-format.md): the dense tensors of a pack, and the expert
// records of a pack copied into memory, recomputed against the manifest's checksums on
// several threads as the bytes are first read. The first mismatch (in manifest order) raises
// an Error naming the pack, the tensor or layer/expert, the file and the byte offset.
// `moeflux verify` (pack_verify.h) lists every mismatch instead.
#pragma once
#include "format/pack_store.h"

namespace moeflux {

// Every dense tensor of dense.bin (mapped or resident).
void check_dense_tensors(const PackStore& pack);
// Every expert record of every layer file (meant for resident copies: on a mapped pack this
// reads every expert byte).
void check_expert_records(const PackStore& pack);

}  // namespace moeflux
