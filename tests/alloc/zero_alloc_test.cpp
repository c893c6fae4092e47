// Plan::run makes no heap allocation: malloc/calloc/realloc (and so operator new) are counted
// while a flag is set, across 1,000 runs of each small public model (fewer for the large ones).
#include <gtest/gtest.h>
#include <dlfcn.h>

#include <atomic>

#include "../models/refs.h"

extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);

static std::atomic<bool> g_counting{false};
static std::atomic<long> g_allocs{0};

extern "C" void* malloc(size_t n) {
    if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
    return __libc_malloc(n);
}
extern "C" void* calloc(size_t a, size_t b) {
    if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
    return __libc_calloc(a, b);
}
extern "C" void* realloc(void* p, size_t n) {
    if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
    return __libc_realloc(p, n);
}

using namespace jiffy;
using namespace jiffy::testing;

TEST(ZeroAlloc, HookCountsAllocations) {
    g_allocs = 0;
    g_counting = true;
    void* p = malloc(16);
    auto* q = new int(3);
    g_counting = false;
    free(p);
    delete q;
    EXPECT_EQ(g_allocs.load(), 2);  // the hook itself works
}

class ZeroAllocModel : public ::testing::TestWithParam<std::string> {};

void expect_no_alloc(const std::string& name, int threads) {
    RefCase rc;
    Status st = load_ref_inputs(name, &rc);
    ASSERT_TRUE(st.ok()) << st.message();
    rc.opt.threads = threads;
    rc.opt.parallel_min_flops = 0;  // with threads: every op that can split does
    std::shared_ptr<Model> m;
    ASSERT_TRUE(Model::load(rc.model_path, ImportOptions{}, &m).ok());
    std::shared_ptr<const Plan> plan;
    st = m->compile(rc.opt, rc.inputs, &plan);
    ASSERT_TRUE(st.ok()) << st.message();
    Session s(plan);
    for (size_t i = 0; i < plan->inputs.size(); ++i)
        std::memcpy(s.input_data(i), rc.inputs.at(plan->inputs[i].name)->data(), plan->inputs[i].nbytes);
    ASSERT_TRUE(s.run().ok());  // warm-up
    int runs = plan->flops() < 20'000'000 ? 1000 : 3;
    g_allocs = 0;
    g_counting = true;
    for (int i = 0; i < runs; ++i) st = s.run();
    g_counting = false;
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(g_allocs.load(), 0) << "allocations in " << runs << " runs of " << name << " with " << threads
                                  << " thread(s)";
}

TEST_P(ZeroAllocModel, RunDoesNotAllocate) { expect_no_alloc(GetParam(), 1); }
TEST_P(ZeroAllocModel, RunWithTwoThreadsDoesNotAllocate) { expect_no_alloc(GetParam(), 2); }

INSTANTIATE_TEST_SUITE_P(Public, ZeroAllocModel, ::testing::ValuesIn(model_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                             std::string s = i.param;
                             for (char& c : s)
                                 if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                             return s;
                         });
