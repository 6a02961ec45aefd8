// GPT-2 weights in Hugging Face's safetensors layout (run/safetensors.h, docs/formats.md §5):
//   * a tiny GPT-2 file written here by hand, as the `safetensors` library lays one out (tensors
//     sorted by name, compact JSON header padded with spaces to 8 bytes), loads with every
//     Conv1D weight transposed into our (out, in) layout and wte padded with zero rows;
//   * import → checkpoint → export gives back the input byte for byte (Pre-LN and Peri-LN);
//   * BF16 and F16 tensors convert exactly;
//   * malformed files and files of another model are refused with one InputError naming them;
//   * through the programs: ./eval -model X.safetensors -export Y.safetensors is the identity,
//     ./train -init X.safetensors trains from the same weights as the checkpoint, a placement
//     that contradicts the file is refused with exit 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "run/safetensors.h"
#include "test_files.h"

namespace {

// One tensor of a hand-made file: shape, dtype and raw little-endian bytes.
struct Tensor {
    std::vector<uint64_t> shape;
    std::string dtype;
    std::string bytes;
};

std::string f32_bytes(const std::vector<float>& v) { return std::string((const char*)v.data(), v.size() * 4); }

// A safetensors file as the `safetensors` library writes one: u64 header length, the header
// {"__metadata__": {...}, name: {"dtype", "shape", "data_offsets"}, ...} in name order without
// spaces, padded with spaces to a multiple of 8 bytes, then the tensors' bytes in that order.
std::string hand_made_file(const std::map<std::string, Tensor>& tensors, const std::map<std::string, std::string>& metadata) {
    std::string header = "{\"__metadata__\":{", data;
    bool first = true;
    for (const auto& [k, v] : metadata) {
        header += std::string(first ? "" : ",") + "\"" + k + "\":\"" + v + "\"";
        first = false;
    }
    header += "}";
    for (const auto& [name, t] : tensors) {  // std::map: sorted by name
        std::string shape;
        for (uint64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
        header += ",\"" + name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
                  std::to_string(data.size()) + "," + std::to_string(data.size() + t.bytes.size()) + "]}";
        data += t.bytes;
    }
    header += "}";
    while (header.size() % 8) header += ' ';
    std::string file(8, '\0');
    for (int b = 0; b < 8; b++) file[b] = (char)((header.size() >> (8 * b)) & 0xFF);
    return file + header + data;
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary).write(bytes.data(), (std::streamsize)bytes.size());
}

constexpr int L = 2, C = 8, V = 11, MAXT = 8;

// Random F32 tensors of a GPT-2 with L blocks, C channels, V tokens, maxT positions, in the
// names and (in, out) Conv1D shapes of Hugging Face's files; Peri-LN's four extra norms with
// `peri`.
std::map<std::string, Tensor> gpt2_file_tensors(bool peri, uint64_t seed) {
    Rng rng(seed);
    std::map<std::string, Tensor> t;
    auto add = [&](const std::string& name, std::vector<uint64_t> shape) {
        size_t n = 1;
        for (uint64_t d : shape) n *= d;
        std::vector<float> v(n);
        for (float& x : v) x = (float)rng.normal();
        t[name] = {shape, "F32", f32_bytes(v)};
    };
    add("wte.weight", {V, C});
    add("wpe.weight", {MAXT, C});
    add("ln_f.weight", {C});
    add("ln_f.bias", {C});
    for (int l = 0; l < L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        for (const char* ln : {"ln_1", "ln_2"}) {
            add(h + ln + ".weight", {C});
            add(h + ln + ".bias", {C});
        }
        add(h + "attn.c_attn.weight", {C, 3 * C});
        add(h + "attn.c_attn.bias", {3 * C});
        add(h + "attn.c_proj.weight", {C, C});
        add(h + "attn.c_proj.bias", {C});
        add(h + "mlp.c_fc.weight", {C, 4 * C});
        add(h + "mlp.c_fc.bias", {4 * C});
        add(h + "mlp.c_proj.weight", {4 * C, C});
        add(h + "mlp.c_proj.bias", {C});
        if (peri)
            for (const char* ln : {"ln_1o", "ln_2o"}) {
                add(h + ln + ".weight", {C});
                add(h + ln + ".bias", {C});
            }
    }
    return t;
}

const std::map<std::string, std::string> kPreMetadata = {{"format", "pt"}, {"n_head", "2"}};
const std::map<std::string, std::string> kPeriMetadata = {{"dt", "0.1"}, {"format", "pt"}, {"n_head", "2"}, {"placement", "peri"}};

float element(const Tensor& t, size_t i) {
    float x;
    std::memcpy(&x, t.bytes.data() + 4 * i, 4);
    return x;
}

class Safetensors : public ::testing::Test {
protected:
    std::string dir;
    void SetUp() override { dir = fresh_folder("safetensors_"); }

    // Expects `bytes`, as a file, to be refused with a message containing `what`.
    void expect_refused(const std::string& bytes, const std::string& what) {
        const std::string path = dir + "bad.safetensors";
        write_bytes(path, bytes);
        std::vector<float> params;
        try {
            read_model_file(path, &params);
            ADD_FAILURE() << "accepted; expected a refusal mentioning: " << what;
        } catch (const InputError& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
        }
    }
};

TEST_F(Safetensors, LoadsGpt2TensorsTransposingConv1DWeights) {
    const auto tensors = gpt2_file_tensors(false, 1);
    write_bytes(dir + "m.safetensors", hand_made_file(tensors, kPreMetadata));
    std::vector<float> params;
    const ModelConfig m = read_model_file(dir + "m.safetensors", &params);
    EXPECT_EQ(m.L, L); EXPECT_EQ(m.C, C); EXPECT_EQ(m.NH, 2); EXPECT_EQ(m.V, V); EXPECT_EQ(m.Vp, 64); EXPECT_EQ(m.maxT, MAXT);
    EXPECT_EQ(m.placement, Placement::Pre);
    EXPECT_EQ(m.dt, 1.0f);
    ASSERT_EQ(params.size(), num_parameters(m));
    const ParamTensors<float> p = param_tensors(params.data(), m);
    for (int v = 0; v < m.Vp; v++)
        for (int c = 0; c < C; c++)
            EXPECT_EQ(p.wte[v * C + c], v < V ? element(tensors.at("wte.weight"), v * C + c) : 0.0f) << v << "," << c;
    for (int l = 0; l < L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        for (int o = 0; o < 3 * C; o++)  // ours (3C, C): row o; theirs (C, 3C): column o
            for (int i = 0; i < C; i++)
                EXPECT_EQ(p.qkvw[(size_t)l * 3 * C * C + o * C + i], element(tensors.at(h + "attn.c_attn.weight"), i * 3 * C + o));
        for (int o = 0; o < C; o++)  // ours (C, 4C); theirs (4C, C)
            for (int i = 0; i < 4 * C; i++)
                EXPECT_EQ(p.fcprojw[(size_t)l * 4 * C * C + o * 4 * C + i], element(tensors.at(h + "mlp.c_proj.weight"), i * C + o));
        for (int k = 0; k < 4 * C; k++) EXPECT_EQ(p.fcb[l * 4 * C + k], element(tensors.at(h + "mlp.c_fc.bias"), k));
        for (int k = 0; k < C; k++) EXPECT_EQ(p.ln2w[l * C + k], element(tensors.at(h + "ln_2.weight"), k));
    }
    for (int k = 0; k < MAXT * C; k++) EXPECT_EQ(p.wpe[k], element(tensors.at("wpe.weight"), k));
}

// import → checkpoint → export: the bytes written are the bytes read.
void expect_round_trip(const std::string& dir, const std::string& input_bytes) {
    write_bytes(dir + "in.safetensors", input_bytes);
    std::vector<float> params, reread;
    const ModelConfig m = read_model_file(dir + "in.safetensors", &params);
    write_checkpoint(dir + "model.bin", m, params.data());
    const ModelConfig back = read_checkpoint(dir + "model.bin", &reread);
    write_gpt2_safetensors(dir + "out.safetensors", back, reread.data());
    EXPECT_TRUE(read_file(dir + "out.safetensors") == input_bytes) << "export differs from the input";
}

TEST_F(Safetensors, PreLnRoundTripIsByteForByte) { expect_round_trip(dir, hand_made_file(gpt2_file_tensors(false, 2), kPreMetadata)); }

TEST_F(Safetensors, PeriLnRoundTripKeepsPlacementDtAndItsNorms) {
    const std::string bytes = hand_made_file(gpt2_file_tensors(true, 3), kPeriMetadata);
    expect_round_trip(dir, bytes);
    std::vector<float> params;
    const ModelConfig m = read_model_file(dir + "in.safetensors", &params);
    EXPECT_EQ(m.placement, Placement::Peri);
    EXPECT_EQ(m.dt, 0.1f);
}

TEST_F(Safetensors, PostLnIsPlacementMetadataOnGpt2Names) {
    expect_round_trip(dir, hand_made_file(gpt2_file_tensors(false, 4), {{"dt", "0.5"}, {"format", "pt"}, {"n_head", "2"}, {"placement", "post"}}));
    std::vector<float> params;
    EXPECT_EQ(read_model_file(dir + "in.safetensors", &params).placement, Placement::Post);
}

TEST_F(Safetensors, OpenAisFileWithoutMetadataIsPreLnWithHeadSize64AndMasksIgnored) {
    // C = 128 without n_head: GPT-2's head size 64 gives 2 heads; the mask buffers h.l.attn.bias
    // of older files, and a "transformer." prefix, are accepted.
    std::map<std::string, Tensor> t;
    Rng rng(5);
    auto add = [&](const std::string& name, std::vector<uint64_t> shape) {
        size_t n = 1;
        for (uint64_t d : shape) n *= d;
        std::vector<float> v(n);
        for (float& x : v) x = (float)rng.normal();
        t["transformer." + name] = {shape, "F32", f32_bytes(v)};
    };
    const uint64_t c = 128;
    add("wte.weight", {5, c});
    add("wpe.weight", {4, c});
    add("ln_f.weight", {c});
    add("ln_f.bias", {c});
    for (const char* n : {"ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "attn.c_proj.bias", "mlp.c_proj.bias"}) add(std::string("h.0.") + n, {c});
    add("h.0.attn.c_attn.weight", {c, 3 * c});
    add("h.0.attn.c_attn.bias", {3 * c});
    add("h.0.attn.c_proj.weight", {c, c});
    add("h.0.mlp.c_fc.weight", {c, 4 * c});
    add("h.0.mlp.c_fc.bias", {4 * c});
    add("h.0.mlp.c_proj.weight", {4 * c, c});
    add("h.0.attn.bias", {1, 1, 4, 4});
    write_bytes(dir + "openai.safetensors", hand_made_file(t, {{"format", "pt"}}));
    std::vector<float> params;
    const ModelConfig m = read_model_file(dir + "openai.safetensors", &params);
    EXPECT_EQ(m.NH, 2);
    EXPECT_EQ(m.L, 1);
    EXPECT_EQ(m.placement, Placement::Pre);
    EXPECT_EQ(m.dt, 1.0f);
}

TEST_F(Safetensors, Bf16AndF16ConvertExactly) {
    auto tensors = gpt2_file_tensors(false, 6);
    // ln_f.weight as BF16 and ln_f.bias as F16, bit patterns with exactly known values (signed
    // zeros, infinity, the largest half, half subnormals)
    const uint16_t bf16[C] = {0x3F80, 0xC020, 0x3E20, 0x0000, 0x8000, 0x7F80, 0x4049, 0x3C00};
    const float bf16_expect[C] = {1.0f, -2.5f, 0.15625f, 0.0f, -0.0f, INFINITY, 3.140625f, 0.0078125f};
    const uint16_t f16[C] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x3800, 0x8400, 0x0400, 0x3555};
    const float f16_expect[C] = {1.0f, -2.0f, 65504.0f, 5.9604644775390625e-8f, 0.5f, -6.103515625e-5f, 6.103515625e-5f, 0.333251953125f};
    tensors["ln_f.weight"] = {{C}, "BF16", std::string((const char*)bf16, sizeof bf16)};
    tensors["ln_f.bias"] = {{C}, "F16", std::string((const char*)f16, sizeof f16)};
    write_bytes(dir + "half.safetensors", hand_made_file(tensors, kPreMetadata));
    std::vector<float> params;
    const ModelConfig m = read_model_file(dir + "half.safetensors", &params);
    const ParamTensors<float> p = param_tensors(params.data(), m);
    for (int k = 0; k < C; k++) {
        EXPECT_EQ(p.lnfw[k], bf16_expect[k]) << k;
        EXPECT_EQ(std::signbit(p.lnfw[k]), std::signbit(bf16_expect[k])) << k;
        EXPECT_EQ(p.lnfb[k], f16_expect[k]) << k;
    }
}

// ---- refusals: one InputError naming the file and the problem ----

TEST_F(Safetensors, RefusesFilesThatAreNotSafetensors) {
    expect_refused("", "too short");
    expect_refused("1234567", "too short");
    std::string huge(16, '\0');
    huge[0] = (char)0xFF; huge[7] = (char)0x7F;  // a header length beyond the format's limit
    expect_refused(huge, "not a safetensors file: its first 8 bytes claim a header of 9151314442816848127 bytes, above "
                         "the format's limit of 100000000");
    std::string two_gb(16, '\0');
    two_gb[3] = (char)0x80;  // 2^31 bytes: named by the limit, not by the file's size
    expect_refused(two_gb, "claim a header of 2147483648 bytes, above the format's limit of 100000000");
    std::string at_limit(16, '\0');
    at_limit[0] = (char)0x00; at_limit[1] = (char)0xE1; at_limit[2] = (char)0xF5; at_limit[3] = (char)0x05;  // 100000000
    expect_refused(at_limit, "claim a header of 100000000 bytes, but only 8 follow (truncated?)");
    const std::string good = hand_made_file(gpt2_file_tensors(false, 7), kPreMetadata);
    std::string longer = good;
    longer[0] = (char)(longer[0] + 8);  // the header would run into the data
    expect_refused(longer, "");
    std::string not_json = good;
    not_json[9] = '[';  // {[ ...
    expect_refused(not_json, "not JSON");
    std::string not_brace = good;
    not_brace[8] = ' ';
    expect_refused(not_brace, "its header (after the 8-byte length) does not start with '{'");
    std::string truncated = good.substr(0, good.size() - 4);
    expect_refused(truncated, "");
}

// A one-tensor file (plus whatever else the test adds) with a header given as text.
std::string file_with_header(const std::string& header, size_t data_bytes) {
    std::string h = header;
    while (h.size() % 8) h += ' ';
    std::string file(8, '\0');
    for (int b = 0; b < 8; b++) file[b] = (char)((h.size() >> (8 * b)) & 0xFF);
    return file + h + std::string(data_bytes, '\0');
}

TEST_F(Safetensors, RefusesBadOffsetsShapesAndDtypes) {
    expect_refused(file_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8), "outside the data");
    expect_refused(file_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "outside the data");
    expect_refused(file_with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 12), "need 12");
    expect_refused(file_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
                   "overlaps");
    expect_refused(file_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12), "belong to no tensor");
    expect_refused(file_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12), "after its last tensor");
    expect_refused(file_with_header(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8), "unknown dtype");
    expect_refused(file_with_header(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "not a non-negative integer");
    expect_refused(file_with_header(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
                   "more than the file holds");
    expect_refused(file_with_header(R"({"a":{"dtype":"F32","shape":[2]}})", 8), "needs exactly dtype, shape and data_offsets");
    expect_refused(file_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16),
                   "appears twice");
    expect_refused(file_with_header(R"({"__metadata__":{"n_head":2}})", 0), "is not a string");
}

TEST_F(Safetensors, RefusesFilesOfAnotherModel) {
    auto missing = gpt2_file_tensors(false, 8);
    missing.erase("h.1.mlp.c_fc.bias");
    expect_refused(hand_made_file(missing, kPreMetadata), "tensor h.1.mlp.c_fc.bias is missing");
    auto wrong_shape = gpt2_file_tensors(false, 9);
    wrong_shape["h.0.attn.c_attn.weight"].shape = {3 * C, C};  // nn.Linear's layout, not Conv1D's
    expect_refused(hand_made_file(wrong_shape, kPreMetadata), "h.0.attn.c_attn.weight has shape [24, 8] but the model needs [8, 24]");
    auto extra = gpt2_file_tensors(false, 10);
    extra["lm_head.weight"] = extra.at("wte.weight");
    expect_refused(hand_made_file(extra, kPreMetadata), "tensor lm_head.weight is not one of");
    expect_refused(hand_made_file(gpt2_file_tensors(true, 11), kPreMetadata), "placement peri");  // Peri norms, no metadata
    expect_refused(hand_made_file(gpt2_file_tensors(false, 12), kPeriMetadata), "tensor h.0.ln_1o.weight is missing");
    auto ints = gpt2_file_tensors(false, 13);
    ints["ln_f.bias"].dtype = "I32";
    expect_refused(hand_made_file(ints, kPreMetadata), "must be F32, BF16 or F16");
    expect_refused(hand_made_file(gpt2_file_tensors(false, 14), {{"n_head", "3"}}), "n_head 3 does not divide C");
    for (const char* word : {"two", "0", "-2", "2x"})
        expect_refused(hand_made_file(gpt2_file_tensors(false, 14), {{"n_head", word}}),
                       std::string("n_head '") + word + "' is not a positive whole number");
    expect_refused(hand_made_file(gpt2_file_tensors(false, 15), {{"format", "pt"}}), "not a multiple of GPT-2's head size");
    expect_refused(hand_made_file(gpt2_file_tensors(false, 16), {{"n_head", "2"}, {"placement", "middle"}}), "not pre, post or peri");
    expect_refused(hand_made_file(gpt2_file_tensors(false, 17), {{"n_head", "2"}, {"dt", "-1"}}), "is not a number in (0, 1000]");
    auto no_blocks = gpt2_file_tensors(false, 18);
    no_blocks.erase("h.0.ln_1.weight");
    expect_refused(hand_made_file(no_blocks, kPreMetadata), "no h.0.ln_1.weight");
}

// ---- through the programs ----

struct Result {
    int status;
    std::string out, err;
};

Result run(const std::string& dir, const std::string& command) {
    const int raw = std::system((command + " > " + dir + "stdout 2> " + dir + "stderr").c_str());
    return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(dir + "stdout"), read_file(dir + "stderr")};
}

TEST_F(Safetensors, EvalExportsTheModelItLoadsByteForByte) {
    const std::string bytes = hand_made_file(gpt2_file_tensors(true, 20), kPeriMetadata);
    write_bytes(dir + "in.safetensors", bytes);
    Result r = run(dir, "./eval -device cpu -model " + dir + "in.safetensors -export " + dir + "out.safetensors");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(read_file(dir + "out.safetensors") == bytes);
    // a checkpoint exports as the same tensors
    std::vector<float> params;
    const ModelConfig m = read_model_file(dir + "in.safetensors", &params);
    write_checkpoint(dir + "model.bin", m, params.data());
    r = run(dir, "./eval -device cpu -model " + dir + "model.bin -export " + dir + "again.safetensors");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(read_file(dir + "again.safetensors") == bytes);
}

TEST_F(Safetensors, EvalRefusesAnExportOverItsInputOrWithoutTheSuffix) {
    write_bytes(dir + "in.safetensors", hand_made_file(gpt2_file_tensors(false, 21), kPreMetadata));
    const std::string before = read_file(dir + "in.safetensors");
    Result r = run(dir, "./eval -device cpu -model " + dir + "in.safetensors -export " + dir + "in.safetensors");
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(read_file(dir + "in.safetensors") == before);
    r = run(dir, "./eval -device cpu -model " + dir + "in.safetensors -export " + dir + "out.bin");
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("must end in .safetensors"), std::string::npos) << r.err;
    EXPECT_FALSE(exists(dir + "out.bin"));
    write_bytes(dir + "broken.safetensors", "12345678{");
    r = run(dir, "./eval -device cpu -model " + dir + "broken.safetensors -export " + dir + "out.safetensors");
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(exists(dir + "out.safetensors"));
}

TEST_F(Safetensors, TrainInitFromSafetensorsTrainsLikeTheSameCheckpoint) {
    // A Peri-LN model of V = 96 (the shards' vocabulary), as a checkpoint and as safetensors.
    ModelConfig cfg = tiny_model(2, Placement::Peri);
    cfg.Vp = 128;
    std::vector<float> params(num_parameters(cfg));
    init_parameters(cfg, params.data(), 3);
    for (size_t k = param_offsets(cfg)[P_WTE] + (size_t)cfg.V * cfg.C; k < (size_t)cfg.Vp * cfg.C; k++) params[k] = 0;  // padding rows
    write_checkpoint(dir + "model.bin", cfg, params.data());
    write_gpt2_safetensors(dir + "model.safetensors", cfg, params.data());
    write_random_shard(dir + "train_000.bin", 2000, cfg.V, 1);
    const std::string common = "./train -device cpu -threads 1 -B 2 -T 8 -steps 3 -eval_every 0 -train_data " + dir +
                               "train_000.bin";
    Result a = run(dir, common + " -init " + dir + "model.bin -out " + dir + "a");
    ASSERT_EQ(a.status, 0) << a.err;
    Result b = run(dir, common + " -init " + dir + "model.safetensors -out " + dir + "b");
    ASSERT_EQ(b.status, 0) << b.err;
    EXPECT_EQ(json_numbers(read_file(dir + "a/log.jsonl"), "loss"), json_numbers(read_file(dir + "b/log.jsonl"), "loss"));
    Result refused = run(dir, common + " -init " + dir + "model.safetensors -ln pre -out " + dir + "c");
    EXPECT_EQ(refused.status, 2);
    EXPECT_NE(refused.err.find("is peri-LN but -ln pre was given"), std::string::npos) << refused.err;
    EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 1) << refused.err;
    EXPECT_FALSE(exists(dir + "c"));
}

// The reader's bounds at their edges: 7 bytes too short for the length, 8 read on; a header of
// 1 byte ("{") not JSON, of 2 ("{}") an object without weights; __metadata__ that is no object;
// a shape that is no array; an empty tensor;
// n_head from 1 to C (0 refused); dt in (0, 1000]; C up to 65536.
TEST_F(Safetensors, BoundsAtTheirEdges) {
    const auto with_header = [](const std::string& header) {
        std::string file(8, '\0');
        for (int b = 0; b < 8; b++) file[b] = char((header.size() >> (8 * b)) & 0xff);
        return file + header;
    };
    expect_refused(std::string(7, '\0'), "7 bytes, too short for a safetensors header");
    expect_refused(std::string(8, '\0'), "its header (after the 8-byte length) does not start with '{'");
    expect_refused(with_header("{"), "does not start with '{'");
    expect_refused(with_header("{}"), "no wte.weight of shape [rows, C]: not GPT-2 weights");
    expect_refused(with_header("{\"__metadata__\": 5}"), "__metadata__ is not an object");
    expect_refused(with_header("{\"wte.weight\": {\"dtype\": \"F32\", \"shape\": 4, \"data_offsets\": [0, 0]}}"),
                   "tensor wte.weight: shape must be an array and data_offsets [begin, end]");
    // An empty tensor (data_offsets [0, 0]) is read; as wte it is no matrix of weights.
    expect_refused(with_header("{\"wte.weight\": {\"dtype\": \"F32\", \"shape\": [0, 8], \"data_offsets\": [0, 0]}}"),
                   "no wte.weight of shape [rows, C]: not GPT-2 weights");
    const auto tensors = gpt2_file_tensors(false, 1);  // C = 8
    std::vector<float> params;
    for (const char* heads : {"1", "8"}) {
        write_bytes(dir + "h.safetensors", hand_made_file(tensors, {{"n_head", heads}}));
        EXPECT_EQ(read_model_file(dir + "h.safetensors", &params).NH, std::atoi(heads));
    }
    expect_refused(hand_made_file(tensors, {{"n_head", "0"}}), "__metadata__ n_head '0' is not a positive whole number");
    for (float dt : {0.5f, 1000.0f}) {
        write_bytes(dir + "dt.safetensors", hand_made_file(tensors, {{"n_head", "2"}, {"dt", dt == 0.5f ? "0.5" : "1000"}}));
        EXPECT_EQ(read_model_file(dir + "dt.safetensors", &params).dt, dt);
    }
    for (const char* dt : {"0", "1000.5"})
        expect_refused(hand_made_file(tensors, {{"n_head", "2"}, {"dt", dt}}),
                       "__metadata__ dt '" + std::string(dt) + "' is not a number in (0, 1000]");
    // 65536 channels pass the shape check (the file then lacks its blocks); 65537 do not.
    for (uint64_t width : {65536u, 65537u}) {
        const std::string zeros(4 * width, '\0');
        const std::string path_error = width == 65536 ? "no h.0.ln_1.weight: not GPT-2 weights" : "no wte.weight of shape";
        expect_refused(hand_made_file({{"wte.weight", {{1, width}, "F32", zeros}}, {"wpe.weight", {{1, width}, "F32", zeros}}}, {}),
                       path_error);
    }
}

}  // namespace
