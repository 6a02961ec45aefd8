// test_files.h: the file helpers several tests share: reading a whole file, listing a folder,
// checking that a path exists, a fresh scratch folder per test (removed when the test ends),
// writing token shards in docs/formats.md §1's layout (an int32 header[256], then the uint16
// tokens), valid or deliberately broken, and reading numbers and lines out of the JSON the
// programs write. Header-only, C++17.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "model.h"
#include "util/rng.h"

// The whole content of a file (empty when it cannot be read).
inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The names of the files and folders in `folder`, sorted and joined by spaces ("a b c").
inline std::string listing(const std::string& folder) {
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) names.insert(entry.path().filename());
    std::string joined;
    for (const std::string& name : names) joined += (joined.empty() ? "" : " ") + name;
    return joined;
}

// True when something (a file or a folder) is at `path`.
inline bool exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

namespace test_files_detail {

// Removes, when a test ends, the folders fresh_folder made for it.
class FolderRemover : public testing::EmptyTestEventListener {
public:
    std::vector<std::string> folders;
    void OnTestEnd(const testing::TestInfo&) override {
        std::error_code ignored;
        for (const std::string& folder : folders) std::filesystem::remove_all(folder, ignored);
        folders.clear();
    }
};

// The one FolderRemover, registered with GoogleTest (which owns it) on first use.
inline FolderRemover& folder_remover() {
    static FolderRemover* remover = [] {
        auto* r = new FolderRemover;
        testing::UnitTest::GetInstance()->listeners().Append(r);
        return r;
    }();
    return *remover;
}

}  // namespace test_files_detail

// A fresh, empty folder for the current test's files, made by mkdtemp under testing::TempDir()
// with a name that starts with `prefix` + the test's name, so that two runs of the suite at once
// never share one; it is removed with everything in it when the test ends. The path ends in "/".
inline std::string fresh_folder(const std::string& prefix) {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    std::string name = prefix + (info ? info->name() : "") + ".XXXXXX";
    for (char& c : name)
        if (c == '/') c = '_';  // parameterised tests are named "Name/Param"
    std::string folder = testing::TempDir() + name;
    if (!mkdtemp(folder.data())) throw std::runtime_error("mkdtemp failed for " + folder);
    test_files_detail::folder_remover().folders.push_back(folder);
    return folder + "/";
}

// Writes a shard file: `header_words` (magic, version, count, ...; missing ones are 0) then `tokens`.
inline void write_token_shard(const std::string& path, std::vector<int32_t> header_words,
                              const std::vector<uint16_t>& tokens) {
    header_words.resize(256, 0);
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header_words.data()), 1024);
    out.write(reinterpret_cast<const char*>(tokens.data()), 2 * tokens.size());
}

// A valid shard of n tokens drawn uniformly below `vocab` by Rng(seed).
inline void write_random_shard(const std::string& path, int n, int vocab, uint64_t seed) {
    Rng rng(seed);
    std::vector<uint16_t> tokens(n);
    for (auto& t : tokens) t = (uint16_t)rng.below(vocab);
    write_token_shard(path, {20240520, 1, n}, tokens);
}

// The lines of `text` (a log.jsonl) that contain `marker`, in order.
inline std::vector<std::string> log_lines(const std::string& text, const std::string& marker) {
    std::vector<std::string> out;
    std::stringstream in(text);
    std::string line;
    while (std::getline(in, line))
        if (line.find(marker) != std::string::npos) out.push_back(line);
    return out;
}

// The numbers of the first `"key": x` or `"key": [x, y, ...]` (flat) in JSON text, null as NaN;
// empty when the key is absent.
inline std::vector<double> json_numbers(const std::string& text, const std::string& key) {
    std::vector<double> out;
    const std::string tag = "\"" + key + "\": ";
    size_t at = text.find(tag);
    if (at == std::string::npos) return out;
    at += tag.size();
    const bool array = text[at] == '[';
    if (array) at++;
    const size_t end = array ? text.find(']', at) : text.find_first_of(",}\n", at);
    std::stringstream in(text.substr(at, end - at));
    std::string item;
    while (std::getline(in, item, ','))
        if (item.find_first_not_of(" ") != std::string::npos)
            out.push_back(item.find("null") != std::string::npos ? NAN : std::stod(item));
    return out;
}

// The first number of json_numbers, or NaN when the key is absent.
inline double json_number(const std::string& text, const std::string& key) {
    const std::vector<double> v = json_numbers(text, key);
    return v.empty() ? NAN : v[0];
}

// Every number that `key` holds in the records with `marker` of log `a`, against log `b` (the
// same records in the same order), within `tol` relative to the largest value of that key in
// b's record.
inline void expect_log_close(const std::string& a_log, const std::string& b_log, const std::string& marker,
                             const std::string& key, double tol) {
    const std::vector<std::string> a = log_lines(a_log, marker), b = log_lines(b_log, marker);
    ASSERT_EQ(a.size(), b.size()) << marker;
    ASSERT_FALSE(b.empty()) << marker;
    for (size_t i = 0; i < a.size(); i++) {
        const std::vector<double> x = json_numbers(a[i], key), y = json_numbers(b[i], key);
        ASSERT_EQ(x.size(), y.size()) << key << " in " << b[i];
        ASSERT_FALSE(y.empty()) << key << " in " << b[i];
        double scale = 0;
        for (double v : y) scale = std::max(scale, std::fabs(v));
        for (size_t k = 0; k < x.size(); k++)
            EXPECT_NEAR(x[k], y[k], tol * scale) << key << "[" << k << "] of " << b[i];
    }
}

// The tiny model the program tests run: V = 96 (Vp = 128), maxT = 16, NH = 2, C = 16, L blocks,
// the given placement, Δt = 0.5.
inline ModelConfig tiny_model(int L, Placement placement) {
    ModelConfig cfg;
    cfg.maxT = 16; cfg.V = 96; cfg.Vp = 128; cfg.L = L; cfg.NH = 2; cfg.C = 16;
    cfg.placement = placement;
    cfg.dt = 0.5f;
    return cfg;
}

// Writes a fresh initialisation of cfg (drawn with `seed`) as a checkpoint at path.
inline void write_fresh_checkpoint(const std::string& path, const ModelConfig& cfg, uint64_t seed) {
    std::vector<float> params(num_parameters(cfg));
    init_parameters(cfg, params.data(), seed);
    write_checkpoint(path, cfg, params.data());
}
