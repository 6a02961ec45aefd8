// run/safetensors.h — GPT-2 weights in Hugging Face's safetensors layout (docs/formats.md §5), so a
// model moves between this project and PyTorch:
//
//   read_safetensors        the file: an 8-byte little-endian header length N, N bytes of JSON
//                           {name: {"dtype", "shape", "data_offsets": [begin, end]}, ...,
//                           "__metadata__": {text: text}}, then the data, every byte of it
//                           belonging to exactly one tensor
//   gpt2_from_safetensors   the model and its parameters (file order of run/checkpoint.h) from the
//                           tensors of the `gpt2` repository's model.safetensors (wte.weight,
//                           h.0.attn.c_attn.weight, ...; Conv1D weights stored (in, out))
//   write_gpt2_safetensors  the reverse, in one canonical layout (tensors sorted by name, F32)
//   read_model_file         a checkpoint or, for a name ending in .safetensors, this format
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "run/checkpoint.h"
#include "util/errors.h"
#include "util/json.h"
#include "model.h"

// The spec's bound on the header: larger ones are refused before anything is allocated.
constexpr uint64_t SAFETENSORS_MAX_HEADER = 100000000;
// The largest file read: GPT-2 XL's 1.5B parameters in F32 are 6.2 GB; 64 GiB leaves room for
// larger models and refuses a file that could only exhaust the memory.
constexpr uint64_t SAFETENSORS_MAX_FILE = uint64_t(64) << 30;

// One tensor of the file: its dtype, shape and bytes [begin, end) of the data buffer.
struct SafetensorsEntry {
    std::string name, dtype;
    std::vector<uint64_t> shape;
    uint64_t begin = 0, end = 0;
};

struct SafetensorsFile {
    std::map<std::string, std::string> metadata;  // "__metadata__"
    std::vector<SafetensorsEntry> tensors;        // in the header's order
    std::string data;                             // the data buffer (after the header)
};

// Bytes per element of a safetensors dtype; 0 for a name the format does not define.
inline uint64_t dtype_bytes(const std::string& dtype) {
    static const std::map<std::string, uint64_t> sizes = {
        {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
        {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"I64", 8}, {"U64", 8}, {"F64", 8}};
    const auto it = sizes.find(dtype);
    return it == sizes.end() ? 0 : it->second;
}

// A non-negative JSON integer below 2^53 (the header's shapes and offsets), else InputError.
inline uint64_t header_integer(const Json& v, const std::string& what) {
    const std::string& t = v.text();
    const bool digits = v.kind() == Json::Kind::Number && !t.empty() && t.size() <= 15 &&
                        t.find_first_not_of("0123456789") == std::string::npos;
    if (!digits) throw InputError(what + " is not a non-negative integer");
    return std::stoull(t);
}

// One header member `name` as an entry: dtype, shape and offsets checked against each other and
// against the buffer of `buffer_bytes`.
inline SafetensorsEntry header_entry(const std::string& name, const Json& v, uint64_t buffer_bytes, const std::string& path) {
    const std::string what = path + ": tensor " + name;
    const Json *dtype = v.get("dtype"), *shape = v.get("shape"), *offsets = v.get("data_offsets");
    if (v.kind() != Json::Kind::Object || !dtype || !shape || !offsets || v.members().size() != 3)
        throw InputError(what + ": needs exactly dtype, shape and data_offsets");
    SafetensorsEntry e;
    e.name = name;
    e.dtype = dtype->text();
    const uint64_t element = dtype->kind() == Json::Kind::String ? dtype_bytes(e.dtype) : 0;
    if (element == 0) throw InputError(what + ": unknown dtype " + dtype->str());
    if (shape->kind() != Json::Kind::Array || offsets->kind() != Json::Kind::Array || offsets->items().size() != 2)
        throw InputError(what + ": shape must be an array and data_offsets [begin, end]");
    uint64_t bytes = element;
    for (const Json& d : shape->items()) {
        e.shape.push_back(header_integer(d, what + ": a dimension"));
        bytes = e.shape.back() == 0 ? 0 : bytes > buffer_bytes / e.shape.back() ? buffer_bytes + 1 : bytes * e.shape.back();
    }
    e.begin = header_integer(offsets->items()[0], what + ": data_offsets");
    e.end = header_integer(offsets->items()[1], what + ": data_offsets");
    if (e.begin > e.end || e.end > buffer_bytes)
        throw InputError(what + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                         "] outside the data's " + std::to_string(buffer_bytes) + " bytes");
    if (e.end - e.begin != bytes)
        throw InputError(what + ": data_offsets span " + std::to_string(e.end - e.begin) + " bytes but its dtype and shape need " +
                         (bytes > buffer_bytes ? "more than the file holds" : std::to_string(bytes)));
    return e;
}

// Refuses tensors that overlap or leave bytes of the buffer to no tensor (the spec asks for
// the buffer to be covered exactly).
inline void check_buffer_covered(std::vector<SafetensorsEntry> tensors, uint64_t buffer_bytes, const std::string& path) {
    std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
    uint64_t at = 0;
    for (const SafetensorsEntry& e : tensors) {
        if (e.begin < at) throw InputError(path + ": tensor " + e.name + " overlaps the tensor before it in the data");
        if (e.begin > at) throw InputError(path + ": bytes " + std::to_string(at) + ".." + std::to_string(e.begin) + " of the data belong to no tensor");
        at = e.end;
    }
    if (at != buffer_bytes)
        throw InputError(path + ": the data has " + std::to_string(buffer_bytes - at) + " bytes after its last tensor");
}

// Reads and checks a whole safetensors file; anything malformed is one InputError naming it.
inline SafetensorsFile read_safetensors(const std::string& path) {
    std::string bytes = read_input(path, "safetensors file", SAFETENSORS_MAX_FILE);
    if (bytes.size() < 8) throw InputError(path + ": " + std::to_string(bytes.size()) + " bytes, too short for a safetensors header");
    uint64_t n = 0;
    for (int b = 7; b >= 0; b--) n = (n << 8) | (unsigned char)bytes[b];
    if (n > SAFETENSORS_MAX_HEADER)
        throw InputError(path + ": not a safetensors file: its first 8 bytes claim a header of " + std::to_string(n) +
                         " bytes, above the format's limit of " + std::to_string(SAFETENSORS_MAX_HEADER));
    if (n > bytes.size() - 8)
        throw InputError(path + ": not a safetensors file: its first 8 bytes claim a header of " + std::to_string(n) +
                         " bytes, but only " + std::to_string(bytes.size() - 8) + " follow (truncated?)");
    if (n < 2 || bytes[8] != '{')
        throw InputError(path + ": not a safetensors file: its header (after the 8-byte length) does not start with '{'");
    const Json header = read_json(bytes.substr(8, n), path + " header");
    if (header.kind() != Json::Kind::Object) throw InputError(path + ": the header is not a JSON object");
    SafetensorsFile file;
    bytes.erase(0, 8 + n);  // the data, without a second copy of a large file
    file.data = std::move(bytes);
    for (const auto& [name, value] : header.members()) {
        if (name == "__metadata__") {
            if (value.kind() != Json::Kind::Object) throw InputError(path + ": __metadata__ is not an object");
            for (const auto& [key, text] : value.members()) {
                if (text.kind() != Json::Kind::String) throw InputError(path + ": __metadata__ " + key + " is not a string");
                file.metadata[key] = text.text();
            }
            continue;
        }
        for (const SafetensorsEntry& e : file.tensors)
            if (e.name == name) throw InputError(path + ": tensor " + name + " appears twice in the header");
        file.tensors.push_back(header_entry(name, value, file.data.size(), path));
    }
    check_buffer_covered(file.tensors, file.data.size(), path);
    return file;
}

// ---------------------------------------------------------------------------------------------
// GPT-2's tensors (docs/formats.md §5)

// An IEEE half's bits as a float.
inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h >> 15) << 31, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
    float magnitude;
    if (exponent == 0) magnitude = std::ldexp((float)mantissa, -24);                     // zero, subnormal
    else if (exponent == 31) magnitude = mantissa ? NAN : INFINITY;                       // inf, NaN
    else magnitude = std::ldexp((float)(mantissa | 0x400), (int)exponent - 25);           // normal
    uint32_t bits;
    std::memcpy(&bits, &magnitude, 4);
    bits |= sign;
    float x;
    std::memcpy(&x, &bits, 4);
    return x;
}

// The elements of an F32, BF16 or F16 tensor as floats (little-endian, as the format stores them).
inline std::vector<float> tensor_floats(const SafetensorsFile& file, const SafetensorsEntry& e, const std::string& path) {
    const unsigned char* p = (const unsigned char*)file.data.data() + e.begin;
    const uint64_t element = dtype_bytes(e.dtype), count = (e.end - e.begin) / element;
    std::vector<float> out(count);
    for (uint64_t i = 0; i < count; i++, p += element) {
        uint32_t bits = 0;
        for (int b = (int)element - 1; b >= 0; b--) bits = (bits << 8) | p[b];
        if (e.dtype == "F32") std::memcpy(&out[i], &bits, 4);
        else if (e.dtype == "BF16") { bits <<= 16; std::memcpy(&out[i], &bits, 4); }
        else if (e.dtype == "F16") out[i] = half_to_float((uint16_t)bits);
        else throw InputError(path + ": tensor " + e.name + " is " + e.dtype + "; GPT-2 weights must be F32, BF16 or F16");
    }
    return out;
}

// One tensor of our parameters in Hugging Face's GPT-2 layout: its name, its shape there, where
// it lies in our flat parameters (`offset`, `rows` × `cols` as we store it) and whether the file
// holds it transposed (Conv1D weights: (in, out) there, (out, in) here).
struct Gpt2Tensor {
    std::string name;
    std::vector<uint64_t> shape;
    size_t offset, rows, cols;
    bool transposed;
};

// Every tensor of a model in the file's names: wte's first V rows only (the padding rows never
// enter the loss), Peri-LN's output LayerNorms as h.l.ln_1o / h.l.ln_2o (names of this project).
inline std::vector<Gpt2Tensor> gpt2_tensors(const ModelConfig& m) {
    const auto off = param_offsets(m);
    const size_t C = m.C;
    std::vector<Gpt2Tensor> t = {{"wte.weight", {(uint64_t)m.V, C}, off[P_WTE], (size_t)m.V, C, false},
                                 {"wpe.weight", {(uint64_t)m.maxT, C}, off[P_WPE], (size_t)m.maxT, C, false},
                                 {"ln_f.weight", {C}, off[P_LNFW], 1, C, false},
                                 {"ln_f.bias", {C}, off[P_LNFB], 1, C, false}};
    for (int l = 0; l < m.L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        auto vec = [&](const char* name, int index, size_t n) { t.push_back({h + name, {n}, off[index] + l * n, 1, n, false}); };
        auto conv = [&](const char* name, int index, size_t in, size_t out) {  // ours (out, in), theirs (in, out)
            t.push_back({h + name, {in, out}, off[index] + l * in * out, out, in, true});
        };
        vec("ln_1.weight", P_LN1W, C);
        vec("ln_1.bias", P_LN1B, C);
        conv("attn.c_attn.weight", P_QKVW, C, 3 * C);
        vec("attn.c_attn.bias", P_QKVB, 3 * C);
        conv("attn.c_proj.weight", P_ATTPROJW, C, C);
        vec("attn.c_proj.bias", P_ATTPROJB, C);
        vec("ln_2.weight", P_LN2W, C);
        vec("ln_2.bias", P_LN2B, C);
        conv("mlp.c_fc.weight", P_FCW, C, 4 * C);
        vec("mlp.c_fc.bias", P_FCB, 4 * C);
        conv("mlp.c_proj.weight", P_FCPROJW, 4 * C, C);
        vec("mlp.c_proj.bias", P_FCPROJB, C);
        if (m.placement == Placement::Peri) {
            vec("ln_1o.weight", P_LN1OW, C);
            vec("ln_1o.bias", P_LN1OB, C);
            vec("ln_2o.weight", P_LN2OW, C);
            vec("ln_2o.bias", P_LN2OB, C);
        }
    }
    return t;
}

// A tensor's name as GPT-2's names go: without the "transformer." of a GPT2LMHeadModel's
// state dict.
inline std::string gpt2_name(const std::string& name) {
    const std::string prefix = "transformer.";
    return name.compare(0, prefix.size(), prefix) == 0 ? name.substr(prefix.size()) : name;
}

// True for the attention-mask buffers some GPT-2 files carry (h.l.attn.bias, h.l.attn.masked_bias):
// constants, not weights, and ignored.
inline bool is_mask_buffer(const std::string& name) {
    for (const std::string end : {".attn.bias", ".attn.masked_bias"})
        if (name.size() > end.size() && name.compare(name.size() - end.size(), end.size(), end) == 0) return true;
    return false;
}

// The sizes and placement of the model a GPT-2 safetensors file holds: V and C from wte, maxT from
// wpe, L from the blocks h.0 ... h.{L-1}; NH, placement and Δt from __metadata__ "n_head",
// "placement", "dt" (OpenAI's files have none: C/64 heads, GPT-2's head size in every size,
// Pre-LN, Δt = 1).
inline ModelConfig gpt2_config(const SafetensorsFile& file, const std::string& path) {
    std::map<std::string, const SafetensorsEntry*> by_name;
    for (const SafetensorsEntry& e : file.tensors) by_name[gpt2_name(e.name)] = &e;
    auto matrix = [&](const char* name) {
        const auto it = by_name.find(name);
        if (it == by_name.end() || it->second->shape.size() != 2 || it->second->shape[0] == 0 || it->second->shape[1] == 0 ||
            it->second->shape[0] > (1 << 24) || it->second->shape[1] > (1 << 16))
            throw InputError(path + ": no " + name + " of shape [rows, C]: not GPT-2 weights");
        return it->second->shape;
    };
    ModelConfig m;
    const auto wte = matrix("wte.weight"), wpe = matrix("wpe.weight");
    m.V = (int)wte[0];
    m.C = (int)wte[1];
    m.maxT = (int)wpe[0];
    m.Vp = (m.V + 63) / 64 * 64;
    m.placement = Placement::Pre;
    m.L = 0;
    while (by_name.count("h." + std::to_string(m.L) + ".ln_1.weight")) m.L++;
    if (m.L == 0) throw InputError(path + ": no h.0.ln_1.weight: not GPT-2 weights");
    const auto meta = [&](const char* key) { const auto it = file.metadata.find(key); return it == file.metadata.end() ? std::string() : it->second; };
    const std::string heads = meta("n_head"), placement = meta("placement"), dt = meta("dt");
    if (heads.empty() && m.C % 64 != 0)
        throw InputError(path + ": __metadata__ has no n_head and C = " + std::to_string(m.C) +
                         " is not a multiple of GPT-2's head size 64");
    char* end = nullptr;
    const long nh = heads.empty() ? m.C / 64 : std::strtol(heads.c_str(), &end, 10);
    if (!heads.empty() && (*end != '\0' || end == heads.c_str() || nh <= 0))
        throw InputError(path + ": __metadata__ n_head '" + heads + "' is not a positive whole number");
    if (nh > m.C || m.C % nh != 0)
        throw InputError(path + ": __metadata__ n_head " + heads + " does not divide C = " + std::to_string(m.C));
    m.NH = (int)nh;
    if (!placement.empty() && !parse_placement(placement, &m.placement))
        throw InputError(path + ": __metadata__ placement '" + placement + "' is not pre, post or peri");
    m.dt = dt.empty() ? 1.0f : std::strtof(dt.c_str(), &end);
    if (!dt.empty() && (*end != '\0' || !(m.dt > 0) || m.dt > 1000))
        throw InputError(path + ": __metadata__ dt '" + dt + "' is not a number in (0, 1000]");
    validate_config(m, path);
    return m;
}

// The model of a GPT-2 safetensors file and its parameters in our file order: every tensor of
// gpt2_tensors present with its shape, nothing else but mask buffers; Conv1D weights transposed,
// wte's padding rows zero.
inline ModelConfig gpt2_from_safetensors(const SafetensorsFile& file, const std::string& path, std::vector<float>* params) {
    const ModelConfig m = gpt2_config(file, path);
    std::map<std::string, const SafetensorsEntry*> by_name;
    for (const SafetensorsEntry& e : file.tensors)
        if (!is_mask_buffer(e.name)) by_name[gpt2_name(e.name)] = &e;
    std::vector<std::pair<const Gpt2Tensor*, const SafetensorsEntry*>> found;  // all checked before any allocation
    const std::vector<Gpt2Tensor> tensors = gpt2_tensors(m);
    for (const Gpt2Tensor& t : tensors) {
        const auto it = by_name.find(t.name);
        if (it == by_name.end())
            throw InputError(path + ": tensor " + t.name + " is missing (a " + placement_name(m.placement) + "-LN GPT-2 with L = " +
                             std::to_string(m.L) + " needs it)");
        if (it->second->shape != t.shape) {
            std::string want, got;
            for (uint64_t d : t.shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
            for (uint64_t d : it->second->shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
            throw InputError(path + ": tensor " + t.name + " has shape [" + got + "] but the model needs [" + want + "]");
        }
        found.emplace_back(&t, it->second);
        by_name.erase(it);
    }
    if (!by_name.empty())
        throw InputError(path + ": tensor " + by_name.begin()->first + " is not one of a " + placement_name(m.placement) +
                         "-LN GPT-2's (L = " + std::to_string(m.L) + ")" +
                         (m.placement != Placement::Peri && by_name.begin()->first.find("o.") != std::string::npos
                              ? "; Peri-LN files say __metadata__ placement peri" : ""));
    params->assign(num_parameters(m), 0.0f);
    for (const auto& [t, e] : found) {
        const std::vector<float> x = tensor_floats(file, *e, path);
        float* to = params->data() + t->offset;  // (rows, cols) here; the file (cols, rows) when transposed
        for (size_t r = 0; r < t->rows; r++)
            for (size_t c = 0; c < t->cols; c++) to[r * t->cols + c] = t->transposed ? x[c * t->rows + r] : x[r * t->cols + c];
    }
    return m;
}

// Writes the model as GPT-2 safetensors, whole or not at all: F32 tensors sorted by name, their
// data in that order; __metadata__ {"format": "pt", "n_head"} and, unless Pre-LN with Δt = 1,
// "placement" and "dt"; the header compact JSON padded with spaces to a multiple of 8 bytes.
inline void write_gpt2_safetensors(const std::string& path, const ModelConfig& m, const float* params) {
    std::vector<Gpt2Tensor> tensors = gpt2_tensors(m);
    std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    std::map<std::string, std::string> metadata = {{"format", "pt"}, {"n_head", std::to_string(m.NH)}};
    if (m.placement != Placement::Pre || m.dt != 1.0f) {
        metadata["placement"] = placement_name(m.placement);
        metadata["dt"] = json_float(m.dt);
    }
    std::string header = "{\"__metadata__\":{", data;
    for (const auto& [key, value] : metadata) header += (header.back() == '{' ? "" : ",") + json_string(key) + ":" + json_string(value);
    header += "}";
    for (const Gpt2Tensor& t : tensors) {
        const size_t begin = data.size();
        const float* from = params + t.offset;  // (rows, cols); written (cols, rows) when transposed
        for (size_t i = 0; i < t.rows * t.cols; i++) {
            const size_t r = t.transposed ? i % t.rows : i / t.cols, c = t.transposed ? i / t.rows : i % t.cols;
            data.append((const char*)&from[r * t.cols + c], 4);
        }
        std::string shape;
        for (uint64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
        header += "," + json_string(t.name) + ":{\"dtype\":\"F32\",\"shape\":[" + shape + "],\"data_offsets\":[" +
                  std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
    }
    header += "}";
    header.append((8 - header.size() % 8) % 8, ' ');
    unsigned char length[8];
    for (int b = 0; b < 8; b++) length[b] = (unsigned char)((uint64_t)header.size() >> (8 * b));
    write_file_atomically(path, {{length, 8}, {header.data(), header.size()}, {data.data(), data.size()}});
}

// A model file as ./train -init and ./eval -model take it: GPT-2 safetensors for a name ending in
// .safetensors, else a checkpoint (run/checkpoint.h).
inline ModelConfig read_model_file(const std::string& path, std::vector<float>* params) {
    if (!is_safetensors_name(path)) return read_checkpoint(path, params);
    return gpt2_from_safetensors(read_safetensors(path), path, params);
}
