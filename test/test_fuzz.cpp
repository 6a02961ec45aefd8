// The libFuzzer targets (test/fuzz_*.cpp, docs/testing.md §4) for a few seconds each on their
// committed seed corpus test/fuzz/NAME/, so that a reader that crashes, leaks, overflows or
// throws anything but a clean refusal on some input fails `make test`. New inputs go to a scratch
// folder, never into the committed corpus. Skips when the targets were not built (no clang
// libFuzzer runtime).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "test_files.h"

namespace {

constexpr int kSeconds = 3;

void fuzz(const std::string& name) {
    const std::string bin = "build/fuzz/fuzz_" + name;
    if (!exists(bin)) GTEST_SKIP() << bin << " not built (needs clang++ with its libFuzzer runtime)";
    const std::string scratch = fresh_folder("fuzz_"), log = scratch + "log", corpus = scratch + "corpus";
    std::filesystem::create_directories(corpus);
    const std::string command = bin + " -max_total_time=" + std::to_string(kSeconds) + " -timeout=10 -rss_limit_mb=2048 " +
                                "-artifact_prefix=" + scratch + " " + corpus + " test/fuzz/" + name + " > " + log + " 2>&1";
    const int raw = std::system(command.c_str());
    const std::string output = read_file(log);
    EXPECT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 0) << output.substr(output.size() > 6000 ? output.size() - 6000 : 0);
    EXPECT_NE(output.find("Done "), std::string::npos) << output;
}

TEST(Fuzz, ShardReader) { fuzz("shard"); }
TEST(Fuzz, CheckpointReader) { fuzz("checkpoint"); }
TEST(Fuzz, OptimiserStateReader) { fuzz("state"); }
TEST(Fuzz, TokenizerFileReader) { fuzz("tokenizer"); }
TEST(Fuzz, FlagParser) { fuzz("flags"); }
TEST(Fuzz, ConfigReader) { fuzz("config"); }
TEST(Fuzz, SafetensorsReader) { fuzz("safetensors"); }

}  // namespace
