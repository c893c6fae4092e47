// Every public model (scripts/models.tsv) against ONNX Runtime 1.30's outputs on the same inputs
// (made by scripts/make_refs.sh): max |jiffy - ort| <= 1e-4 x the output's magnitude. Where a final
// Sigmoid/Softmax may saturate, the tensor feeding it is compared too (preact.onnx).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "refs.h"

using namespace jiffy;
using namespace jiffy::testing;

namespace {

constexpr double kRelTol = 1e-4;

void expect_close(const std::string& what, const Tensor& got, const Tensor& want, double rel_tol = kRelTol) {
    ASSERT_EQ(got.dtype(), want.dtype()) << what;
    ASSERT_EQ(got.shape(), want.shape()) << what << ": " << shape_str(got.shape()) << " vs "
                                         << shape_str(want.shape());
    double mag = 0, err = 0;
    int64_t worst = 0;
    for (int64_t i = 0; i < want.numel(); ++i) mag = std::max(mag, std::abs(want.get_f64(i)));
    for (int64_t i = 0; i < want.numel(); ++i) {
        double e = std::abs(got.get_f64(i) - want.get_f64(i));
        if (!(e <= err)) {
            err = e;
            worst = i;
        }
    }
    double tol = rel_tol * std::max(mag, 1e-3);
    EXPECT_LE(err, tol) << what << ": max abs error " << err << " at element " << worst << " (got "
                        << got.get_f64(worst) << ", ORT " << want.get_f64(worst) << "), magnitude "
                        << mag;
    std::printf("  %-40s max err %.3g (tolerance %.3g, magnitude %.3g)\n", what.c_str(), err, tol, mag);
}

// Compiles and runs model `name` on its reference inputs at `threads` thread(s).
Status run_ref_model(const std::string& name, int threads, std::shared_ptr<const Plan>* plan,
                     std::vector<std::pair<std::string, Tensor>>* outs, RefCase* rc_out = nullptr) {
    RefCase rc;
    JIFFY_RETURN_IF_ERROR(load_ref_inputs(name, &rc));
    rc.opt.threads = threads;
    JIFFY_RETURN_IF_ERROR(run_model(rc.model_path, rc, plan, outs));
    if (rc_out) *rc_out = std::move(rc);
    return {};
}

// The model's outputs against ONNX Runtime's (rc.ref_dir/outputs.txt), each within rel_tol of its
// magnitude.
void expect_outputs_match(const std::string& name, const RefCase& rc,
                          const std::vector<std::pair<std::string, Tensor>>& outs, double rel_tol = kRelTol) {
    auto want = read_pairs(rc.ref_dir + "/outputs.txt");
    ASSERT_EQ(outs.size(), want.size()) << name;
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(outs[i].first, want[i].first);
        Tensor ref;
        const Status st = read_npy(rc.ref_dir + "/" + want[i].second, &ref);
        ASSERT_TRUE(st.ok()) << st.message();
        expect_close(name + ":" + want[i].first, outs[i].second, ref, rel_tol);
    }
}

class ModelVsOrt : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelVsOrt, MatchesOnnxRuntime) {
    const std::string name = GetParam();
    RefCase rc;
    std::vector<std::pair<std::string, Tensor>> outs;
    Status st = run_ref_model(name, 1, nullptr, &outs, &rc);
    ASSERT_TRUE(st.ok()) << st.message();
    expect_outputs_match(name, rc, outs);
    if (HasFatalFailure()) return;
    auto pre = read_pairs(rc.ref_dir + "/preact.txt");
    if (!pre.empty()) {
        std::vector<std::pair<std::string, Tensor>> pouts;
        st = run_model(rc.ref_dir + "/preact.onnx", rc, nullptr, &pouts);
        ASSERT_TRUE(st.ok()) << st.message();
        for (const auto& [tname, file] : pre) {
            Tensor ref;
            ASSERT_TRUE(read_npy(rc.ref_dir + "/" + file, &ref).ok());
            bool found = false;
            for (const auto& [oname, t] : pouts)
                if (oname == tname) {
                    expect_close(name + ":" + tname + " (pre-activation)", t, ref);
                    found = true;
                }
            EXPECT_TRUE(found) << "pre-activation " << tname << " not among outputs";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Public, ModelVsOrt, ::testing::ValuesIn(model_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                             std::string s = i.param;
                             for (char& c : s)
                                 if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                             return s;
                         });

// The GEMV serpentine order (docs/gemv.md) is on where it pays: a wake-word head's first GEMV (the
// rest of the model reads < 256 KiB), at 2 threads too where a thread's part can still pass 768 KiB
// (timer's 816 KiB halves; weather's 1056 KiB alternate only in a run whose balanced split gives a
// thread >= 73% of the columns: even halves read forward); off in an MLP whose other layers read
// megabytes between two runs of each.
TEST(GemvSerpentine, OnWhereTheRestOfTheModelIsSmall) {
    auto kernels_of = [](const std::string& name, int threads, std::vector<std::string>* out) {
        std::shared_ptr<const Plan> plan;
        std::vector<std::pair<std::string, Tensor>> outs;
        JIFFY_RETURN_IF_ERROR(run_ref_model(name, threads, &plan, &outs));
        for (const auto& step : plan->steps) {
            std::string d = step.kernel ? step.kernel->describe() : "";
            for (const char* width : {" w24", " i20"}) {  // the weights' width is not this test's (GemvW24 below)
                const size_t at = d.find(width);
                if (at != std::string::npos) d.erase(at, 4);
            }
            out->push_back(d);
        }
        return Status{};
    };
    struct Want { const char* model; int threads; const char* first; };
    for (const Want w : {Want{"timer_v0.1", 1, "gemv serpentine"}, Want{"weather_v0.1", 1, "gemv serpentine"},
                         Want{"timer_v0.1", 2, "gemv serpentine threaded x2"},
                         Want{"weather_v0.1", 2, "gemv serpentine threaded x2"}, Want{"mlp_256_1024_1024_256", 1, "gemv"}}) {
        std::vector<std::string> k;
        const Status st = kernels_of(w.model, w.threads, &k);
        ASSERT_TRUE(st.ok()) << w.model << ": " << st.message();
        ASSERT_FALSE(k.empty());
        EXPECT_EQ(k[0], w.first) << w.model << " at " << w.threads << " thread(s)";
        if (std::string(w.model).rfind("mlp", 0) == 0)
            for (const std::string& d : k) EXPECT_EQ(d.find("serpentine"), std::string::npos) << w.model << ": " << d;
    }
}

// The GEMVs' 24-bit weights (docs/gemv.md) where the CPU has them: the openWakeWord heads whose
// Sigmoid the probe input does not saturate take them in their 128-wide GEMVs (at 2 threads too,
// on the split layout), and their outputs stay within 1e-5 of ONNX Runtime's (a tenth of the
// models' bound); hey_jarvis, whose verifier branch hides the score from the probe's outputs,
// keeps float32 weights. mlp_256, whose three GEMVs at once move its output past 1e-5, takes them
// in two (the probe's one-kernel-at-a-time pass, most bytes first: the 4 MB layer, then the first
// 1 MB one). On Intel's cores only mlp_256 (its 6 MB past L2) is offered them, as 20-bit blocks
// (about 6x closer to float32 than 24-bit weights), which all three of its GEMVs take.
TEST(GemvW24, WakeWordHeadsTakeThemWhereTheProbeSeesThem) {
    if (!kernels::gemv_w24_supported(kernels::active_isa())) GTEST_SKIP() << "no AVX-512 VBMI (or JIFFY_GEMV_W24=0)";
    // bytes: the model's weights; on Intel's cores only a plan whose constants overflow L2 is offered
    // less exact GEMV weights (ops/linalg.cpp choose_gemv_modes), and there they are the 20-bit
    // blocks (i20: how many GEMVs take those).
    struct Want { const char* model; int threads; int w24; int64_t bytes; int i20; };
    const bool intel = kernels::tuning_vendor() == kernels::CpuVendor::kIntel;
    for (Want w : {Want{"alexa_v0.1", 1, 2, 854000, 2}, Want{"timer_v0.1", 1, 2, 1742000, 2},
                   Want{"weather_v0.1", 1, 2, 1149000, 2}, Want{"timer_v0.1", 2, 2, 1742000, 2},
                   Want{"hey_jarvis_v0.1", 1, 0, 1271000, 0}, Want{"mlp_256_1024_1024_256", 1, 2, 6301000, 3}}) {
        if (intel && w.bytes <= kernels::l2_cache_bytes()) w.w24 = 0;
        else if (intel && kernels::gemv_i20_supported(kernels::active_isa())) w.w24 = w.i20;
        RefCase rc;
        std::shared_ptr<const Plan> plan;
        std::vector<std::pair<std::string, Tensor>> outs;
        const Status st = run_ref_model(w.model, w.threads, &plan, &outs, &rc);
        ASSERT_TRUE(st.ok()) << w.model << ": " << st.message();
        int n = 0;
        for (const auto& step : plan->steps)
            if (step.kernel) {
                const std::string d = step.kernel->describe();
                n += d.find(" w24") != std::string::npos || d.find(" i20") != std::string::npos;
            }
        EXPECT_EQ(n, w.w24) << w.model << " at " << w.threads << " thread(s)";
        EXPECT_EQ(plan->fast_weight_steps, w.w24) << w.model;
        expect_outputs_match(w.model, rc, outs, 1e-5);
        if (HasFatalFailure()) return;
    }
}

// The RGB stems with <= 32 output channels take the direct stem conv on AVX-512 (the face detector's
// and MobileNetV3's 3 -> 16, MobileNetV2's 3 -> 32; split by rows at two threads), writing
// channels-last as the first jiffy::ConvNhwc of their chain (no Transpose after them: the second
// step is the depthwise conv), or, where the stem's output is past 1 MiB (the face detector's
// 16 x 120x160, MobileNetV2's 32 x 112x112), band by band with that depthwise (one ConvNhwcBand).
TEST(ConvStemModels, DirectWhereItPays) {
    if (kernels::active_isa() != kernels::Isa::kAvx512) GTEST_SKIP() << "the stem conv is AVX-512 only";
    struct Want { const char* model; int threads; const char* first; const char* second; };
    for (const Want w : {Want{"face_detector", 1, "conv_stem+dw band 23 rows avx512", "conv_nhwc_1x1+dw band"},
                         Want{"face_detector", 2, "conv_stem+dw band 23 rows x2 threads by rows avx512",
                              "conv_nhwc_1x1+dw band"},
                         Want{"mobilenetv3", 1, "conv_stem 3x3s2 direct nhwc-out avx512", "conv_nhwc_dw"},
                         Want{"mobilenetv2", 1, "conv_stem+dw band 16 rows avx512", "conv_nhwc_1x1 avx512"}}) {
        std::shared_ptr<const Plan> plan;
        std::vector<std::pair<std::string, Tensor>> outs;
        const Status st = run_ref_model(w.model, w.threads, &plan, &outs);
        ASSERT_TRUE(st.ok()) << w.model << ": " << st.message();
        ASSERT_GE(plan->steps.size(), 2u);
        const std::string k0 = plan->steps[0].kernel ? plan->steps[0].kernel->describe() : "";
        const std::string k1 = plan->steps[1].kernel ? plan->steps[1].kernel->describe() : "";
        EXPECT_EQ(k0, w.first) << w.model << " at " << w.threads << " thread(s)";
        EXPECT_EQ(k1.rfind(w.second, 0), 0u) << w.model << ": step 1 " << k1;
    }
}

// MobileNetV2's three expand 1x1s over tensors past L2 (96 x 112x112, 144 x 56x56 twice) run band
// by band with their depthwise convs (jiffy::ConvNhwcBand, fuse_conv_band): bitwise the outputs of
// the two-step plan (JIFFY_BAND=0), at one thread and at two.
TEST(ConvBandModels, MobileNetV2ExpansionsRunInBands) {
    RefCase rc;
    Status st = load_ref_inputs("mobilenetv2", &rc);
    ASSERT_TRUE(st.ok()) << st.message();
    for (int threads : {1, 2}) {
        rc.opt.threads = threads;
        std::vector<std::pair<std::string, Tensor>> banded, steps;
        std::shared_ptr<const Plan> plan;
        st = run_model(rc.model_path, rc, &plan, &banded);
        ASSERT_TRUE(st.ok()) << st.message();
        int bands = 0;
        for (const auto& step : plan->steps)
            bands += step.kernel && step.kernel->describe().rfind("conv_nhwc_1x1+dw band", 0) == 0;
        EXPECT_EQ(bands, 3) << threads << " thread(s)";
        setenv("JIFFY_BAND", "0", 1);
        st = run_model(rc.model_path, rc, &plan, &steps);
        unsetenv("JIFFY_BAND");
        ASSERT_TRUE(st.ok()) << st.message();
        int left = 0;
        for (const auto& step : plan->steps)
            left += step.kernel && step.kernel->describe().find(" band ") != std::string::npos;
        EXPECT_EQ(left, 0);
        ASSERT_EQ(banded.size(), steps.size());
        for (size_t i = 0; i < banded.size(); ++i) {
            ASSERT_EQ(banded[i].second.nbytes(), steps[i].second.nbytes());
            EXPECT_EQ(std::memcmp(banded[i].second.data(), steps[i].second.data(), banded[i].second.nbytes()), 0)
                << banded[i].first << " differs from the two-step plan at " << threads << " thread(s)";
        }
    }
}

// The same model compiled with 2 threads (every op at or above 0 FLOPs eligible, so each split
// path runs) gives bitwise the outputs of 1 thread: the splits keep every output's summation order.
class ModelThreads : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelThreads, TwoThreadsMatchOneBitwise) {
    const std::string name = GetParam();
    RefCase rc;
    Status st = load_ref_inputs(name, &rc);
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<std::pair<std::string, Tensor>> one, two;
    st = run_model(rc.model_path, rc, nullptr, &one);
    ASSERT_TRUE(st.ok()) << st.message();
    rc.opt.threads = 2;
    rc.opt.parallel_min_flops = 0;
    std::shared_ptr<const Plan> plan;
    st = run_model(rc.model_path, rc, &plan, &two);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_TRUE(plan->pool != nullptr);
    ASSERT_EQ(one.size(), two.size());
    for (size_t i = 0; i < one.size(); ++i) {
        ASSERT_EQ(one[i].second.nbytes(), two[i].second.nbytes());
        EXPECT_EQ(std::memcmp(one[i].second.data(), two[i].second.data(), one[i].second.nbytes()), 0)
            << name << ":" << one[i].first << " differs with 2 threads";
    }
}

INSTANTIATE_TEST_SUITE_P(Public, ModelThreads, ::testing::ValuesIn(model_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                             std::string s = i.param;
                             for (char& c : s)
                                 if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                             return s;
                         });

}  // namespace
