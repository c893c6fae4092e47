// Memory for packed weights, allocated once when a plan is compiled (never on the run path).
// A buffer of kHugeBytes or more is mapped 2 MiB-aligned and advised as transparent huge pages
// (madvise(MADV_HUGEPAGE); Linux only, a no-op where THP is off): a weight matrix streamed cold
// from DRAM, its page-table entries evicted too, then costs one page walk per 2 MiB instead of
// one per 4 KiB (a 5 MB matrix: 3 instead of ~1250). Measured (docs/benchmarks.md,
// BM_sgemv_cold): MobileNetV2's classifier GEMV cold from DRAM, ~400 us on 4 KiB pages, ~260 on
// huge pages.
#pragma once
#include <cstddef>
#include <memory>

namespace jiffy::kernels {

constexpr size_t kHugeBytes = size_t(2) << 20;

// `bytes` zero-filled bytes, 64-byte aligned (at least 64); from `huge_from` bytes up, on a
// 2 MiB-aligned mapping advised as huge pages. Throws std::bad_alloc when out of memory. Shared
// by the packed weights (below) and the engine's tensors and arenas (core/tensor.cpp:
// aligned_buffer, from 1 MiB: a conv writing ~100 output rows of 4 KiB pages misses the TLB).
std::shared_ptr<unsigned char> alloc_zeroed(size_t bytes, size_t huge_from);

// `floats` zero-filled floats for packed weights, 64-byte aligned: alloc_zeroed from kHugeBytes;
// from kWeightSlabFrom up to kHugeBytes carved one after another out of shared 2 MiB huge-page
// slabs (Linux), so mid-sized matrices streamed cold get huge pages too without each rounding up
// to 2 MiB. Measured (docs/benchmarks.md "MobileNetV3"): its squeeze-and-excitation 1x1 convs
// (0.9 MB GEMV weights, cold from DRAM in the model) ~55 us on 4 KiB pages, ~30 on huge pages.
constexpr size_t kWeightSlabFrom = size_t(64) << 10;
std::shared_ptr<float> alloc_weights(size_t floats);

}  // namespace jiffy::kernels
