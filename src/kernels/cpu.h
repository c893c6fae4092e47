// CPU features and the ISA the kernels use, chosen once at start-up. JIFFY_ISA=scalar|avx2|avx512
// (x86-64) or scalar|neon (aarch64) forces a lower ISA (never a higher one than the CPU has, nor
// another architecture's) so every path is testable here.
#pragma once
#include <cstdint>

namespace jiffy::kernels {

// Ordered within an architecture: kScalar < kNeon (aarch64), kScalar < kAvx2 < kAvx512 (x86-64),
// so `int(cpu_isa()) >= int(Isa::kAvx2)` is false on ARM.
enum class Isa { kScalar = 0, kNeon = 1, kAvx2 = 2, kAvx512 = 3 };

Isa cpu_isa();     // best the CPU supports
Isa active_isa();  // cpu_isa() capped by JIFFY_ISA (read once)
const char* isa_name(Isa isa);

// The x86-64 core's maker (a few blockings were measured to differ between Intel's and AMD's
// cores); kOther on other architectures.
enum class CpuVendor { kOther = 0, kIntel = 1, kAmd = 2 };
CpuVendor cpu_vendor();
const char* cpu_vendor_name(CpuVendor v);
// The vendor whose measured tunings the kernels take (conv K chunks, the Winograd cost model):
// cpu_vendor(), or JIFFY_TUNE_VENDOR=intel|amd|other (read once), to time one against the other.
CpuVendor tuning_vendor();
// One core's L2 in bytes (sysconf on Linux; 1 MiB where it is not known). Read once.
int64_t l2_cache_bytes();

// Floats per vector register in the ISA's kernels (the portable and NEON kernels use 4).
inline int64_t isa_vector_floats(Isa isa) { return isa == Isa::kAvx512 ? 16 : isa == Isa::kAvx2 ? 8 : 4; }

}  // namespace jiffy::kernels
