// flags/flags.h — command-line flags of the form `-name value` (docs/cli.md §1).
//
//   Flags       the arguments as name/value pairs; a program asks for each flag it knows, with
//               its default and allowed values, then finish() refuses any flag nobody asked for.
//   Flag        one row of a program's table of flags (flags/train_flags.h, flags/eval_flags.h): its name,
//               the option it sets, its values, default, help, whether it defines the run (and
//               so must match on -resume 1) and the config.json member that records it. From
//               the table come the parsing (read_flags), the usage text (usage_text), the
//               markdown tables of docs/cli.md (markdown_table, `make docs`), the
//               JSON of `-flags_json 1` that the sweep's settings read (flags_json), and
//               ./train's config.json record and resume check (run/run_config.h).
//
// Every problem is an InputError naming the flag, raised before any work starts, so the program
// can print one line and exit with status 2 (run_program, which every main() goes through,
// does that).
#pragma once
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/errors.h"
#include "util/json.h"

// True when -h or --help is among the arguments: the program then prints its usage and exits 0.
inline bool help_requested(int argc, char** argv) {
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") return true;
    }
    return false;
}

// True when the arguments ask for the program's table of flags as JSON: `-flags_json 1`, alone
// (an InputError when -flags_json stands beside other flags or with another value).
inline bool flags_json_requested(int argc, char** argv) {
    bool named = false;
    for (int i = 1; i < argc; i += 2) named = named || std::string(argv[i]) == "-flags_json";
    if (named && (argc != 3 || std::string(argv[2]) != "1"))
        throw InputError("flag -flags_json: give it alone, as -flags_json 1 (it prints the table of flags and exits)");
    return named;
}

// The body of a program's main(): prints `usage` for -h/--help, or `flags_json` for -flags_json 1
// (when the program has a table of flags to print), else runs `body` (returning the exit status).
// Bad input (InputError) is one line "program: message" on stderr and status 2; running out of
// memory (a model or batch too large for this machine) and a failed collective between ranks
// (CollectiveError) are one line and status 1; a failed write of an output (OutputError) is one
// line and status 4.
template <typename Body>
int run_program(const char* program, const std::string& usage, int argc, char** argv, Body body,
                const std::string& flags_json = "") {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress shows at once through a pipe (| tee) too
    fail_writes_past_the_file_size_limit();     // ulimit -f: exit status 4 and one line, as a full disk
    if (help_requested(argc, argv)) {
        std::fputs(usage.c_str(), stdout);
        return 0;
    }
    const char* out_of_memory = "%s: out of memory: the model or batch is too large for this machine\n";
    try {
        if (!flags_json.empty() && flags_json_requested(argc, argv)) {
            std::fputs(flags_json.c_str(), stdout);
            return 0;
        }
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

// A number for messages, usage and docs: %g, with inf spelled out.
inline std::string flag_number(double x) {
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
}

// The checked value of flag -name given as `text`: an integer in [lo, hi] ...
inline long long integer_value(const std::string& name, const std::string& text, long long lo, long long hi) {
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE) throw InputError("flag -" + name + ": '" + text + "' is not an integer");
    if (x < lo || x > hi)
        throw InputError("flag -" + name + ": " + text + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
}

// ... a real number from lo to hi, each end excluded when open ...
inline double real_value(const std::string& name, const std::string& text, double lo, double hi, bool lo_open = false,
                         bool hi_open = false) {
    char* end = nullptr;
    const double x = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(x)) throw InputError("flag -" + name + ": '" + text + "' is not a number");
    if (x < lo || x > hi || (lo_open && x == lo) || (hi_open && x == hi))
        throw InputError("flag -" + name + ": " + text + " is out of range " + (lo_open ? "(" : "[") + flag_number(lo) + ", " +
                         flag_number(hi) + (hi_open ? ")" : "]"));
    return x;
}

// ... or one of `choices`.
inline std::string choice_value(const std::string& name, const std::string& text, const std::vector<std::string>& choices) {
    for (const std::string& c : choices)
        if (text == c) return text;
    std::string list;
    for (const std::string& c : choices) list += (list.empty() ? "" : "|") + c;
    throw InputError("flag -" + name + ": '" + text + "' is not one of " + list);
}

// The arguments of a program as "-name value" pairs.
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

    // The text given for -name, or nullptr; either way -name counts as known to the program.
    const std::string* take(const std::string& name) {
        asked.insert(name);
        return given(name) ? &values.at(name) : nullptr;
    }

    // A string flag; when `choices` is not empty the value must be one of them.
    std::string str(const std::string& name, const std::string& fallback, const std::vector<std::string>& choices = {}) {
        const std::string* v = take(name);
        if (!v) return fallback;
        return choices.empty() ? *v : choice_value(name, *v, choices);
    }

    // An integer flag within [lo, hi].
    long long integer(const std::string& name, long long fallback, long long lo, long long hi) {
        const std::string* v = take(name);
        return v ? integer_value(name, *v, lo, hi) : fallback;
    }

    // A real-valued flag within [lo, hi] (lo excluded when lo_open).
    double real(const std::string& name, double fallback, double lo, double hi, bool lo_open = false) {
        const std::string* v = take(name);
        return v ? real_value(name, *v, lo, hi, lo_open) : fallback;
    }

    // Refuses any flag that was given but never asked for.
    void finish() const {
        for (const auto& kv : values)
            if (!asked.count(kv.first)) throw InputError("unknown flag -" + kv.first);
    }

    // The names of the flags given.
    std::set<std::string> names() const {
        std::set<std::string> out;
        for (const auto& kv : values) out.insert(kv.first);
        return out;
    }

private:
    std::map<std::string, std::string> values;
    std::set<std::string> asked;
};

// ---------------------------------------------------------------------------------------------
// Tables of flags

// The values one flag accepts.
struct FlagValues {
    enum class Kind { Integer, Real, Choice, Text } kind;
    long long min = 0, max = 0;             // Integer: [min, max]
    double lo = 0, hi = 0;                  // Real: from lo to hi,
    bool lo_open = false, hi_open = false;  //   the end excluded where open
    std::vector<std::string> choices;       // Choice
    std::string placeholder;                // what the value is: N, X, FILE, GLOB, DIR, ...
};

// Integers in [min, max] (0|1 for a switch).
inline FlagValues integers(long long min, long long max) {
    return {FlagValues::Kind::Integer, min, max, 0, 0, false, false, {}, "N"};
}
// Reals in [lo, hi]; above lo: (lo, hi]; below hi: [lo, hi).
inline FlagValues reals(double lo, double hi) { return {FlagValues::Kind::Real, 0, 0, lo, hi, false, false, {}, "X"}; }
inline FlagValues reals_above(double lo, double hi) { return {FlagValues::Kind::Real, 0, 0, lo, hi, true, false, {}, "X"}; }
inline FlagValues reals_below(double lo, double hi) { return {FlagValues::Kind::Real, 0, 0, lo, hi, false, true, {}, "X"}; }
// One of a few words.
inline FlagValues one_of(std::vector<std::string> choices) {
    return {FlagValues::Kind::Choice, 0, 0, 0, 0, false, false, std::move(choices), ""};
}
// Any text, e.g. a path: `placeholder` names it (FILE, GLOB, DIR).
inline FlagValues text(const char* placeholder) { return {FlagValues::Kind::Text, 0, 0, 0, 0, false, false, {}, placeholder}; }

// A flag's value once checked: the text as given, and its number for a numeric flag.
struct FlagValue {
    std::string name;  // the flag's
    std::string text;
    long long integer = 0;
    double real = 0;
};

// `text` checked against `values` (an InputError naming -name when it does not fit).
inline FlagValue check_flag_value(const std::string& name, const FlagValues& values, const std::string& text) {
    FlagValue v{name, text};
    switch (values.kind) {
        case FlagValues::Kind::Integer: v.real = (double)(v.integer = integer_value(name, text, values.min, values.max)); break;
        case FlagValues::Kind::Real: v.real = real_value(name, text, values.lo, values.hi, values.lo_open, values.hi_open); break;
        case FlagValues::Kind::Choice: choice_value(name, text, values.choices); break;
        case FlagValues::Kind::Text: break;
    }
    return v;
}

// A checked value stored into an option of each type; a switch (integers 0..1) into a bool.
inline void assign(int& to, const FlagValue& v) { to = (int)v.integer; }
inline void assign(long long& to, const FlagValue& v) { to = v.integer; }
inline void assign(uint64_t& to, const FlagValue& v) { to = (uint64_t)v.integer; }
inline void assign(bool& to, const FlagValue& v) { to = v.integer != 0; }
inline void assign(double& to, const FlagValue& v) { to = v.real; }
inline void assign(float& to, const FlagValue& v) {  // a value a float32 holds (nonzero: as a normal number)
    to = (float)v.real;
    if (v.real != 0 && std::fpclassify(to) != FP_NORMAL)
        throw InputError("flag -" + v.name + ": " + v.text + " is too small for a float32 (below 1.2e-38)");
}
inline void assign(std::string& to, const FlagValue& v) { to = v.text; }

// An option's value as config.json records it (a switch as 0 or 1, as it is typed).
inline Json option_json(int x) { return Json::integer(x); }
inline Json option_json(long long x) { return Json::integer(x); }
inline Json option_json(uint64_t x) { return Json::number(std::to_string(x)); }
inline Json option_json(bool x) { return Json::integer(x ? 1 : 0); }
inline Json option_json(double x) { return Json::number(x); }
inline Json option_json(float x) { return Json::number(json_float(x)); }
inline Json option_json(const std::string& x) { return Json::string(x); }

// What -resume 1 asks of a flag (docs/train.md §7).
enum class OnResume {
    MayChange,         // it observes or runs the run: may differ from the run's
    MustMatch,         // it defines the run: its recorded value must be config.json's
    MustMatchIfGiven,  // likewise, but only when given (-init: a resumed run's model is its checkpoint)
};

constexpr OnResume MAY_CHANGE = OnResume::MayChange, MUST_MATCH = OnResume::MustMatch;

// A flag's default: `value`, read as a given value would be; or, when a default can only be
// worked out at start-up (from the backend, the data or another flag), no value (the option
// keeps its initial value) and `text` to say what it will be.
struct FlagDefault {
    std::string value, text;
    FlagDefault(const char* v) : value(v), text(v) {}
    FlagDefault(std::string v, std::string t) : value(std::move(v)), text(std::move(t)) {}
};
inline FlagDefault worked_out(const char* text) { return {"", text}; }

// Where config.json records a flag (./train; run/run_config.h): under `name`, from the option
// itself (`from_option`: its resolved value, as the table writes it) or from what the run made
// of it (the model's placement and Δt, the model it started from, the files a glob matched).
struct FlagRecord {
    std::string name;  // empty: not recorded
    bool from_option;
};
// Recorded as the member `name`, which the run writes (not the option's value).
inline FlagRecord recorded_as(const char* name) { return {name, false}; }
inline const FlagRecord NOT_RECORDED = {"", false};

// One row of a program's table of flags: -name sets the member of Options it points to.
template <typename Options>
struct Flag {
    std::string name;  // without the dash
    FlagValues values;
    FlagDefault fallback;
    OnResume on_resume;
    std::string help;
    FlagRecord record;  // in config.json: by default the option's resolved value under the flag's name
    std::function<void(Options&, const FlagValue&)> store;  // into the option
    std::function<Json(const Options&)> json;               // the option as config.json holds it

    template <typename T>
    Flag(const char* name, T Options::*member, FlagValues values, FlagDefault fallback, OnResume on_resume,
         const char* help, FlagRecord record = {"", true})
        : name(name), values(std::move(values)), fallback(std::move(fallback)), on_resume(on_resume), help(help),
          record(record.from_option ? FlagRecord{name, true} : record),
          store([member](Options& o, const FlagValue& v) { assign(o.*member, v); }),
          json([member](const Options& o) { return option_json(o.*member); }) {}
};

// Refuses a flag glued to its value, as other tools spell it ("-B4", "-lr=1e-3"): at each place
// where a flag's name stands (argv[1], [3], ...), a word that is not a flag of `table` but
// starts with one, followed by a digit, '.', '-' or '=', gets a line saying that flags and values
// are separate words.
template <typename Options>
void check_flag_words(const std::vector<Flag<Options>>& table, int argc, char** argv) {
    for (int i = 1; i < argc; i += 2) {
        const std::string word = argv[i];
        if (word.size() < 3 || word[0] != '-') continue;
        bool known = false;
        const Flag<Options>* glued = nullptr;  // the longest flag the word starts with
        for (const Flag<Options>& f : table) {
            known = known || word.compare(1, std::string::npos, f.name) == 0;
            if (word.compare(1, f.name.size(), f.name) == 0 && word.size() > f.name.size() + 1 &&
                (!glued || f.name.size() > glued->name.size()))
                glued = &f;
        }
        if (known || !glued) continue;
        std::string value = word.substr(glued->name.size() + 1);
        if (value[0] == '=') value.erase(0, 1);
        const char c = word[glued->name.size() + 1];
        if (std::isdigit((unsigned char)c) || c == '.' || c == '-' || c == '=')
            throw InputError("flag " + word + ": flags and values are separate words: -" + glued->name + " " + value);
    }
}

// The options of `table` read from argv: each flag given, or its default, checked against its
// values; an unknown flag, a repeated one or a bad value is an InputError naming it. Options
// must have a member `given`, the names of the flags on the command line.
template <typename Options>
Options read_flags(const std::vector<Flag<Options>>& table, int argc, char** argv) {
    check_flag_words(table, argc, argv);
    Flags args(argc, argv);
    Options o;
    for (const Flag<Options>& flag : table) {
        const std::string* given = args.take(flag.name);
        if (given && given->empty() && flag.values.kind == FlagValues::Kind::Text)
            throw InputError("flag -" + flag.name + ": the value is empty (give a " + flag.values.placeholder + ")");
        if (given || !flag.fallback.value.empty())
            flag.store(o, check_flag_value(flag.name, flag.values, given ? *given : flag.fallback.value));
    }
    args.finish();
    o.given = args.names();
    return o;
}

// A real bound for usage and docs: %g without its exponent's padding (1e6, not 1e+06).
inline std::string real_bound_text(double x) {
    std::string s = flag_number(x);
    const size_t e = s.find("e+");
    if (e != std::string::npos) s.erase(e + 1, s.find_first_not_of("+0", e + 1) - e - 1);
    return s;
}

// An integer bound for usage and docs: a large power of two as 2^k (2^30), else in digits.
inline std::string bound_text(long long x) {
    for (int k = 16; k < 63; k++)
        if (x == (1LL << k)) return "2^" + std::to_string(k);
    return std::to_string(x);
}

// The values of a flag in words: "pre|post|peri", "0|1", "N in [1, 2^20]", "X in (0, 1000]", "FILE".
inline std::string values_text(const FlagValues& v) {
    switch (v.kind) {
        case FlagValues::Kind::Integer:
            if (v.min == 0 && v.max == 1) return "0|1";
            return v.placeholder + " in [" + bound_text(v.min) + ", " + bound_text(v.max) + "]";
        case FlagValues::Kind::Real:
            return v.placeholder + " in " + (v.lo_open ? "(" : "[") + real_bound_text(v.lo) + ", " + real_bound_text(v.hi) +
                   (v.hi_open ? ")" : "]");
        case FlagValues::Kind::Choice: {
            std::string s;
            for (const std::string& c : v.choices) s += (s.empty() ? "" : "|") + c;
            return s;
        }
        case FlagValues::Kind::Text: return v.placeholder;
    }
    return "";
}

// The text `./program -h` prints: `synopsis`, then one entry per flag (name and values; a star
// for a flag that defines the run; its help and default), wrapped at 100 columns, then `footer`.
template <typename Options>
std::string usage_text(const std::string& synopsis, const std::vector<Flag<Options>>& table, const std::string& footer = "") {
    const size_t indent = 26, width = 100;
    std::string out = synopsis + "\n";
    for (const Flag<Options>& f : table) {
        std::string left = "  -" + f.name + " " + values_text(f.values);
        std::string words = (f.on_resume == OnResume::MayChange ? "" : "* ") + f.help +
                            (f.fallback.text.empty() ? "" : " [default: " + f.fallback.text + "]");
        out += left + (left.size() + 1 < indent ? std::string(indent - left.size(), ' ') : "\n" + std::string(indent, ' '));
        size_t column = indent;
        for (size_t at = 0; at < words.size();) {
            size_t end = words.find(' ', at);
            if (end == std::string::npos) end = words.size();
            const std::string word = words.substr(at, end - at);
            if (column > indent && column + 1 + word.size() > width) {  // (bytes: may wrap a little early)
                out += "\n" + std::string(indent, ' ');
                column = indent;
            } else if (column > indent) {
                out += " ";
                column++;
            }
            out += word;
            for (unsigned char c : word) column += (c & 0xC0) != 0x80;  // characters, not UTF-8 bytes
            at = end + 1;
        }
        out += "\n";
    }
    return out + footer;
}

// What -resume 1 asks of a flag, in the words of the docs' tables and of flags_json.
inline const char* on_resume_text(OnResume r) {
    return r == OnResume::MustMatch ? "must match" : r == OnResume::MustMatchIfGiven ? "must match when given" : "may change";
}

// The markdown table of `table` (docs/cli.md holds it between marker comments, and
// `make docs` writes it there): flag, values, default, what -resume 1 asks, meaning.
template <typename Options>
std::string markdown_table(const std::vector<Flag<Options>>& table) {
    auto cell = [](const std::string& s) {
        std::string out;
        for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
        return out;
    };
    auto code = [&](const std::string& s) { return "`" + cell(s) + "`"; };
    auto values = [&](const FlagValues& v) {  // each choice as code, a range or placeholder as text
        const bool words = v.kind == FlagValues::Kind::Choice || (v.kind == FlagValues::Kind::Integer && v.min == 0 && v.max == 1);
        if (!words) return values_text(v);
        std::string s;
        for (const std::string& c : v.kind == FlagValues::Kind::Choice ? v.choices : std::vector<std::string>{"0", "1"})
            s += (s.empty() ? "" : ", ") + code(c);
        return s;
    };
    bool resumable = false;  // ./train's table: a column for what -resume 1 asks
    for (const Flag<Options>& f : table) resumable = resumable || f.on_resume != OnResume::MayChange;
    std::string out = resumable ? "| flag | values | default | on `-resume 1` | meaning |\n|---|---|---|---|---|\n"
                                : "| flag | values | default | meaning |\n|---|---|---|---|\n";
    for (const Flag<Options>& f : table) {
        const std::string fallback = !f.fallback.value.empty() ? code(f.fallback.text)
                                     : f.fallback.text.empty() ? "–"
                                                               : cell(f.fallback.text);
        const std::string resume = resumable ? on_resume_text(f.on_resume) + std::string(" | ") : "";
        out += "| `-" + f.name + "` | " + values(f.values) + " | " + fallback + " | " + resume + cell(f.help) + " |\n";
    }
    return out;
}

// The values of one flag as a JSON object: their kind and range or choices.
inline Json values_json(const FlagValues& v) {
    Json out = Json::object();
    switch (v.kind) {
        case FlagValues::Kind::Integer:
            out.set("kind", Json::string("integer"));
            out.set("min", Json::integer(v.min));
            out.set("max", Json::integer(v.max));
            break;
        case FlagValues::Kind::Real:
            out.set("kind", Json::string("real"));
            out.set("lo", Json::number(v.lo));
            out.set("hi", Json::number(v.hi));
            out.set("lo_open", Json::boolean(v.lo_open));
            out.set("hi_open", Json::boolean(v.hi_open));
            break;
        case FlagValues::Kind::Choice:
            out.set("kind", Json::string("choice"));
            out.set("choices", Json::array_of(v.choices));
            break;
        case FlagValues::Kind::Text: out.set("kind", Json::string("text")); break;
    }
    return out;
}

// The table of flags as JSON, what `./train -flags_json 1` and `./eval -flags_json 1` print
// (docs/cli.md §1) for the tools that pass these flags (experiments/settings.py):
// {"program": ..., "flags": [...]}, one object per flag in the table's order with
//   name, syntax     the flag without its dash, and its values as -h writes them ("X in (0, 10]");
//   values           kind (integer, real, choice, text) with min/max, lo/hi/lo_open/hi_open or choices;
//   default          as -h shows it ("6e-4", "lr/10"; "" for none);
//   default_value    the value the default stands for, as a given value's text; null when it is
//                    worked out at start-up or there is none;
//   default_number   that value as a number, for an integer or real flag; else null;
//   help             the help line;
// and for ./train, whose table says what -resume 1 asks:
//   on_resume        "must match", "must match when given" or "may change";
//   defines_run      true for a flag the usage marks with a star (it defines the run);
//   recorded_as      the config.json member that records it; null when config.json does not.
template <typename Options>
std::string flags_json(const std::string& program, const std::vector<Flag<Options>>& table) {
    bool resumable = false;  // ./train's table (as in markdown_table)
    for (const Flag<Options>& f : table) resumable = resumable || f.on_resume != OnResume::MayChange;
    std::string flags;
    for (const Flag<Options>& f : table) {
        const bool has_value = !f.fallback.value.empty();
        const bool numeric = f.values.kind == FlagValues::Kind::Integer || f.values.kind == FlagValues::Kind::Real;
        Json number;  // null
        if (has_value && numeric) {
            const FlagValue v = check_flag_value(f.name, f.values, f.fallback.value);
            number = f.values.kind == FlagValues::Kind::Integer ? Json::integer(v.integer) : Json::number(v.real);
        }
        Json row = Json::object();
        row.set("name", Json::string(f.name));
        row.set("syntax", Json::string(values_text(f.values)));
        row.set("values", values_json(f.values));
        row.set("default", Json::string(f.fallback.text));
        row.set("default_value", has_value ? Json::string(f.fallback.value) : Json());
        row.set("default_number", number);
        row.set("help", Json::string(f.help));
        if (resumable) {
            row.set("on_resume", Json::string(on_resume_text(f.on_resume)));
            row.set("defines_run", Json::boolean(f.on_resume != OnResume::MayChange));
            row.set("recorded_as", f.record.name.empty() ? Json() : Json::string(f.record.name));
        }
        flags += (flags.empty() ? "\n    " : ",\n    ") + row.str();
    }
    return "{\n  \"program\": " + json_string(program) + ",\n  \"flags\": [" + flags + "\n  ]\n}\n";
}

// `doc` with the text between the lines "<!-- BEGIN name -->" and "<!-- END name -->" replaced
// by `content`; an InputError when the markers are not there once each, in that order.
inline std::string replace_between_markers(const std::string& doc, const std::string& name, const std::string& content) {
    const std::string begin = "<!-- BEGIN " + name + " -->\n", end = "<!-- END " + name + " -->";
    const size_t b = doc.find(begin), e = doc.find(end);
    if (b == std::string::npos || e == std::string::npos || e < b || doc.find(begin, b + 1) != std::string::npos ||
        doc.find(end, e + 1) != std::string::npos)
        throw InputError("no single pair of markers '" + begin.substr(0, begin.size() - 1) + "' ... '" + end + "'");
    return doc.substr(0, b + begin.size()) + content + doc.substr(e);
}
