// cuda/fused_products.h — which matrix products of the CUDA backend run fused with their
// epilogue (one cuBLASLt product) and which run as the plain product followed by the project's
// own kernel, and how the backend decides (docs/cuda.md §3, "Fused or plain").
//
// Four kinds of product can be fused (matmul.cuh): with a bias (the forward of qkv, attproj and
// fcproj), with bias + GELU (fc's forward), with GELU's derivative (fcproj's input gradient)
// and with a bias gradient (every weight gradient of a layer with a bias). -fused auto (the
// default) times each kind both ways on the card, at the run's shapes, once at start-up, and
// keeps plain unless fused is faster by more than the timing's spread; cuBLASLt refusing a kind
// makes it plain. -fused all asks cuBLASLt for every
// kind (plain where it refuses), -fused none for none. A resumed run keeps the kinds its
// config.json recorded, so that it rounds as the run did before; several ranks do not time
// (run/resume.h). GELU is fused in bf16 only (gelu.cuh): in fp32 the two GELU kinds are always
// plain.
//
// Host code only: ./train's setup and the CPU tests include it without CUDA.
#pragma once
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

// The kinds of fused product, in the order of FusedKinds.
enum class Epilogue { Bias, BiasGelu, GeluGrad, BiasGrad };
constexpr int NUM_EPILOGUES = 4;
constexpr Epilogue ALL_EPILOGUES[NUM_EPILOGUES] = {Epilogue::Bias, Epilogue::BiasGelu, Epilogue::GeluGrad,
                                                   Epilogue::BiasGrad};

// The name ./train prints and config.json records ("fused_products").
inline const char* epilogue_name(Epilogue e) {
    switch (e) {
        case Epilogue::Bias: return "bias";
        case Epilogue::BiasGelu: return "bias + GELU";
        case Epilogue::GeluGrad: return "GELU'";
        case Epilogue::BiasGrad: return "bias gradient";
    }
    return "?";
}

// The kind named `name` (epilogue_name), or -1.
inline int epilogue_named(const std::string& name) {
    for (Epilogue e : ALL_EPILOGUES)
        if (name == epilogue_name(e)) return (int)e;
    return -1;
}

// Whether the ops ask cuBLASLt for each kind fused: fused[Epilogue::Bias], ...
struct FusedKinds {
    std::array<bool, NUM_EPILOGUES> on;
    bool operator[](Epilogue e) const { return on[(int)e]; }
    bool& operator[](Epilogue e) { return on[(int)e]; }
    bool operator==(const FusedKinds& other) const { return on == other.on; }
};
constexpr FusedKinds EVERY_KIND_FUSED{{true, true, true, true}};
constexpr FusedKinds NO_KIND_FUSED{{false, false, false, false}};

// What the backend is asked for: to time the kinds (-fused auto), or to use `kinds` as given
// (-fused all or none, or a resumed run's); `origin` says where given kinds came from.
struct FusionRequest {
    bool timed = false;
    FusedKinds kinds = EVERY_KIND_FUSED;
    std::string origin = "-fused all";
};

// -fused auto|all|none (the flag's values are checked by its table).
inline FusionRequest fusion_request(const std::string& flag) {
    if (flag == "auto") return {true, EVERY_KIND_FUSED, "-fused auto"};
    if (flag == "none") return {false, NO_KIND_FUSED, "-fused none"};
    return {};
}

// What the backend decided: the kinds it asks cuBLASLt for fused, and the one line that says
// which and why.
struct FusionChoice {
    FusedKinds kinds = EVERY_KIND_FUSED;
    std::string line;
};

// The median time of one product of a kind, fused and plain (the op's product plus its own
// kernel), in ms; fused_ms is NaN where cuBLASLt refused it. spread_ms: how far the timing's
// rounds of the product spread (the larger of fused's and plain's largest − smallest).
struct ProductTiming {
    Epilogue kind;
    std::string layer;  // "qkv", "attproj", "fc" or "fcproj"
    double fused_ms, plain_ms;
    double spread_ms = 0;
};

// The names of the kinds set, in Epilogue order (config.json's "fused_products").
inline std::vector<std::string> fused_kind_names(const FusedKinds& kinds) {
    std::vector<std::string> names;
    for (Epilogue e : ALL_EPILOGUES)
        if (kinds[e]) names.push_back(epilogue_name(e));
    return names;
}

// "bias, bias gradient" for the kinds set; "none" for none.
inline std::string kind_list(const FusedKinds& kinds) {
    std::string list;
    for (const std::string& name : fused_kind_names(kinds)) list += (list.empty() ? "" : ", ") + name;
    return list.empty() ? "none" : list;
}

// The kinds as asked: the GELU kinds only where GELU can be fused (bf16).
inline FusionChoice given_fusion(const FusionRequest& request, bool gelu_fusable) {
    FusionChoice choice{request.kinds, ""};
    if (!gelu_fusable) choice.kinds[Epilogue::BiasGelu] = choice.kinds[Epilogue::GeluGrad] = false;
    choice.line = kind_list(choice.kinds) + " (" + request.origin + ")";
    return choice;
}

// Fused or plain for each kind, from the timings of all its products: fused when cuBLASLt took
// every one and their total time fused is below their total plain by more than the sum of their
// spreads (a difference the timing cannot tell from its noise keeps the plain product). A kind
// with no timing (a GELU kind in fp32) is plain. The line gives both totals of each kind and
// the spread.
inline FusionChoice faster_products(const std::vector<ProductTiming>& timings) {
    FusionChoice choice{NO_KIND_FUSED, ""};
    for (Epilogue e : ALL_EPILOGUES) {
        double fused = 0, plain = 0, spread = 0;
        int products = 0;
        for (const ProductTiming& t : timings)
            if (t.kind == e) fused += t.fused_ms, plain += t.plain_ms, spread += t.spread_ms, products++;
        if (products == 0) continue;
        char said[160];
        const bool faster = !std::isnan(fused) && plain - fused > spread;
        if (std::isnan(fused)) std::snprintf(said, sizeof said, "%s plain (cuBLASLt refused it)", epilogue_name(e));
        else
            std::snprintf(said, sizeof said, "%s %s (%.3f ms fused, %.3f plain, spread %.3f)", epilogue_name(e),
                          faster ? "fused" : "plain", fused, plain, spread);
        choice.kinds[e] = faster;
        choice.line += (choice.line.empty() ? "" : "; ") + std::string(said);
    }
    choice.line = kind_list(choice.kinds) + " (-fused auto, timed at start-up: " +
                  (choice.line.empty() ? "nothing to time" : choice.line) + ")";
    return choice;
}
