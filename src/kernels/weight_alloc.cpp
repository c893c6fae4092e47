#include "kernels/weight_alloc.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace jiffy::kernels {

namespace {

constexpr size_t kPage = 4096;

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

#if defined(__linux__)
// An anonymous mapping of `len` bytes starting on a 2 MiB boundary: over-map by 2 MiB, then
// unmap the unaligned head and the tail, so the mapping holds exactly [start, start + len) and
// every whole 2 MiB stretch in it can be backed by one huge page (the rest by 4 KiB pages).
float* map_huge(size_t len) {
    void* raw = mmap(nullptr, len + kHugeBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const uintptr_t r = reinterpret_cast<uintptr_t>(raw), a = round_up(r, kHugeBytes);
    if (a > r) munmap(raw, a - r);
    const uintptr_t end = r + len + kHugeBytes;
    if (end > a + len) munmap(reinterpret_cast<void*>(a + len), end - (a + len));
    madvise(reinterpret_cast<void*>(a), len, MADV_HUGEPAGE);  // advice only: failure is harmless
    return reinterpret_cast<float*>(a);                           // anonymous pages read as zero
}
#endif

}  // namespace

std::shared_ptr<unsigned char> alloc_zeroed(size_t bytes, size_t huge_from) {
    bytes = round_up(std::max<size_t>(bytes, 1), 64);
#if defined(__linux__)
    if (bytes >= huge_from) {
        // Whole 2 MiB pages: a 1.5 MiB buffer would otherwise hold no huge page at all.
        const size_t len = round_up(bytes, kHugeBytes);
        if (float* p = map_huge(len)) {
            std::memset(p, 0, len);  // fault every page in now: never on the first run
            return std::shared_ptr<unsigned char>(reinterpret_cast<unsigned char*>(p),
                                                  [len](unsigned char* q) { munmap(q, len); });
        }
    }
#else
    (void)huge_from;
#endif
    auto* p = static_cast<unsigned char*>(std::aligned_alloc(64, bytes));
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    return std::shared_ptr<unsigned char>(p, [](unsigned char* q) { std::free(q); });
}

std::shared_ptr<float> alloc_weights(size_t floats) {
    const size_t bytes = round_up(std::max<size_t>(floats * sizeof(float), 1), 64);
#if defined(__linux__)
    if (bytes >= kWeightSlabFrom && bytes < kHugeBytes) {
        // Carved from the current huge-page slab (a new one when it is full or no buffer of the
        // last one lives on): each buffer shares ownership of its slab, so the slab is unmapped
        // with the last of its buffers. Compile-time only, so a mutex is fine here.
        static std::mutex mu;
        static std::weak_ptr<unsigned char> slab;
        static size_t used = 0;
        std::lock_guard<std::mutex> lock(mu);
        std::shared_ptr<unsigned char> s = slab.lock();
        if (!s || used + bytes > kHugeBytes) {
            s = alloc_zeroed(kHugeBytes, kHugeBytes);
            slab = s;
            used = 0;
        }
        float* p = reinterpret_cast<float*>(s.get() + used);
        used += bytes;
        return std::shared_ptr<float>(std::move(s), p);
    }
#endif
    std::shared_ptr<unsigned char> b = alloc_zeroed(bytes, kHugeBytes);
    return std::shared_ptr<float>(b, reinterpret_cast<float*>(b.get()));
}

}  // namespace jiffy::kernels
