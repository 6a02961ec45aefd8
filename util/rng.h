// util/rng.h — a small, portable random number generator (splitmix64 seeding a xoshiro256**),
// so that initialisation, shuffling and dropout-free training are reproducible bit for bit on
// every platform and compiler (std::normal_distribution is not: its algorithm is unspecified).
#pragma once
#include <cmath>
#include <cstdint>

struct Rng {
    uint64_t s[4];

    explicit Rng(uint64_t seed = 0) { reseed(seed); }

    // Fills the state from one 64-bit seed with splitmix64, as xoshiro's authors recommend.
    void reseed(uint64_t seed) {
        for (auto& word : s) {
            seed += 0x9E3779B97F4A7C15ull;
            uint64_t z = seed;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            word = z ^ (z >> 31);
        }
    }

    // Next 64 uniformly random bits (xoshiro256**).
    uint64_t next_u64() {
        auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
        uint64_t result = rotl(s[1] * 5, 7) * 9;
        uint64_t t = s[1] << 17;
        s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
        s[2] ^= t;
        s[3] = rotl(s[3], 45);
        return result;
    }

    // Uniform double in [0, 1) with 53 random bits.
    double uniform() { return (next_u64() >> 11) * (1.0 / 9007199254740992.0); }

    // Uniform integer in [0, n).
    uint64_t below(uint64_t n) { return n ? next_u64() % n : 0; }

    // Standard normal sample (Box–Muller, one value per call; the second is discarded so the
    // stream position never depends on call history).
    double normal() {
        double u1 = uniform(), u2 = uniform();
        if (u1 < 1e-300) u1 = 1e-300;
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }
};
