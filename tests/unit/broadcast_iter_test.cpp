// for_each_broadcast2 (ops/util.h) collapses dims before it iterates: every (i, off_a, off_b) it
// visits must equal the plain multi-index walk's, in the same order, for shapes with size-1 dims,
// broadcast dims in either input, scalars, and runs that merge or not.
#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "ops/util.h"

namespace jiffy {
namespace {

std::vector<std::tuple<int64_t, int64_t, int64_t>> plain_walk(const Shape& out, const Shape& sa, const Shape& sb) {
    std::vector<std::tuple<int64_t, int64_t, int64_t>> v;
    const int64_t n = shape_numel(out);
    for (int64_t i = 0; i < n; ++i) {
        int64_t rem = i, oa = 0, ob = 0;
        for (int d = int(out.size()) - 1; d >= 0; --d) {
            const int64_t k = rem % out[size_t(d)];
            rem /= out[size_t(d)];
            oa += k * sa[size_t(d)];
            ob += k * sb[size_t(d)];
        }
        v.emplace_back(i, oa, ob);
    }
    return v;
}

TEST(BroadcastIter, VisitsWhatThePlainWalkVisits) {
    uint32_t x = 12345;
    auto next = [&](uint32_t m) {
        x = x * 1664525u + 1013904223u;
        return (x >> 8) % m;
    };
    for (int trial = 0; trial < 400; ++trial) {
        const int rank = int(next(6));  // 0..5
        Shape out, a, b;
        for (int d = 0; d < rank; ++d) {
            const int64_t len = 1 + int64_t(next(4));  // 1..4
            out.push_back(len);
            a.push_back(next(3) == 0 ? 1 : len);  // broadcast in a third of the dims
            b.push_back(next(3) == 0 ? 1 : len);
        }
        // Sometimes a lower-rank input (aligned right), as broadcast_strides allows.
        if (rank > 1 && next(4) == 0) b.erase(b.begin());
        const Shape sa = broadcast_strides(a, out), sb = broadcast_strides(b, out);
        std::vector<std::tuple<int64_t, int64_t, int64_t>> got;
        for_each_broadcast2(out, sa, sb, [&](int64_t i, int64_t ia, int64_t ib) { got.emplace_back(i, ia, ib); });
        ASSERT_EQ(got, plain_walk(out, sa, sb)) << "trial " << trial;
    }
}

TEST(BroadcastIter, EmptyOutputVisitsNothing) {
    int calls = 0;
    for_each_broadcast2(Shape{2, 0, 3}, Shape{0, 0, 1}, Shape{0, 0, 1}, [&](int64_t, int64_t, int64_t) { ++calls; });
    EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace jiffy
