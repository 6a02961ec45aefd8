// test_files.h: the file helpers several tests share: reading a whole file, checking that a path
// exists, a fresh scratch folder per test, writing token shards in SPEC §3's layout (an int32
// header[256], then the uint16 tokens), valid or deliberately broken, and reading numbers out of
// the JSON the programs write. Header-only, C++17.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "rng.h"

// The whole content of a file (empty when it cannot be read).
inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// True when something (a file or a folder) is at `path`.
inline bool exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

// A fresh, empty folder for the current test's files, under testing::TempDir() and named
// `prefix` + the test's name; the path ends in "/".
inline std::string fresh_folder(const std::string& prefix) {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    const std::string folder = testing::TempDir() + prefix + info->name() + "/";
    std::filesystem::remove_all(folder);
    std::filesystem::create_directories(folder);
    return folder;
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
