// test_files.h: the file helpers several tests share: reading a whole file, checking that a path
// exists, a fresh scratch folder per test, and writing token shards in SPEC §3's layout (an int32
// header[256], then the uint16 tokens), valid or deliberately broken. Header-only, C++17.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

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
