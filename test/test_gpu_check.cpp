// scripts/gpu_check.sh cannot pass without testing: its failure paths, exercised on the CPU
// against fake programs made here (shell scripts in a fake bundle, `--prebuilt`): a GPU test
// binary that runs no test, one that does not know a flag (an old GoogleTest prints its help and
// runs nothing), a skipped test, a failed one, a missing one, no GoogleTest, no nvidia-smi, no
// compute-sanitizer, training losses or gradient norms off the CPU's, a benchmark whose first
// loss is far from ln V or whose fused products ran unfused. Each is a FAIL row and a non-zero
// exit; the fakes that behave pass. Also --dry lists every row without a GPU, and the bundle's
// manifest (scripts/bundle_manifest.sh) reports a library the loader does not find.
// Runs from the repository root.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "test_files.h"

namespace {

struct Result {
    int status;
    std::string out;
};

// A fake GoogleTest binary: writes the report --gtest_output asks for, as GoogleTest does, with
// `tests` tests of which `failures` failed and `skips` were skipped; "help" instead prints
// GoogleTest's help and no report, as it does for a flag it does not know.
std::string fake_gtest(const std::string& behaviour) {
    std::string body = "#!/bin/bash\nxml=\nfor a in \"$@\"; do case $a in --gtest_output=xml:*) xml=${a#--gtest_output=xml:};; esac; done\n";
    if (behaviour == "help")
        return body + "echo 'This program contains tests written using Google Test. You can use the'\n"
                      "echo 'following command line flags to control its behavior:'\nexit 0\n";
    int tests = 3, failures = 0, skips = 0;
    if (behaviour == "none") tests = 0;
    if (behaviour == "fail") failures = 1;
    if (behaviour == "skip") skips = 1;
    body += "cat > \"$xml\" <<EOF\n<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites tests=\"" + std::to_string(tests) +
            "\" failures=\"" + std::to_string(failures) + "\" disabled=\"0\" errors=\"0\" name=\"AllTests\">\n";
    for (int i = 0; i < tests; i++)
        body += std::string("  <testcase name=\"T") + std::to_string(i) + "\"" +
                (i < skips ? " result=\"skipped\"><skipped message=\"no GPU\"/></testcase>\n"
                           : i < skips + failures ? "><failure message=\"wrong\"/></testcase>\n" : "/>\n");
    body += "</testsuites>\nEOF\necho \"  matmul out relative error 1.5e-07 (tolerance 1e-05)\"\n";
    return body + "exit " + std::to_string(failures ? 1 : 0) + "\n";
}

// A fake ./train: 20 step records into -out's log.jsonl; on the device the losses and gradient
// norms are the CPU's times (1 + FAKE_DIFF), or nan with FAKE_DIFF=nan.
const char* FAKE_TRAIN = R"(#!/bin/bash
device=cpu; out=
while [ $# -gt 0 ]; do case $1 in -device) device=$2;; -out) out=$2;; esac; shift; done
mkdir -p "$out"
f=1; [ $device = cuda ] && f=$(awk -v d="${FAKE_DIFF:-0}" 'BEGIN {print 1 + d}')
for i in $(seq 0 19); do
  if [ $device = cuda ] && [ "${FAKE_DIFF:-0}" = nan ]; then
    echo "{\"step\": $i, \"loss\": nan, \"lr\": 1e-4, \"grad_norm\": nan, \"ms\": 1}"
  else
    awk -v i=$i -v f="$f" 'BEGIN {printf "{\"step\": %d, \"loss\": %.9g, \"lr\": 1e-4, \"grad_norm\": %.9g, \"ms\": 1}\n", i, (10 - 0.1 * i) * f, (2 + 0.01 * i) * f}'
  fi
done > "$out/log.jsonl"
)";

// A fake bench_gpu: its summary with FAKE_FIRST_LOSS (10.9 by default; ln V = 10.8249) and, with
// FAKE_REFUSED=1, the line of a fused product cuBLASLt refused.
const char* FAKE_BENCH = R"(#!/bin/bash
[ "${FAKE_REFUSED:-0}" = 1 ] && echo "cuBLASLt refused the bias epilogue of a 8192x2304x768 bf16 product (heuristic: CUBLAS_STATUS_NOT_SUPPORTED): it runs unfused" >&2
echo "bench-summary: tok_s=1 ms_step=1.0 mfu_pct=1.0 mem_gib=1.0 B=64 first_loss=${FAKE_FIRST_LOSS:-10.9} ln_V=10.8249"
)";

class GpuCheck : public ::testing::Test {
protected:
    std::string dir, bundle, bin;

    void SetUp() override {
        dir = fresh_folder("gpu_check_");
        bundle = dir + "bundle/";
        bin = dir + "bin/";
        mkdir(bundle.c_str(), 0755);
        mkdir(bin.c_str(), 0755);
        for (const char* test : {"cuda_test_kernels", "cuda_test_model", "cuda_test_tensor_cores", "cuda_test_wmma",
                                  "cuda_test_simt", "test_cli_cuda"})
            program(bundle + test, fake_gtest("pass"));
        program(bundle + "train", FAKE_TRAIN);
        program(bundle + "eval", "#!/bin/bash\n");
        program(bundle + "bench_gpu", FAKE_BENCH);
        program(bin + "nvidia-smi", "#!/bin/bash\necho 'NVIDIA H200, 580.65.06, 143771 MiB'\n");
    }

    static void program(const std::string& path, const std::string& text) {
        std::ofstream(path) << text;
        chmod(path.c_str(), 0755);
    }

    // scripts/gpu_check.sh with `args`, nvidia-smi found on PATH (unless `driver` is false),
    // logs in DIR/out; `env` is put before the command.
    Result check(const std::string& args, const std::string& env = "", bool driver = true) const {
        const std::string command = env + " GPU_CHECK_OUT=" + dir + "out PATH=" + (driver ? bin + ":" : "") +
                                    "$PATH scripts/gpu_check.sh " + args + " > " + dir + "stdout 2>&1";
        const int raw = std::system(command.c_str());
        return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(dir + "stdout")};
    }
    Result check_bundle(const std::string& groups, const std::string& env = "") const {
        return check("--prebuilt " + bundle + " --only " + groups, env);
    }

    // The summary table's row of `step`, or "" (with the output, for the failure message).
    static std::string row(const Result& r, const std::string& step) {
        const size_t table = r.out.find("==== gpu_check");
        size_t at = r.out.find("\n" + step + " ", table);
        if (table == std::string::npos || at == std::string::npos) return "";
        const size_t end = r.out.find('\n', at + 1);
        return r.out.substr(at + 1, end - at - 1);
    }
    static bool failed(const Result& r, const std::string& step, const std::string& why) {
        const std::string line = row(r, step);
        return line.find(" FAIL ") != std::string::npos && line.find(why) != std::string::npos;
    }
};

TEST_F(GpuCheck, TestsPassWhenEveryBinaryRanItsTests) {
    const Result r = check_bundle("driver,bundle,tests");
    EXPECT_EQ(r.status, 0) << r.out;
    for (const char* step : {"driver", "bundle libraries", "cuda_test_kernels", "cuda_test_model", "cuda_test_tensor_cores", "cuda_test_wmma",
                             "cuda_test_simt", "test_cli_cuda", "precision"})
        EXPECT_NE(row(r, step).find(" ok "), std::string::npos) << step << ":\n" << r.out;
    EXPECT_NE(row(r, "cuda_test_kernels").find("3 passed, 0 failed, 0 skipped, worst error 1.5e-07"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("gpu_check-summary: 9 ok, 0 failed, 0 skipped"), std::string::npos) << r.out;
}

TEST_F(GpuCheck, ABinaryThatRanNoTestFails) {
    program(bundle + "cuda_test_wmma", fake_gtest("none"));
    const Result r = check_bundle("tests");
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_TRUE(failed(r, "cuda_test_wmma", "ran 0 tests")) << r.out;
}

TEST_F(GpuCheck, AFlagGoogleTestDoesNotKnowFails) {
    program(bundle + "cuda_test_simt", fake_gtest("help"));
    const Result r = check_bundle("tests");
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_TRUE(failed(r, "cuda_test_simt", "printed its help and ran nothing")) << r.out;
}

TEST_F(GpuCheck, ASkippedTestFails) {
    program(bundle + "cuda_test_model", fake_gtest("skip"));
    const Result r = check_bundle("tests");
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_TRUE(failed(r, "cuda_test_model", "1 skipped")) << r.out;
    EXPECT_TRUE(failed(r, "precision", "1 skipped")) << r.out;
}

TEST_F(GpuCheck, AFailedOrMissingTestFails) {
    program(bundle + "cuda_test_kernels", fake_gtest("fail"));
    std::remove((bundle + "test_cli_cuda").c_str());
    const Result r = check_bundle("tests");
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_TRUE(failed(r, "cuda_test_kernels", "1 failed")) << r.out;
    EXPECT_TRUE(failed(r, "test_cli_cuda", "is not there")) << r.out;
}

TEST_F(GpuCheck, NoDriverStopsTheCheck) {
    const Result r = check("--prebuilt " + bundle, "", false);
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_TRUE(failed(r, "driver", "nvidia-smi")) << r.out;
    EXPECT_EQ(row(r, "cuda_test_kernels"), "") << "ran on after the driver failed:\n" << r.out;
}

TEST_F(GpuCheck, NoGoogleTestFails) {
    // A compiler that finds no gtest/gtest.h, and no GoogleTest sources to build.
    program(bin + "no-gtest-c++", "#!/bin/bash\nexit 1\n");
    const Result r = check("--only driver,googletest", "CXX=" + bin + "no-gtest-c++ GTEST_SRC=" + dir + "none");
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_TRUE(failed(r, "GoogleTest", "no gtest/gtest.h")) << r.out;
}

TEST_F(GpuCheck, NoComputeSanitizerFails) {
    const Result r = check_bundle("sanitizer", "COMPUTE_SANITIZER=" + dir + "none");
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_TRUE(failed(r, "compute-sanitizer", "not installed")) << r.out;
}

TEST_F(GpuCheck, TrainingComparesEveryLossAndGradientNormWithTheCpu) {
    const Result same = check_bundle("train", "FAKE_DIFF=5e-5");
    EXPECT_EQ(same.status, 0) << same.out;
    for (const char* step : {"train pre fp32", "train pre bf16", "train peri fp32", "train peri bf16"})
        EXPECT_NE(row(same, step).find(" ok "), std::string::npos) << step << ":\n" << same.out;
    // 2e-4 is beyond fp32's 1e-4 but within bf16's 3e-2.
    const Result off = check_bundle("train", "FAKE_DIFF=2e-4");
    EXPECT_NE(off.status, 0) << off.out;
    EXPECT_TRUE(failed(off, "train pre fp32", "losses 2.0e-04, grad norms 2.0e-04 (tol 1e-4)")) << off.out;
    EXPECT_NE(row(off, "train pre bf16").find(" ok "), std::string::npos) << off.out;
    const Result nan = check_bundle("train", "FAKE_DIFF=nan");
    EXPECT_NE(nan.status, 0) << nan.out;
    EXPECT_TRUE(failed(nan, "train peri bf16", "losses inf")) << nan.out;
}

TEST_F(GpuCheck, BenchmarkNeedsItsFirstLossNearLnVAndEveryProductFused) {
    const Result good = check_bundle("bench");
    EXPECT_EQ(good.status, 0) << good.out;
    for (const char* first : {"12.0", "nan", "inf"}) {
        const Result far = check_bundle("bench", std::string("FAKE_FIRST_LOSS=") + first);
        EXPECT_NE(far.status, 0) << far.out;
        EXPECT_TRUE(failed(far, "bench", "within 0.5 of ln V")) << first << ":\n" << far.out;
    }
    const Result refused = check_bundle("bench", "FAKE_REFUSED=1");
    EXPECT_NE(refused.status, 0) << refused.out;
    EXPECT_TRUE(failed(refused, "fused products", "1 kinds of product ran unfused")) << refused.out;
}

TEST_F(GpuCheck, DryListsEveryRowWithoutAGpu) {
    const Result r = check("--dry --prebuilt " + bundle, "", false);
    EXPECT_EQ(r.status, 0) << r.out;
    for (const char* step : {"driver", "bundle libraries", "cuda_test_kernels", "cuda_test_model", "cuda_test_tensor_cores", "cuda_test_wmma",
                             "cuda_test_simt", "test_cli_cuda", "precision", "cpu reference pre", "train pre fp32",
                             "train peri bf16", "bench", "fused products", "plan d48 bf16 B=32",
                             "memcheck attention+LN", "racecheck attention+LN", "synccheck attention+LN",
                             "memcheck train fp32", "memcheck train bf16"})
        EXPECT_NE(r.out.find(" " + std::string(step) + " "), std::string::npos) << step << ":\n" << r.out;
    EXPECT_EQ(check("--bogus").status, 2);
}

// The bundle's manifest (scripts/bundle_manifest.sh, run by make gpu-bundle) names the libraries
// each program needs and where the loader finds them here, and fails (so the bundle is not made)
// when a library cannot be found: here a program built against a library made for the test,
// before and after that library is removed.
TEST(BundleManifest, NamesWhatEachProgramNeedsAndFailsOnAMissingLibrary) {
    const std::string dir = fresh_folder("bundle_manifest_");
    mkdir((dir + "lib").c_str(), 0755);
    mkdir((dir + "bundle").c_str(), 0755);
    std::ofstream(dir + "answer.cpp") << "int answer() { return 42; }\n";
    std::ofstream(dir + "main.cpp") << "int answer();\nint main() { return answer() == 42 ? 0 : 1; }\n";
    ASSERT_EQ(std::system(("g++ -shared -fPIC -o " + dir + "lib/libanswer.so " + dir + "answer.cpp && g++ -o " + dir +
                           "bundle/program " + dir + "main.cpp -L" + dir + "lib -lanswer -Wl,-rpath," + dir + "lib")
                              .c_str()),
              0);
    const std::string manifest = "scripts/bundle_manifest.sh " + dir + "bundle > " + dir + "out 2>&1";
    const int found = std::system(manifest.c_str());
    EXPECT_TRUE(WIFEXITED(found) && WEXITSTATUS(found) == 0) << read_file(dir + "out");
    const std::string listed = read_file(dir + "bundle/MANIFEST.txt");
    EXPECT_NE(listed.find("== program"), std::string::npos) << listed;
    EXPECT_NE(listed.find("needs libanswer.so"), std::string::npos) << listed;
    EXPECT_NE(listed.find(dir + "lib/libanswer.so"), std::string::npos) << listed;
    EXPECT_NE(listed.find("needs libc.so.6"), std::string::npos) << listed;
    EXPECT_NE(listed.find("GLIBC_2."), std::string::npos) << listed;
    std::remove((dir + "lib/libanswer.so").c_str());
    const int missing = std::system(manifest.c_str());
    EXPECT_TRUE(WIFEXITED(missing) && WEXITSTATUS(missing) == 1) << read_file(dir + "out");
    EXPECT_NE(read_file(dir + "bundle/MANIFEST.txt").find("libanswer.so                 NOT FOUND here"), std::string::npos)
        << read_file(dir + "bundle/MANIFEST.txt");
}

}  // namespace
