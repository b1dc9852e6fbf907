// Opens the region of an ISA kernel file (kernels_avx2.cpp, kernels_avx2_int.cpp,
// attend_avx2.cpp, kernels_avx512.cpp, kernels_avx512_vnni.cpp, attend_avx512.cpp): saves the
// diagnostic and option state, which the file restores with `#pragma GCC pop_options` and `#pragma GCC
// diagnostic pop` at its end, after it set its own `#pragma GCC target(...)`. g++ 12 flags the intrinsics headers' deliberately undefined vectors
// (_mm512_undefined_*) once they are inlined in such a region.
// NOLINT(build/header_guard): a pragma prologue, included once per kernel file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC push_options
