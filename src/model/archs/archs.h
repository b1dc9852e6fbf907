// The architecture table: model_type -> builder that fills a Model's layers from weights.
// Each architecture lives in its own file; add it here and in archs.cpp.
#pragma once
#include "model/model.h"
#include "model/weight_loader.h"

namespace moeflux {

using ArchBuilder = void (*)(Model& m, const WeightLoader& w);

void build_qwen3_moe(Model& m, const WeightLoader& w);
void build_mixtral(Model& m, const WeightLoader& w);
void build_qwen3_next(Model& m, const WeightLoader& w);
void build_qwen3_5_moe_text(Model& m, const WeightLoader& w);
void build_deepseek_v3(Model& m, const WeightLoader& w);

// nullptr when unknown.
ArchBuilder find_arch(const std::string& model_type);

}  // namespace moeflux
