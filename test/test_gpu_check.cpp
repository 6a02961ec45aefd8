// scripts/gpu_check.sh cannot pass without testing: its failure paths, exercised on the CPU
// against fake programs made here (shell scripts in a fake bundle, `--prebuilt`): a GPU test
// binary that runs no test, one that does not know a flag (an old GoogleTest prints its help and
// runs nothing), a skipped test, a failed one, a missing one, no GoogleTest, no nvidia-smi, no
// compute-sanitizer, training losses or gradient norms off the CPU reference's, a benchmark whose
// first loss is far from ln V or that timed no fused product, a sanitizer report with a
// record. Each is a FAIL row and a non-zero exit; the fakes that behave pass; a sanitizer that
// cannot start on the device is a skip row. A check stopped by SIGTERM or by its time limit
// keeps the rows it finished in its results folder (GPU_CHECK_OUT, else a lent machine's $OUT),
// also when the command running ignores SIGTERM or is a nvidia-smi that never answers: each is
// killed, and the check ends, within the limit and the grace of `timeout -k`; the plans follow
// the memory nvidia-smi reports; the side-by-side row holds the table. Also --dry lists every
// row without a GPU, the bundle's manifest (scripts/bundle_manifest.sh) reports a library the
// loader does not find and a test suite that does not carry GoogleTest, and the CPU
// reference's generator (scripts/gpu_reference.sh) writes the same file whatever the threads,
// for a tiny model.
// Runs from the repository root.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <fstream>
#include <map>
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
// norms are the CPU's times (1 + FAKE_DIFF) (at the last step only with FAKE_LAST_ONLY=1), or
// nan with FAKE_DIFF=nan.
const char* FAKE_TRAIN = R"(#!/bin/bash
device=cpu; out=
while [ $# -gt 0 ]; do case $1 in -device) device=$2;; -out) out=$2;; esac; shift; done
mkdir -p "$out"
for i in $(seq 0 19); do
  f=1; [ $device = cuda ] && { [ "${FAKE_LAST_ONLY:-0}" = 0 ] || [ $i = 19 ]; } && f=$(awk -v d="${FAKE_DIFF:-0}" 'BEGIN {print 1 + d}')
  if [ $device = cuda ] && [ "${FAKE_DIFF:-0}" = nan ]; then
    echo "{\"step\": $i, \"loss\": nan, \"lr\": 1e-4, \"grad_norm\": nan, \"ms\": 1}"
  else
    awk -v i=$i -v f="$f" 'BEGIN {printf "{\"step\": %d, \"loss\": %.9g, \"lr\": 1e-4, \"grad_norm\": %.9g, \"ms\": 1}\n", i, (10 - 0.1 * i) * f, (2 + 0.01 * i) * f}'
  fi
done > "$out/log.jsonl"
)";

// A fake bench_gpu: its choice of fused products and its summary with FAKE_FIRST_LOSS (10.9 by
// default; ln V = 10.8249); with FAKE_REFUSED=1, the line of a fused product cuBLASLt refused and a
// choice that runs that kind plain; with FAKE_FUSED=0, no choice (a bench that stopped before).
// With -plan, the lines of a plan whose largest B is FAKE_LARGEST_B (36 by default) and whose
// total is 2.37 GiB.
const char* FAKE_BENCH = R"SH(#!/bin/bash
if [ "${1:-}" = -plan ]; then
  echo "largest B that fits 140.4 GiB, 1 GiB of it kept free as ./train keeps it: ${FAKE_LARGEST_B:-36}"
  echo "bench_gpu's default B with 140.4 GiB free: 32 (peak 70.00 GiB)"
  echo "planned device memory: 2.37 GiB"
  exit 0
fi
if [ "${FAKE_REFUSED:-0}" = 1 ]; then
  echo "cuBLASLt refused the bias epilogue of a 8192x2304x768 bf16 product (heuristic: CUBLAS_STATUS_NOT_SUPPORTED): it runs unfused" >&2
  echo "bench-fused: bias + GELU (-fused auto, timed at start-up: bias plain (cuBLASLt refused it); bias + GELU fused (1.000 ms fused, 2.000 plain))"
elif [ "${FAKE_FUSED:-1}" = 1 ]; then
  echo "bench-fused: bias (-fused auto, timed at start-up: bias fused (1.000 ms fused, 2.000 plain))"
fi
echo "bench-summary: tok_s=1 ms_step=1.0 mfu_pct=1.0 mem_gib=1.0 B=64 first_loss=${FAKE_FIRST_LOSS:-10.9} ln_V=10.8249"
)SH";

// A fake compute-sanitizer: runs the command after its options and writes the XML report --save
// names, empty; FAKE_SANITIZER=record adds a record of an invalid write (exit status 1), and
// FAKE_SANITIZER=unsupported refuses the device without running anything, as compute-sanitizer
// does on a GPU it does not support.
const char* FAKE_SANITIZER = R"SH(#!/bin/bash
save=
while [ $# -gt 0 ]; do case $1 in --save) save=$2; shift 2;; --tool|--xml|--error-exitcode) shift 2;; *) break;; esac; done
[ "${FAKE_SANITIZER:-}" = unsupported ] && { echo "========= Error: Device not supported"; exit 1; }
"$@"
status=$?
record=
[ "${FAKE_SANITIZER:-}" = record ] && record="<record><kind>Precise</kind><level>Error</level><what><text>Invalid __shared__ write of size 4 bytes</text></what></record>"
printf '<?xml version="1.0" encoding="utf-8"?>\n<ComputeSanitizerOutput>\n%s\n</ComputeSanitizerOutput>\n' "$record" > "$save"
[ -n "$record" ] && exit 1
exit $status
)SH";

// A fake program that runs for ten minutes and ignores SIGTERM, as a call stuck in the driver or
// compute-sanitizer may: it writes its process id to `pid_file` and sleeps (exec keeps the id, and
// the ignored SIGTERM with it); only SIGKILL ends it sooner.
std::string ignores_sigterm(const std::string& pid_file) {
    return "#!/bin/bash\ntrap '' TERM\necho $$ > " + pid_file + "\nexec sleep 600\n";
}

// The seconds a check stopped at `limit` may take on a loaded machine: the limit, the 10 s from
// SIGTERM to SIGKILL, and 45 s for bash and the fakes to run there (a check that waited for the
// fake would take ten minutes).
double stopped_within(double limit) { return limit + 10 + 45; }

// Whether the process whose id `pid_file` holds is still running (not a zombie).
bool still_running(const std::string& pid_file) {
    const std::string pid = read_file(pid_file);
    if (pid.empty()) return false;
    const std::string state = read_file("/proc/" + pid.substr(0, pid.find('\n')) + "/stat");
    return !state.empty() && state.find(") Z ") == std::string::npos;
}

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
        program(bin + "compute-sanitizer", FAKE_SANITIZER);
        // The CPU reference the training rows compare with: the fake ./train's, as
        // scripts/gpu_reference.sh writes it.
        EXPECT_EQ(std::system(("scripts/gpu_reference.sh " + bundle + "train " + dir + "reference.txt 2>/dev/null").c_str()), 0);
    }

    static void program(const std::string& path, const std::string& text) {
        std::ofstream(path) << text;
        chmod(path.c_str(), 0755);
    }

    // scripts/gpu_check.sh with `args`, nvidia-smi found on PATH (unless `driver` is false),
    // results in DIR/out, the CPU reference DIR/reference.txt; `env` is put before the command.
    Result check(const std::string& args, const std::string& env = "", bool driver = true) const {
        const std::string command = "GPU_CHECK_OUT=" + dir + "out GPU_CHECK_REFERENCE=" + dir + "reference.txt " + env +
                                    " PATH=" + (driver ? bin + ":" : "") + "$PATH scripts/gpu_check.sh " + args + " > " +
                                    dir + "stdout 2>&1";
        const int raw = std::system(command.c_str());
        return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(dir + "stdout")};
    }
    Result check_bundle(const std::string& groups, const std::string& env = "") const {
        return check("--prebuilt " + bundle + " --only " + groups, env);
    }

    // The check with `args` in the background, sent SIGTERM once the file `started` is there (or
    // after 30 s); `seconds` is how long it ran.
    Result check_stopped(const std::string& args, const std::string& started, double* seconds) const {
        const std::string script = "GPU_CHECK_OUT=" + dir + "out GPU_CHECK_REFERENCE=" + dir + "reference.txt PATH=" +
                                   bin + ":$PATH scripts/gpu_check.sh " + args + " > " + dir + "stdout 2>&1 & pid=$!\n" +
                                   "for i in $(seq 600); do [ -e " + started + " ] && break; sleep 0.05; done\n" +
                                   "kill -TERM $pid; wait $pid";
        std::ofstream(dir + "stop.sh") << script;
        const auto start = std::chrono::steady_clock::now();
        const int raw = std::system(("bash " + dir + "stop.sh").c_str());
        *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(dir + "stdout")};
    }

    // The summary table's row of `step`, or "" (with the output, for the failure message).
    static std::string row(const Result& r, const std::string& step) {
        const size_t table = r.out.find("==== gpu_check");
        size_t at = r.out.find("\n" + step + " ", table);
        if (table == std::string::npos || at == std::string::npos) return "";
        const size_t end = r.out.find('\n', at + 1);
        return r.out.substr(at + 1, end - at - 1);
    }
    // The line of `text` (rows.txt) that is the row of `step`, or "".
    static std::string line_of(const std::string& text, const std::string& step) {
        const size_t at = ("\n" + text).find("\n" + step + " ");
        return at == std::string::npos ? "" : text.substr(at, text.find('\n', at) - at);
    }
    static bool failed(const Result& r, const std::string& step, const std::string& why) {
        const std::string line = row(r, step);
        return line.find(" FAIL ") != std::string::npos && line.find(why) != std::string::npos;
    }
};

TEST_F(GpuCheck, TestsPassWhenEveryBinaryRanItsTestsAndTheResultsAreKept) {
    const Result r = check_bundle("driver,bundle,tests");
    EXPECT_EQ(r.status, 0) << r.out;
    for (const char* step : {"driver", "bundle libraries", "cuda_test_kernels", "cuda_test_model", "cuda_test_tensor_cores", "cuda_test_wmma",
                             "cuda_test_simt", "test_cli_cuda", "precision"})
        EXPECT_NE(row(r, step).find(" ok "), std::string::npos) << step << ":\n" << r.out;
    EXPECT_NE(row(r, "cuda_test_kernels").find("3 passed, 0 failed, 0 skipped, worst error 1.5e-07"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("gpu_check-summary: 9 ok, 0 failed, 0 skipped"), std::string::npos) << r.out;
    // The results folder: the rows, the summary and the logs.
    const std::string rows = read_file(dir + "out/rows.txt");
    for (const char* step : {"driver", "bundle libraries", "cuda_test_kernels", "precision"})
        EXPECT_EQ(line_of(rows, step), row(r, step)) << step << ":\n" << rows;
    EXPECT_NE(read_file(dir + "out/summary.txt").find("gpu_check-summary: 9 ok, 0 failed, 0 skipped"), std::string::npos);
    EXPECT_NE(read_file(dir + "out/summary.txt").find("(finished)"), std::string::npos);
    // The default limit leaves a 10-minute command time to stop and write its results.
    EXPECT_NE(r.out.find("; limit 560 s; results in " + dir + "out)"), std::string::npos) << r.out;
    const std::string listed = dir + "listed";
    ASSERT_EQ(std::system(("tar -tzf " + dir + "out/logs.tar.gz > " + listed).c_str()), 0);
    EXPECT_NE(read_file(listed).find("cuda_test_model.xml"), std::string::npos) << read_file(listed);
    EXPECT_NE(read_file(listed).find("precision.log"), std::string::npos) << read_file(listed);
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
    // 2e-4 is beyond fp32's 1e-4.
    const Result off = check_bundle("train", "FAKE_DIFF=2e-4");
    EXPECT_NE(off.status, 0) << off.out;
    EXPECT_TRUE(failed(off, "train pre fp32", "losses 2.0e-04 (tol 1e-4), grad norms 2.0e-04 (tol 1e-4)")) << off.out;
    const Result nan = check_bundle("train", "FAKE_DIFF=nan");
    EXPECT_NE(nan.status, 0) << nan.out;
    EXPECT_TRUE(failed(nan, "train peri bf16", "losses inf")) << nan.out;
}

TEST_F(GpuCheck, BenchmarkNeedsItsFirstLossNearLnVAndItsChoiceOfFusedProducts) {
    const Result good = check_bundle("bench");
    EXPECT_EQ(good.status, 0) << good.out;
    for (const char* first : {"12.0", "nan", "inf"}) {
        const Result far = check_bundle("bench", std::string("FAKE_FIRST_LOSS=") + first);
        EXPECT_NE(far.status, 0) << far.out;
        EXPECT_TRUE(failed(far, "bench", "within 0.5 of ln V")) << first << ":\n" << far.out;
    }
    EXPECT_NE(good.out.find("bias (-fused auto, timed at start-up: bias fused (1.000 ms fused, 2.000 plain))"),
              std::string::npos) << good.out;
    // A kind cuBLASLt refuses runs plain: named in the row, not a failure.
    const Result refused = check_bundle("bench", "FAKE_REFUSED=1");
    EXPECT_EQ(refused.status, 0) << refused.out;
    EXPECT_NE(refused.out.find("bias plain (cuBLASLt refused it)"), std::string::npos) << refused.out;
    const Result untimed = check_bundle("bench", "FAKE_FUSED=0");
    EXPECT_NE(untimed.status, 0) << untimed.out;
    EXPECT_TRUE(failed(untimed, "fused products", "timed no product")) << untimed.out;
}

TEST_F(GpuCheck, DryListsEveryRowWithoutAGpu) {
    const Result r = check("--dry --prebuilt " + bundle, "", false);
    EXPECT_EQ(r.status, 0) << r.out;
    for (const char* step : {"driver", "bundle libraries", "cuda_test_kernels", "cuda_test_model", "cuda_test_tensor_cores", "cuda_test_wmma",
                             "cuda_test_simt", "test_cli_cuda", "precision", "train pre fp32",
                             "train peri bf16", "bench", "fused products", "side by side", "plan d48 bf16", "plan gpu protocol",
                             "memcheck attention+LN", "racecheck attention+LN", "synccheck attention+LN",
                             "memcheck train fp32", "memcheck train bf16"})
        EXPECT_NE(r.out.find(" " + std::string(step) + " "), std::string::npos) << step << ":\n" << r.out;
    EXPECT_EQ(check("--bogus").status, 2);
    EXPECT_EQ(check("--only tests,bogus").status, 2);
    EXPECT_EQ(check("--limit 5m").status, 2);
}

TEST_F(GpuCheck, Bf16ToleranceGrowsWithTheStep) {
    // 5e-4 off at the first step is beyond bf16's loss tolerance there (1e-4); the same 5e-4 at
    // the last of 20 steps is within it (1e-4 + 19 · 4e-5), the differences of bf16 growing as
    // the runs go on; fp32's 1e-4 holds at every step.
    const Result early = check_bundle("train", "FAKE_DIFF=5e-4");
    EXPECT_NE(early.status, 0) << early.out;
    EXPECT_TRUE(failed(early, "train pre bf16", "losses 5.0e-04 (tol 1e-4 + 4e-5·step)")) << early.out;
    const Result late = check_bundle("train", "FAKE_DIFF=5e-4 FAKE_LAST_ONLY=1");
    EXPECT_NE(row(late, "train pre bf16").find(" ok "), std::string::npos) << late.out;
    EXPECT_TRUE(failed(late, "train pre fp32", "losses 5.0e-04")) << late.out;
    // The gradient norm has its own tolerance, 1.1e-2 at every step.
    const Result norm = check_bundle("train", "FAKE_DIFF=2e-2 FAKE_LAST_ONLY=1");
    EXPECT_TRUE(failed(norm, "train peri bf16", "grad norms 2.0e-02 (tol 1.1e-2)")) << norm.out;
}

TEST_F(GpuCheck, NoReferenceFails) {
    const Result r = check_bundle("train", "GPU_CHECK_REFERENCE=" + dir + "none.txt");
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_TRUE(failed(r, "reference", "no CPU reference")) << r.out;
}

TEST_F(GpuCheck, SigtermKeepsTheFinishedRows) {
    // The third test binary would run for ten minutes and ignores SIGTERM: the check is stopped
    // once it has started, and it ends the binary by SIGKILL 10 s later (timeout -k).
    program(bundle + "cuda_test_tensor_cores", ignores_sigterm(dir + "started"));
    double seconds = 0;
    const Result r = check_stopped("--prebuilt " + bundle + " --only tests", dir + "started", &seconds);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_LT(seconds, stopped_within(30)) << "the running test was not stopped:\n" << r.out;
    EXPECT_FALSE(still_running(dir + "started")) << "the test binary outlived the check";
    const std::string rows = read_file(dir + "out/rows.txt");
    EXPECT_NE(line_of(rows, "cuda_test_kernels").find(" ok "), std::string::npos) << rows;
    EXPECT_NE(line_of(rows, "cuda_test_model").find(" ok "), std::string::npos) << rows;
    EXPECT_NE(line_of(rows, "cuda_test_tensor_cores").find(" FAIL  unfinished: stopped by SIGTERM"), std::string::npos) << rows;
    EXPECT_EQ(rows.find("cuda_test_wmma"), std::string::npos) << rows;
    EXPECT_NE(read_file(dir + "out/summary.txt").find("4 ok, 1 failed, 0 skipped"), std::string::npos)
        << read_file(dir + "out/summary.txt");
    EXPECT_NE(read_file(dir + "out/summary.txt").find("(stopped by SIGTERM after"), std::string::npos);
    const std::string listed = dir + "listed";
    ASSERT_EQ(std::system(("tar -tzf " + dir + "out/logs.tar.gz > " + listed).c_str()), 0);
    EXPECT_NE(read_file(listed).find("cuda_test_model.log"), std::string::npos) << read_file(listed);
}

TEST_F(GpuCheck, TimeLimitKeepsTheFinishedRows) {
    // With a test binary that would run for a minute, a limit of 8 s stops the check wherever it
    // is then: the rows before are kept, the last says it was stopped.
    program(bundle + "cuda_test_tensor_cores", "#!/bin/bash\nsleep 60\n");
    const auto start = std::chrono::steady_clock::now();
    const Result r = check_bundle("tests --limit 8");
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30) << r.out;
    EXPECT_EQ(r.status, 1) << r.out;
    std::istringstream rows(read_file(dir + "out/rows.txt"));
    std::vector<std::string> lines;
    for (std::string line; std::getline(rows, line);) lines.push_back(line);
    ASSERT_GE(lines.size(), 3u) << r.out;  // the header, the driver's row, the stopped row
    for (size_t i = 1; i + 1 < lines.size(); i++) EXPECT_NE(lines[i].find(" ok "), std::string::npos) << lines[i];
    EXPECT_NE(lines.back().find(" FAIL  unfinished: stopped by its time limit of 8 s"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(lines.back()), std::string::npos) << r.out;
    EXPECT_NE(read_file(dir + "out/summary.txt").find("(stopped by its time limit of 8 s after"), std::string::npos);
}

TEST_F(GpuCheck, AChildThatIgnoresSigtermIsKilledWithinTheLimit) {
    // The second test binary ignores SIGTERM and would run for ten minutes: at the limit of 8 s
    // it is sent SIGTERM, then SIGKILL 10 s later; the rows are written before that wait.
    program(bundle + "cuda_test_model", ignores_sigterm(dir + "pid"));
    const auto start = std::chrono::steady_clock::now();
    const Result r = check_bundle("tests --limit 8");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, stopped_within(8)) << r.out;
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_FALSE(still_running(dir + "pid")) << "the test binary outlived the check";
    const std::string rows = read_file(dir + "out/rows.txt");
    EXPECT_NE(line_of(rows, "cuda_test_kernels").find(" ok "), std::string::npos) << rows;
    EXPECT_NE(line_of(rows, "cuda_test_model").find(" FAIL  unfinished: stopped by its time limit of 8 s"), std::string::npos)
        << rows;
    EXPECT_NE(read_file(dir + "out/summary.txt").find("(stopped by its time limit of 8 s after"), std::string::npos);
}

TEST_F(GpuCheck, AHangingNvidiaSmiIsStoppedWithinTheLimit) {
    // nvidia-smi never answers and ignores SIGTERM (a driver call that hangs). Under a limit of
    // 5 s, shorter than its own 20 s, the limit stops it: the driver's row says so, the results
    // are written, and nvidia-smi is killed.
    program(bin + "nvidia-smi", ignores_sigterm(dir + "pid"));
    auto start = std::chrono::steady_clock::now();
    Result r = check_bundle("driver --limit 5");
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, stopped_within(5)) << r.out;
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_FALSE(still_running(dir + "pid")) << "nvidia-smi outlived the check";
    EXPECT_NE(line_of(read_file(dir + "out/rows.txt"), "driver").find(" FAIL  unfinished: stopped by its time limit of 5 s"),
              std::string::npos)
        << read_file(dir + "out/rows.txt");
    EXPECT_NE(read_file(dir + "out/summary.txt").find("0 ok, 1 failed, 0 skipped"), std::string::npos)
        << read_file(dir + "out/summary.txt");
    // Under the default limit its own time ends it: 20 s, then SIGKILL 10 s later; nothing else runs.
    std::remove((dir + "pid").c_str());
    start = std::chrono::steady_clock::now();
    r = check_bundle("driver,tests");
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, stopped_within(20)) << r.out;
    EXPECT_FALSE(still_running(dir + "pid")) << "nvidia-smi outlived the check";
    EXPECT_TRUE(failed(r, "driver", "nvidia-smi did not answer in 20 s")) << r.out;
    EXPECT_EQ(row(r, "cuda_test_kernels"), "") << "ran on after the driver failed:\n" << r.out;
}

TEST_F(GpuCheck, ResultsGoToTheLentMachinesOutFolder) {
    // Without GPU_CHECK_OUT the results go to $OUT, the folder a lent GPU machine returns;
    // GPU_CHECK_OUT, where given, wins.
    const std::string command = "OUT=" + dir + "lent GPU_CHECK_REFERENCE=" + dir + "reference.txt PATH=" + bin +
                                ":$PATH scripts/gpu_check.sh --prebuilt " + bundle + " --only driver > " + dir + "stdout 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << read_file(dir + "stdout");
    EXPECT_NE(line_of(read_file(dir + "lent/rows.txt"), "driver").find(" ok "), std::string::npos)
        << read_file(dir + "stdout");
    EXPECT_NE(read_file(dir + "lent/summary.txt").find("(finished)"), std::string::npos);
    EXPECT_TRUE(exists(dir + "lent/logs.tar.gz"));
    const Result given = check_bundle("driver", "OUT=" + dir + "other");
    EXPECT_EQ(given.status, 0) << given.out;
    EXPECT_TRUE(exists(dir + "out/rows.txt"));
    EXPECT_FALSE(exists(dir + "other/rows.txt"));
}

TEST_F(GpuCheck, SideBySideRowHoldsTheTable) {
    // bench_gpu's fake step of 1 ms, llm.c's trainer in the bundle's anchors/llmc (20 ms a step
    // after its first five), and no torch (a module that cannot be imported comes first).
    mkdir((bundle + "anchors").c_str(), 0755);
    mkdir((bundle + "anchors/llmc").c_str(), 0755);
    program(bundle + "anchors/llmc/train_gpt2cu",
            "#!/bin/bash\nfor i in $(seq 8); do echo \"step    $i/8 | loss 10.9 (+0.00z)| norm 1.0 (+0.00z)| lr 6e-04 | "
            "20.00 ms | 1.0% bf16 MFU | 1 tok/s\"; done\n");
    mkdir((dir + "no_torch").c_str(), 0755);
    std::ofstream(dir + "no_torch/torch.py") << "raise ImportError('no torch')\n";
    const Result r = check_bundle("anchors", "PYTHONPATH=" + dir + "no_torch");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(row(r, "side by side").find(" ok    this project 16384000 tok/s"), std::string::npos) << r.out;
    EXPECT_NE(row(r, "side by side").find("PyTorch skipped; llm.c train_gpt2cu 819200 tok/s"), std::string::npos) << r.out;
    EXPECT_NE(read_file(dir + "out/side_by_side.txt").find("llm.c train_gpt2cu"), std::string::npos);
}

TEST_F(GpuCheck, SanitizerRowsReadTheXmlReports) {
    const Result clean = check_bundle("sanitizer");
    EXPECT_EQ(clean.status, 0) << clean.out;
    for (const char* step : {"memcheck train fp32", "memcheck train bf16", "memcheck attention+LN", "synccheck attention+LN",
                             "racecheck attention+LN"})
        EXPECT_NE(row(clean, step).find(" ok    0 records"), std::string::npos) << step << ":\n" << clean.out;
    EXPECT_NE(row(clean, "racecheck attention+LN").find("3 passed, 0 failed, 0 skipped"), std::string::npos) << clean.out;
    const Result record = check_bundle("sanitizer", "FAKE_SANITIZER=record");
    EXPECT_NE(record.status, 0) << record.out;
    EXPECT_TRUE(failed(record, "memcheck train bf16", "1 records")) << record.out;
    EXPECT_TRUE(failed(record, "racecheck attention+LN", "1 records")) << record.out;
    // A skipped kernel test under the sanitizer fails its row, though the sanitizer found nothing.
    program(bundle + "cuda_test_kernels", fake_gtest("skip"));
    const Result skipped = check_bundle("sanitizer");
    EXPECT_NE(skipped.status, 0) << skipped.out;
    EXPECT_TRUE(failed(skipped, "synccheck attention+LN", "0 records; 2 passed, 0 failed, 1 skipped")) << skipped.out;
}

TEST_F(GpuCheck, ASanitizerThatCannotStartIsARowOfItsOwn) {
    const Result r = check_bundle("sanitizer", "FAKE_SANITIZER=unsupported");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(row(r, "compute-sanitizer").find(" skip  it cannot start on this device (Device not supported"),
              std::string::npos)
        << r.out;
    EXPECT_EQ(row(r, "memcheck train fp32"), "") << r.out;
    EXPECT_EQ(row(r, "racecheck attention+LN"), "") << r.out;
    EXPECT_NE(r.out.find("2 ok, 0 failed, 1 skipped"), std::string::npos) << r.out;
}

TEST_F(GpuCheck, PlansAreSizedFromTheDeviceMemory) {
    const Result r = check_bundle("plan");
    EXPECT_EQ(r.status, 0) << r.out;
    // 143771 MiB, as the fake nvidia-smi reports, is 140.4 GiB.
    EXPECT_NE(row(r, "plan d48 bf16").find("140.4 GiB: ./train's largest B 36, bench_gpu's B 32"), std::string::npos) << r.out;
    EXPECT_NE(row(r, "plan gpu protocol").find("8 runs at once in 140.4 GiB"), std::string::npos) << r.out;
    const Result none = check_bundle("plan", "FAKE_LARGEST_B=0");
    EXPECT_NE(none.status, 0) << none.out;
    EXPECT_TRUE(failed(none, "plan d12 bf16", "no B of d12 fits 140.4 GiB")) << none.out;
    // 4 GiB hold one of the protocol's runs (2.37 GiB and the reserve) at a time.
    program(bin + "nvidia-smi", "#!/bin/bash\necho 'NVIDIA H100 80GB HBM3, 580.65.06, 4096 MiB'\n");
    const Result small = check_bundle("plan");
    EXPECT_NE(row(small, "plan gpu protocol").find("1 runs at once in 4.0 GiB"), std::string::npos) << small.out;
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

// The bundle's test suites carry GoogleTest, which the GPU machine need not have: the manifest
// says so of a suite linked against GoogleTest as `make gpu-bundle` links them (statically),
// with the tests it lists here, and fails on a suite that needs GoogleTest as a shared library
// (here a stand-in libgtest.so made for the test).
TEST(BundleManifest, TestSuitesCarryGoogleTest) {
    const std::string dir = fresh_folder("bundle_gtest_");
    mkdir((dir + "lib").c_str(), 0755);
    mkdir((dir + "bundle").c_str(), 0755);
    std::ofstream(dir + "suite.cpp") << "#include <gtest/gtest.h>\nTEST(Tiny, One) {}\nTEST(Tiny, Two) {}\n";
    ASSERT_EQ(std::system(("g++ -std=c++17 -o " + dir + "bundle/test_tiny " + dir +
                           "suite.cpp -lgtest -lgtest_main -pthread 2> " + dir + "build.log")
                              .c_str()),
              0)
        << read_file(dir + "build.log");
    const std::string manifest = "scripts/bundle_manifest.sh " + dir + "bundle > " + dir + "out 2>&1";
    const int carried = std::system(manifest.c_str());
    EXPECT_TRUE(WIFEXITED(carried) && WEXITSTATUS(carried) == 0) << read_file(dir + "out");
    EXPECT_NE(read_file(dir + "bundle/MANIFEST.txt").find("GoogleTest: linked in; 2 tests listed here"), std::string::npos)
        << read_file(dir + "bundle/MANIFEST.txt");
    std::ofstream(dir + "gtest.cpp") << "int gtest_stand_in() { return 1; }\n";
    std::ofstream(dir + "main.cpp") << "int gtest_stand_in();\nint main() { return gtest_stand_in() - 1; }\n";
    ASSERT_EQ(std::system(("g++ -shared -fPIC -o " + dir + "lib/libgtest.so " + dir + "gtest.cpp && g++ -o " + dir +
                           "bundle/test_shared " + dir + "main.cpp -L" + dir + "lib -lgtest -Wl,-rpath," + dir + "lib")
                              .c_str()),
              0);
    const int shared = std::system(manifest.c_str());
    EXPECT_TRUE(WIFEXITED(shared) && WEXITSTATUS(shared) == 1) << read_file(dir + "out");
    EXPECT_NE(read_file(dir + "bundle/MANIFEST.txt").find("GoogleTest: a shared library, which the GPU machine need not have"),
              std::string::npos)
        << read_file(dir + "bundle/MANIFEST.txt");
}

// The lines of a CPU reference file (scripts/gpu_reference.sh) that are not comments, per run:
// run -> [(step, loss, grad norm)].
std::map<std::string, std::vector<std::vector<double>>> reference_records(const std::string& text) {
    std::map<std::string, std::vector<std::vector<double>>> runs;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream fields(line);
        std::string run;
        double step, loss, norm;
        if (fields >> run >> step >> loss >> norm) runs[run].push_back({step, loss, norm});
    }
    return runs;
}

// The generator of gpu_check.sh's CPU reference, on a tiny model: the same file with 1 and 2
// threads (the reference is deterministic), naming its arguments and runs, a line per step.
TEST(GpuReference, TheGeneratorWritesTheSameFileWhateverTheThreads) {
    ASSERT_TRUE(exists("train")) << "needs ./train (make train)";
    const std::string dir = fresh_folder("gpu_reference_");
    const std::string args = " -init l2h2c16 -T 32 -B 2 -total_batch 64 -steps 4 -warmup 1 -seed 7 -eval_every 0 -save_every 0 -stats_every 0";
    for (const char* threads : {"1", "2"})
        ASSERT_EQ(std::system(("GPU_REFERENCE_THREADS=" + std::string(threads) + " scripts/gpu_reference.sh ./train " + dir +
                               "threads" + threads + ".txt" + args + " 2> " + dir + "log")
                                  .c_str()),
                  0)
            << read_file(dir + "log");
    const std::string one = read_file(dir + "threads1.txt"), two = read_file(dir + "threads2.txt");
    EXPECT_EQ(one, two);
    EXPECT_NE(one.find("# args:" + args + "\n"), std::string::npos) << one;
    EXPECT_NE(one.find("# run peri: -ln peri -dt 0.1\n"), std::string::npos) << one;
    const auto runs = reference_records(one);
    ASSERT_EQ(runs.size(), 2u) << one;
    for (const auto& [run, steps] : runs) {
        ASSERT_EQ(steps.size(), 4u) << run;
        for (size_t s = 0; s < steps.size(); s++) {
            EXPECT_EQ(steps[s][0], s);
            EXPECT_NEAR(steps[s][1], std::log(50257.0), 0.5) << run;  // fresh weights: about ln V
            EXPECT_TRUE(std::isfinite(steps[s][2]) && steps[s][2] > 0) << run;
        }
    }
    // A program that fails writes no file.
    EXPECT_NE(std::system(("scripts/gpu_reference.sh ./train " + dir + "bad.txt -init nonsense 2> /dev/null").c_str()), 0);
    EXPECT_FALSE(exists(dir + "bad.txt"));
}

// The committed reference (make gpu-reference) is gpu_check.sh's: d12, both placements, every
// step of its -steps, finite, the loss falling.
TEST(GpuReference, TheCommittedFileIsComplete) {
    const std::string text = read_file("test/fixtures/gpu_reference.txt");
    ASSERT_NE(text.find("# args: -init d12 "), std::string::npos) << text;
    const size_t steps_at = text.find(" -steps ");
    ASSERT_NE(steps_at, std::string::npos);
    const size_t steps = std::stoul(text.substr(steps_at + 8));
    const auto runs = reference_records(text);
    ASSERT_EQ(runs.count("pre"), 1u);
    ASSERT_EQ(runs.count("peri"), 1u);
    for (const auto& [run, records] : runs) {
        ASSERT_EQ(records.size(), steps) << run;
        for (const auto& r : records) EXPECT_TRUE(std::isfinite(r[1]) && std::isfinite(r[2])) << run;
        EXPECT_LT(records.back()[1], records.front()[1] - 1.0) << run;
    }
}

}  // namespace
