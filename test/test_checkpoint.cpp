// Model checkpoints (docs/formats.md), fresh initialisation (docs/model.md §1–§4) and atomic file writes:
//   * write_checkpoint / read_checkpoint round-trip for each placement, header version 3 for
//     Pre-LN with Δt = 1 (llm.c's file) and 100 otherwise, placement and Δt kept bit for bit;
//   * refusal, with an InputError naming the file, of broken files;
//   * an llm.c version-3 file built here by hand reads as Pre-LN, Δt = 1, same floats;
//   * init_parameters follows docs/model.md §1–§4; model_size reads the fresh sizes ./train -init takes;
//   * write_file_atomically leaves no temporary behind and never a partial target.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "run/checkpoint.h"
#include "util/rng.h"

namespace {

namespace fs = std::filesystem;

ModelConfig tiny(Placement p, float dt) {
    ModelConfig c;
    c.maxT = 8; c.V = 11; c.Vp = 16; c.L = 2; c.NH = 2; c.C = 8;
    c.placement = p;
    c.dt = dt;
    return c;
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
    Rng rng(seed);
    std::vector<float> v(n);
    for (float& x : v) x = (float)rng.normal();
    return v;
}

std::vector<char> file_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void put_bytes(const std::string& path, const void* data, size_t n) {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    ASSERT_EQ(std::fwrite(data, 1, n, f), n);
    ASSERT_EQ(std::fclose(f), 0);
}

std::array<int32_t, 256> read_header(const std::string& path) {
    std::array<int32_t, 256> h{};
    const std::vector<char> b = file_bytes(path);
    if (b.size() >= sizeof(h)) std::memcpy(h.data(), b.data(), sizeof(h));
    return h;
}

// A fresh temporary directory per test, removed afterwards.
class CheckpointTest : public ::testing::Test {
protected:
    void SetUp() override {
        std::string tmpl = (fs::temp_directory_path() / "ckpt_test.XXXXXX").string();
        ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
        dir = tmpl;
    }
    void TearDown() override {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
    std::string path(const std::string& name) const { return dir + "/" + name; }

    // read_checkpoint must throw InputError whose message names the file.
    void expect_refused(const std::string& file, const char* why) {
        std::vector<float> params;
        try {
            read_checkpoint(file, &params);
            ADD_FAILURE() << "accepted a checkpoint with " << why;
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find(file), std::string::npos)
                << "message for " << why << " does not name the file: " << e.what();
        } catch (const std::exception& e) {
            ADD_FAILURE() << why << ": threw something other than InputError: " << e.what();
        }
    }

    // A valid checkpoint of tiny(pl, dt) at `name`; returns its bytes.
    std::vector<char> valid_file(const std::string& name, Placement pl = Placement::Post, float dt = 0.5f) {
        const ModelConfig cfg = tiny(pl, dt);
        const std::vector<float> p = random_floats(num_parameters(cfg), 5);
        write_checkpoint(path(name), cfg, p.data());
        return file_bytes(path(name));
    }

    std::string dir;
};

// ---------------------------------------------------------------------------------------------
// Round trip

struct RoundTrip {
    Placement placement;
    float dt;
    int version;
};

void PrintTo(const RoundTrip& r, std::ostream* os) {
    *os << placement_name(r.placement) << " dt=" << r.dt << " (version " << r.version << ")";
}

class CheckpointRoundTrip : public CheckpointTest, public ::testing::WithParamInterface<RoundTrip> {};

TEST_P(CheckpointRoundTrip, WritesTheHeaderAndReadsBackEverythingBitForBit) {
    const RoundTrip rt = GetParam();
    const ModelConfig cfg = tiny(rt.placement, rt.dt);
    const std::vector<float> params = random_floats(num_parameters(cfg), 42);
    const std::string file = path("model.bin");
    write_checkpoint(file, cfg, params.data());

    // The file: header then exactly the parameters.
    const size_t expect_floats = num_parameters(cfg);
    EXPECT_EQ(fs::file_size(file), 256 * 4 + expect_floats * 4);
    const std::array<int32_t, 256> h = read_header(file);
    EXPECT_EQ(h[0], 20240326);
    EXPECT_EQ(h[1], rt.version);
    EXPECT_EQ(h[2], cfg.maxT);
    EXPECT_EQ(h[3], cfg.V);
    EXPECT_EQ(h[4], cfg.L);
    EXPECT_EQ(h[5], cfg.NH);
    EXPECT_EQ(h[6], cfg.C);
    EXPECT_EQ(h[7], cfg.Vp);
    if (rt.version == 100) {
        EXPECT_EQ(h[8], (int32_t)rt.placement);
        uint32_t dt_bits;
        std::memcpy(&dt_bits, &rt.dt, 4);
        EXPECT_EQ((uint32_t)h[9], dt_bits);
    }
    const std::vector<char> bytes = file_bytes(file);
    EXPECT_EQ(0, std::memcmp(bytes.data() + 1024, params.data(), expect_floats * 4));
    EXPECT_FALSE(fs::exists(file + ".tmp"));

    // Read back.
    std::vector<float> back;
    const ModelConfig got = read_checkpoint(file, &back);
    EXPECT_EQ(got.maxT, cfg.maxT);
    EXPECT_EQ(got.V, cfg.V);
    EXPECT_EQ(got.Vp, cfg.Vp);
    EXPECT_EQ(got.L, cfg.L);
    EXPECT_EQ(got.NH, cfg.NH);
    EXPECT_EQ(got.C, cfg.C);
    EXPECT_EQ(got.placement, cfg.placement);
    EXPECT_EQ(0, std::memcmp(&got.dt, &cfg.dt, sizeof(float))) << "dt " << got.dt << " vs " << cfg.dt;
    ASSERT_EQ(back.size(), params.size());
    EXPECT_EQ(0, std::memcmp(back.data(), params.data(), params.size() * 4));
}

INSTANTIATE_TEST_SUITE_P(
    Placements, CheckpointRoundTrip,
    ::testing::Values(RoundTrip{Placement::Pre, 1.0f, 3}, RoundTrip{Placement::Pre, 0.1f, 100},
                      RoundTrip{Placement::Post, 1.0f, 100}, RoundTrip{Placement::Post, 0.1f, 100},
                      RoundTrip{Placement::Peri, 1.0f, 100}, RoundTrip{Placement::Peri, 0.1f, 100},
                      RoundTrip{Placement::Pre, 0.37f, 100}),
    [](const ::testing::TestParamInfo<RoundTrip>& info) {
        return std::string(placement_name(info.param.placement)) + "_v" + std::to_string(info.param.version) + "_" +
               std::to_string(info.index);
    });

TEST(CheckpointLayout, PeriHasFourExtraLayerNormTensors) {
    const ModelConfig pre = tiny(Placement::Pre, 1.0f), post = tiny(Placement::Post, 1.0f),
                      peri = tiny(Placement::Peri, 1.0f);
    const size_t L = pre.L, C = pre.C;
    EXPECT_EQ(num_parameters(post), num_parameters(pre));
    EXPECT_EQ(num_parameters(peri), num_parameters(pre) + 4 * L * C);
    // docs/formats.md §2 order and sizes, written out.
    const size_t Vp = pre.Vp, maxT = pre.maxT;
    const size_t sizes[] = {Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
                            L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C, L * C, L * C, L * C, L * C};
    const auto got = param_sizes(peri);
    const auto off = param_offsets(peri);
    size_t at = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        EXPECT_EQ(got[i], sizes[i]) << param_name(i);
        EXPECT_EQ(off[i], at) << param_name(i);
        at += sizes[i];
    }
    const auto got_pre = param_sizes(pre);
    for (int i = P_LN1OW; i <= P_LN2OB; i++) EXPECT_EQ(got_pre[i], 0u) << param_name(i);
}

// ---------------------------------------------------------------------------------------------
// llm.c's version-3 file, built by hand

TEST_F(CheckpointTest, ReadsAHandBuiltLlmcVersion3File) {
    const int maxT = 8, V = 11, L = 2, NH = 2, C = 8, Vp = 16;
    int32_t header[256] = {0};
    header[0] = 20240326;
    header[1] = 3;
    header[2] = maxT; header[3] = V; header[4] = L; header[5] = NH; header[6] = C; header[7] = Vp;
    // llm.c's GPT-2: wte, wpe, then 12 per-layer tensors, then lnf; no Peri tensors.
    const size_t n = (size_t)Vp * C + (size_t)maxT * C + (size_t)L * (12 * C * C + 13 * C) + 2 * C;
    const std::vector<float> floats = random_floats(n, 77);
    const std::string file = path("llmc.bin");
    FILE* f = std::fopen(file.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(header, sizeof(int32_t), 256, f), 256u);
    ASSERT_EQ(std::fwrite(floats.data(), sizeof(float), n, f), n);
    ASSERT_EQ(std::fclose(f), 0);

    std::vector<float> got;
    const ModelConfig cfg = read_checkpoint(file, &got);
    EXPECT_EQ(cfg.placement, Placement::Pre);
    EXPECT_EQ(cfg.dt, 1.0f);
    EXPECT_EQ(cfg.maxT, maxT);
    EXPECT_EQ(cfg.V, V);
    EXPECT_EQ(cfg.L, L);
    EXPECT_EQ(cfg.NH, NH);
    EXPECT_EQ(cfg.C, C);
    EXPECT_EQ(cfg.Vp, Vp);
    ASSERT_EQ(got.size(), n);
    EXPECT_EQ(0, std::memcmp(got.data(), floats.data(), n * 4));

    // And writing that model back produces the very same bytes (llm.c can read ours).
    const std::string again = path("again.bin");
    write_checkpoint(again, cfg, got.data());
    EXPECT_EQ(file_bytes(again), file_bytes(file));
}

// ---------------------------------------------------------------------------------------------
// Refusals

TEST_F(CheckpointTest, RefusesAMissingFile) { expect_refused(path("does_not_exist.bin"), "a missing file"); }

TEST_F(CheckpointTest, RefusesAnEmptyFile) {
    put_bytes(path("empty.bin"), "", 0);
    expect_refused(path("empty.bin"), "an empty file");
}

TEST_F(CheckpointTest, RefusesWrongMagic) {
    std::vector<char> b = valid_file("m.bin");
    const int32_t bad = 20240520;  // a token shard's magic
    std::memcpy(b.data(), &bad, 4);
    put_bytes(path("m.bin"), b.data(), b.size());
    expect_refused(path("m.bin"), "a wrong magic number");
}

TEST_F(CheckpointTest, RefusesATruncatedHeader) {
    const std::vector<char> b = valid_file("h.bin");
    put_bytes(path("h.bin"), b.data(), 100);
    expect_refused(path("h.bin"), "a truncated header");
    put_bytes(path("h.bin"), b.data(), 1023);
    expect_refused(path("h.bin"), "a header one byte short");
}

TEST_F(CheckpointTest, RefusesASizeNotMatchingTheHeader) {
    const std::vector<char> b = valid_file("s.bin");
    put_bytes(path("s.bin"), b.data(), b.size() - 4);
    expect_refused(path("s.bin"), "one float missing");
    put_bytes(path("s.bin"), b.data(), 1024);
    expect_refused(path("s.bin"), "a header and no parameters");
    std::vector<char> longer = b;
    longer.insert(longer.end(), 4, 0);
    put_bytes(path("s.bin"), longer.data(), longer.size());
    expect_refused(path("s.bin"), "one float too many");
    // A header that claims a Peri model over a Post model's parameters.
    std::vector<char> peri = b;
    const int32_t two = 2;
    std::memcpy(peri.data() + 8 * 4, &two, 4);
    put_bytes(path("s.bin"), peri.data(), peri.size());
    expect_refused(path("s.bin"), "a Peri header on a Post-sized file");
}

TEST_F(CheckpointTest, RefusesAnUnknownVersion) {
    for (int32_t version : {1, 2, 4, 5, 99, 101, -3}) {
        std::vector<char> b = valid_file("v.bin");
        std::memcpy(b.data() + 4, &version, 4);
        put_bytes(path("v.bin"), b.data(), b.size());
        expect_refused(path("v.bin"), ("version " + std::to_string(version)).c_str());
    }
}

TEST_F(CheckpointTest, RefusesAnUnknownPlacement) {
    for (int32_t placement : {3, 4, -1, 1000}) {
        std::vector<char> b = valid_file("p.bin");
        std::memcpy(b.data() + 8 * 4, &placement, 4);
        put_bytes(path("p.bin"), b.data(), b.size());
        expect_refused(path("p.bin"), ("placement " + std::to_string(placement)).c_str());
    }
}

TEST_F(CheckpointTest, RefusesImpossibleSizesAndDt) {
    {  // C not divisible by NH
        std::vector<char> b = valid_file("c.bin");
        const int32_t nh = 3;
        std::memcpy(b.data() + 5 * 4, &nh, 4);
        put_bytes(path("c.bin"), b.data(), b.size());
        expect_refused(path("c.bin"), "C not divisible by NH");
    }
    {  // Vp < V
        std::vector<char> b = valid_file("c.bin");
        const int32_t vp = 10;
        std::memcpy(b.data() + 7 * 4, &vp, 4);
        put_bytes(path("c.bin"), b.data(), b.size());
        expect_refused(path("c.bin"), "Vp < V");
    }
    for (float dt : {0.0f, -1.0f, NAN, INFINITY}) {
        std::vector<char> b = valid_file("d.bin");
        std::memcpy(b.data() + 9 * 4, &dt, 4);
        put_bytes(path("d.bin"), b.data(), b.size());
        expect_refused(path("d.bin"), ("dt " + std::to_string(dt)).c_str());
    }
}

// ---------------------------------------------------------------------------------------------
// Fresh initialisation (docs/model.md §1–§4)

// Sample mean and standard deviation of n floats.
void moments(const float* x, size_t n, double* mean, double* std) {
    double s = 0, sq = 0;
    for (size_t i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (size_t i = 0; i < n; i++) sq += (x[i] - *mean) * (x[i] - *mean);
    *std = std::sqrt(sq / n);
}

TEST(InitParameters, FollowsTheSpec) {
    ModelConfig cfg;
    cfg.maxT = 64; cfg.V = 500; cfg.Vp = 512; cfg.L = 4; cfg.NH = 4; cfg.C = 64;
    cfg.placement = Placement::Peri;  // all 20 tensors
    std::vector<float> p(num_parameters(cfg));
    init_parameters(cfg, p.data(), 1337);
    const auto sizes = param_sizes(cfg);
    const auto off = param_offsets(cfg);
    const double residual_std = 0.02 / std::sqrt(2.0 * cfg.L);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        const std::string name = param_name(i);
        const float* x = p.data() + off[i];
        const size_t n = sizes[i];
        ASSERT_GT(n, 0u) << name;
        if (name == "ln1w" || name == "ln2w" || name == "lnfw" || name == "ln1ow" || name == "ln2ow") {
            for (size_t k = 0; k < n; k++) ASSERT_EQ(x[k], 1.0f) << name << " gain " << k;
        } else if (name == "ln1b" || name == "ln2b" || name == "lnfb" || name == "ln1ob" || name == "ln2ob" ||
                   name == "qkvb" || name == "attprojb" || name == "fcb" || name == "fcprojb") {
            for (size_t k = 0; k < n; k++) ASSERT_EQ(x[k], 0.0f) << name << " bias " << k;
        } else {
            const double expect_std = (name == "attprojw" || name == "fcprojw") ? residual_std : 0.02;
            double mean, std;
            moments(x, n, &mean, &std);
            // Standard error of the sample std is std/sqrt(2n) (< 1.2% here); allow 5%.
            EXPECT_NEAR(std, expect_std, 0.05 * expect_std) << name << " (n=" << n << ")";
            EXPECT_NEAR(mean, 0.0, 5 * expect_std / std::sqrt((double)n)) << name;
            size_t zeros = 0, beyond_4sd = 0;
            for (size_t k = 0; k < n; k++) {
                zeros += x[k] == 0.0f;
                beyond_4sd += std::fabs(x[k]) > 4 * expect_std;
            }
            EXPECT_LT(zeros, 3u) << name;
            EXPECT_LT(beyond_4sd, n / 1000 + 5) << name << ": tails too heavy for a normal";
        }
    }
}

TEST(InitParameters, SameSeedSameModelOtherSeedOtherModel) {
    const ModelConfig cfg = tiny(Placement::Pre, 1.0f);
    const size_t n = num_parameters(cfg);
    std::vector<float> a(n), b(n), c(n);
    init_parameters(cfg, a.data(), 7);
    init_parameters(cfg, b.data(), 7);
    init_parameters(cfg, c.data(), 8);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), n * 4));
    size_t differ = 0, random_entries = 0;
    const auto sizes = param_sizes(cfg);
    const auto off = param_offsets(cfg);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        const std::string name = param_name(i);
        if (name != "wte" && name != "wpe" && name != "qkvw" && name != "attprojw" && name != "fcw" && name != "fcprojw")
            continue;
        for (size_t k = off[i]; k < off[i] + sizes[i]; k++) {
            random_entries++;
            differ += a[k] != c[k];
        }
    }
    EXPECT_GT(differ, random_entries * 99 / 100);
}

// ---------------------------------------------------------------------------------------------
// model_size: the sizes ./train -init accepts for a fresh model

// The sizes model_size gives `spec`, as {L, NH, C, V, Vp, maxT}.
std::array<int, 6> sizes_of(const std::string& spec) {
    ModelConfig c;
    EXPECT_TRUE(model_size(spec, &c)) << spec;
    return {c.L, c.NH, c.C, c.V, c.Vp, c.maxT};
}

TEST(ModelSize, NamedSizesAreGpt2s) {
    EXPECT_EQ(sizes_of("d12"), (std::array<int, 6>{12, 12, 768, 50257, 50304, 1024}));
    EXPECT_EQ(sizes_of("d48"), (std::array<int, 6>{48, 25, 1600, 50257, 50304, 1024}));
}

TEST(ModelSize, CustomSizeWithAndWithoutVocabularyAndLength) {
    EXPECT_EQ(sizes_of("l16h2c64"), (std::array<int, 6>{16, 2, 64, 50257, 50304, 1024}));
    EXPECT_EQ(sizes_of("l2h2c16v96t16"), (std::array<int, 6>{2, 2, 16, 96, 128, 16}));
    EXPECT_EQ(sizes_of("l3h1c8t32"), (std::array<int, 6>{3, 1, 8, 50257, 50304, 32}));  // V omitted
    EXPECT_EQ(sizes_of("l1h1c1v64"), (std::array<int, 6>{1, 1, 1, 64, 64, 1024}));      // Vp = V: a multiple of 64
}

TEST(ModelSize, OtherShapesAreNotSizes) {
    ModelConfig c;
    for (const char* spec : {"", "d7", "model.bin", "l16h2", "l16h2c", "l16h2c64x", "l16h2c64t16v96", "L16H2C64",
                             "l16h2c64v", "l-1h2c64", "l 16h2c64", "xl16h2c64", "l0h2c64x"})
        EXPECT_FALSE(model_size(spec, &c)) << spec;
}

TEST(ModelSize, RefusesUnusableCustomSizes) {
    ModelConfig c;
    struct Case { const char* spec; const char* why; };
    for (const Case& k : {Case{"l16h3c64", "not divisible by heads"}, Case{"l0h2c64", "L must be 1.."},
                          Case{"l16h0c64", "NH must be 1.."}, Case{"l2h2c16v0", "V must be 1.."},
                          Case{"l2h2c16t0", "maxT must be 1.."}, Case{"l99999999999999999999h1c1", "L must be 1.."},
                          Case{"l1h1c100000", "C must be 1.."}}) {
        try {
            model_size(k.spec, &c);
            ADD_FAILURE() << k.spec << " was accepted";
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find(k.why), std::string::npos) << k.spec << ": " << e.what();
            EXPECT_NE(std::string(e.what()).find(k.spec), std::string::npos) << e.what();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// write_file_atomically

TEST_F(CheckpointTest, AtomicWriteLeavesNoTemporary) {
    const std::string file = path("out.bin");
    const char a[] = "hello ", b[] = "world";
    write_file_atomically(file, {{a, 6}, {b, 5}});
    const std::vector<char> got = file_bytes(file);
    EXPECT_EQ(std::string(got.begin(), got.end()), "hello world");
    EXPECT_FALSE(fs::exists(file + ".tmp"));
    // Overwriting replaces the whole content.
    write_file_atomically(file, {{b, 5}});
    const std::vector<char> got2 = file_bytes(file);
    EXPECT_EQ(std::string(got2.begin(), got2.end()), "world");
    EXPECT_FALSE(fs::exists(file + ".tmp"));
    size_t entries = 0;
    for (const auto& e : fs::directory_iterator(dir)) { (void)e; entries++; }
    EXPECT_EQ(entries, 1u);
}

TEST_F(CheckpointTest, AtomicWriteIntoAMissingDirectoryCreatesNothing) {
    const std::string file = path("no_such_dir/model.bin");
    const char a[] = "data";
    EXPECT_THROW(write_file_atomically(file, {{a, 4}}), InputError);
    EXPECT_FALSE(fs::exists(file));
    EXPECT_FALSE(fs::exists(file + ".tmp"));
    EXPECT_FALSE(fs::exists(path("no_such_dir")));
    // write_checkpoint goes the same way, with a message naming the file.
    const ModelConfig cfg = tiny(Placement::Pre, 1.0f);
    const std::vector<float> p(num_parameters(cfg), 0.5f);
    try {
        write_checkpoint(file, cfg, p.data());
        ADD_FAILURE() << "write_checkpoint into a missing directory did not throw";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(file));
}

// When the final rename fails (the target is a directory), the temporary is removed and the
// target is left as it was.
TEST_F(CheckpointTest, AtomicWriteWhoseRenameFailsRemovesTheTemporary) {
    const std::string target = path("a_directory");
    fs::create_directory(target);
    fs::create_directory(target + "/inside");  // non-empty, so no platform can replace it
    const char a[] = "data";
    EXPECT_THROW(write_file_atomically(target, {{a, 4}}), InputError);
    EXPECT_TRUE(fs::is_directory(target));
    EXPECT_TRUE(fs::is_directory(target + "/inside"));
    EXPECT_FALSE(fs::exists(target + ".tmp"));
}

// When the directory is not writable. Root ignores permissions, so this only runs as an
// ordinary user.
TEST_F(CheckpointTest, AtomicWriteIntoAReadOnlyDirectoryCreatesNothing) {
    if (geteuid() == 0) GTEST_SKIP() << "running as root, which may write anywhere (the missing-directory case covers it)";
    const std::string ro = path("ro");
    fs::create_directory(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    const char a[] = "data";
    EXPECT_THROW(write_file_atomically(ro + "/m.bin", {{a, 4}}), InputError);
    EXPECT_FALSE(fs::exists(ro + "/m.bin"));
    EXPECT_FALSE(fs::exists(ro + "/m.bin.tmp"));
    fs::permissions(ro, fs::perms::owner_all);
}

TEST(ModelSize, CustomSizesAtTheirLimits) {
    ModelConfig c;
    EXPECT_TRUE(model_size("l4096h1c1", &c));  // each limit itself is a size
    EXPECT_EQ(c.L, 4096);
    EXPECT_TRUE(model_size("l1h4096c4096", &c));
    EXPECT_TRUE(model_size("l1h1c65536", &c));
    EXPECT_TRUE(model_size("l1h1c1v16777216t1048576", &c));
    EXPECT_EQ(c.V, 1 << 24);
    EXPECT_EQ(c.maxT, 1 << 20);
    for (const char* spec : {"l4097h1c1", "l1h4097c4097", "l1h1c65537", "l1h1c1v16777217", "l1h1c1t1048577"})
        EXPECT_THROW(model_size(spec, &c), InputError) << spec;
}

TEST(ModelSize, ValidateConfigAtItsEdges) {
    ModelConfig ok;
    ok.maxT = 1; ok.V = 1; ok.Vp = 1; ok.L = 1; ok.NH = 1; ok.C = 1; ok.dt = 1.0f;  // the smallest sizes, Vp = V
    EXPECT_NO_THROW(validate_config(ok, "ok"));
    for (int ModelConfig::*size : {&ModelConfig::maxT, &ModelConfig::V, &ModelConfig::L, &ModelConfig::NH, &ModelConfig::C}) {
        ModelConfig zero = ok;
        zero.*size = 0;
        EXPECT_THROW(validate_config(zero, "zero"), InputError);
    }
    ModelConfig narrow = ok;
    narrow.V = 2;  // Vp 1 < V 2
    EXPECT_THROW(validate_config(narrow, "narrow"), InputError);
}

TEST_F(CheckpointTest, RefusesADamagedOptimiserState) {
    TrainState s;
    s.steps_done = 3;
    s.m.assign(16, 0.5f);
    s.v.assign(16, 0.25f);
    write_state(path("state.bin"), s, Placement::Pre);
    EXPECT_EQ(read_state(path("state.bin"), 16, Placement::Pre).v, s.v);
    std::string whole;
    {
        std::ifstream in(path("state.bin"), std::ios::binary);
        whole.assign(std::istreambuf_iterator<char>(in), {});
    }
    const auto refusal = [&](const std::string& bytes, size_t params) -> std::string {
        std::ofstream(path("damaged.bin"), std::ios::binary) << bytes;
        try {
            read_state(path("damaged.bin"), params, Placement::Pre);
        } catch (const InputError& e) {
            return e.what();
        }
        return "no error";
    };
    EXPECT_NE(refusal(whole.substr(0, 1000), 16).find(": truncated optimiser state"), std::string::npos);
    EXPECT_NE(refusal(whole.substr(0, whole.size() - 4), 16).find(": truncated optimiser state"), std::string::npos);
    std::string other = whole;
    other[0] ^= 1;
    EXPECT_NE(refusal(other, 16).find(": not an optimiser state file"), std::string::npos);
    EXPECT_NE(refusal(whole, 17).find(": parameter count does not match its model file"), std::string::npos);
    EXPECT_NE(refusal(whole + "x", 16).find(": file is longer than its header says"), std::string::npos);
}

TEST_F(CheckpointTest, ATruncatedHeaderIsSaidSo) {
    const std::vector<char> b = valid_file("h.bin");
    put_bytes(path("h.bin"), b.data(), 1023);  // one byte short of the 256-word header
    std::vector<float> params;
    try {
        read_checkpoint(path("h.bin"), &params);
        ADD_FAILURE() << "a truncated header was read";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find(": truncated checkpoint header"), std::string::npos) << e.what();
    }
}

}  // namespace
