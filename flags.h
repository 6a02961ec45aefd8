// flags.h — command-line flags of the form `-name value` (docs/cli.md §1).
//
// The program asks for each flag it knows, with its default and allowed range; afterwards
// finish() refuses any flag nobody asked for. Every problem is an InputError naming the flag,
// raised before any work starts, so the program can print one line and exit with status 2
// (run_program, which every main() goes through, does that).
#pragma once
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "errors.h"

// True when -h or --help is among the arguments: the program then prints its usage and exits 0.
inline bool help_requested(int argc, char** argv) {
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") return true;
    }
    return false;
}

// The body of a program's main(): prints `usage` for -h/--help, else runs `body` (returning the
// exit status). Bad input (InputError) is one line "program: message" on stderr and status 2;
// running out of memory (a model or batch too large for this machine) and a failed collective
// between ranks (CollectiveError) are one line and status 1; a failed write of an output
// (OutputError) is one line and status 4.
template <typename Body>
int run_program(const char* program, const char* usage, int argc, char** argv, Body body) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress shows at once through a pipe (| tee) too
    if (help_requested(argc, argv)) {
        std::fputs(usage, stdout);
        return 0;
    }
    const char* out_of_memory = "%s: out of memory: the model or batch is too large for this machine\n";
    try {
        return body();
    } catch (const InputError& e) {
        std::fprintf(stderr, "%s: %s\n", program, e.what());
        return 2;
    } catch (const OutputError& e) {
        std::fprintf(stderr, "%s: %s\n", program, e.what());
        return 4;
    } catch (const CollectiveError& e) {
        std::fprintf(stderr, "%s: %s\n", program, e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, out_of_memory, program);
        return 1;
    } catch (const std::length_error&) {  // a buffer larger than any allocator can address
        std::fprintf(stderr, out_of_memory, program);
        return 1;
    }
}

class Flags {
public:
    // Reads argv as pairs "-name value". A lone trailing flag is a missing value.
    Flags(int argc, char** argv) {
        for (int i = 1; i < argc; i++) {
            std::string name = argv[i];
            if (name.size() < 2 || name[0] != '-') throw InputError("unexpected argument '" + name + "' (flags are -name value)");
            if (i + 1 >= argc) throw InputError("flag " + name + " needs a value");
            if (values.count(name.substr(1))) throw InputError("flag " + name + " given twice");
            values[name.substr(1)] = argv[++i];
        }
    }

    bool given(const std::string& name) const { return values.count(name) > 0; }

    // A string flag; when `choices` is not empty the value must be one of them.
    std::string str(const std::string& name, const std::string& fallback, const std::vector<std::string>& choices = {}) {
        asked.insert(name);
        if (!given(name)) return fallback;
        const std::string& v = values.at(name);
        if (choices.empty()) return v;
        for (const std::string& c : choices)
            if (v == c) return v;
        std::string list;
        for (const std::string& c : choices) list += (list.empty() ? "" : "|") + c;
        throw InputError("flag -" + name + ": '" + v + "' is not one of " + list);
    }

    // An integer flag within [lo, hi].
    long long integer(const std::string& name, long long fallback, long long lo, long long hi) {
        asked.insert(name);
        if (!given(name)) return fallback;
        const std::string& v = values.at(name);
        char* end = nullptr;
        errno = 0;
        long long x = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || errno == ERANGE) throw InputError("flag -" + name + ": '" + v + "' is not an integer");
        if (x < lo || x > hi)
            throw InputError("flag -" + name + ": " + v + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
        return x;
    }

    // A real-valued flag within [lo, hi] (lo excluded when lo_open).
    double real(const std::string& name, double fallback, double lo, double hi, bool lo_open = false) {
        asked.insert(name);
        if (!given(name)) return fallback;
        const std::string& v = values.at(name);
        char* end = nullptr;
        double x = std::strtod(v.c_str(), &end);
        if (v.empty() || *end != '\0' || !std::isfinite(x)) throw InputError("flag -" + name + ": '" + v + "' is not a number");
        if (x < lo || x > hi || (lo_open && x == lo))
            throw InputError("flag -" + name + ": " + v + " is out of range " + (lo_open ? "(" : "[") + fmt(lo) + ", " + fmt(hi) + "]");
        return x;
    }

    // Refuses any flag that was given but never asked for.
    void finish() const {
        for (const auto& kv : values)
            if (!asked.count(kv.first)) throw InputError("unknown flag -" + kv.first);
    }

private:
    std::map<std::string, std::string> values;
    std::set<std::string> asked;

    static std::string fmt(double x) {
        if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", x);
        return buf;
    }
};
