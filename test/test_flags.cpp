// The tables of flags (flags/train_flags.h, flags/eval_flags.h) and what comes from them: every flag at and
// beyond each bound of its values (the option then holds what was typed), the defaults within
// the values, the checks across flags, the usage naming every flag, and the tables of
// docs/cli.md equal to the code's (`make docs`). Also util/json.h's reader and writer, through which
// config.json goes. Run from the repository root (the docs are read from there).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "flags/eval_flags.h"
#include "flags/flag_docs.h"
#include "util/json.h"
#include "util/rng.h"
#include "run/resume.h"
#include "run/run_counts.h"
#include "test_files.h"
#include "flags/train_flags.h"

namespace {

// `parse(argc, argv)` on the arguments `words` after a program's name.
template <typename Parse>
auto with_args(std::vector<std::string> words, Parse parse) {
    words.insert(words.begin(), "./program");
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    return parse((int)argv.size(), argv.data());
}

// The options of `table` from the arguments `words`; InputError as read_flags throws it.
template <typename Options>
Options read(const std::vector<Flag<Options>>& table, const std::vector<std::string>& words) {
    return with_args(words, [&](int argc, char** argv) { return read_flags(table, argc, argv); });
}

// The message of the InputError that `parse` (parse_train_options, parse_eval_options) throws
// for the arguments `words`, or "" when it accepts them.
template <typename Parse>
std::string refusal_of(const std::vector<std::string>& words, Parse parse) {
    try {
        with_args(words, parse);
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

// The message of the InputError that -name value raises, or "" when it is accepted.
template <typename Options>
std::string refusal(const std::vector<Flag<Options>>& table, const std::string& name, const std::string& value) {
    return refusal_of({"-" + name, value}, [&](int argc, char** argv) { return read_flags(table, argc, argv); });
}

std::string exact(double x) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", x);
    return buf;
}

// -name value is accepted and the option then holds the value typed (as config.json records it).
template <typename Options>
void expect_accepted(const std::vector<Flag<Options>>& table, const Flag<Options>& f, const std::string& value) {
    Options o;
    try {
        o = read(table, {"-" + f.name, value});
    } catch (const InputError& e) {
        ADD_FAILURE() << "-" << f.name << " " << value << " refused: " << e.what();
        return;
    }
    const Json held = f.json(o);
    switch (f.values.kind) {
        case FlagValues::Kind::Integer: EXPECT_EQ(held.text(), value) << "-" << f.name << " holds another value"; break;
        case FlagValues::Kind::Real: {
            const double typed = std::strtod(value.c_str(), nullptr);
            EXPECT_NEAR(held.as_number(), typed, 1e-7 * std::fabs(typed)) << "-" << f.name << " " << value;
            break;
        }
        default: EXPECT_EQ(held.text(), value) << "-" << f.name; break;
    }
}

// -name value is refused with one message naming the flag.
template <typename Options>
void expect_refused(const std::vector<Flag<Options>>& table, const Flag<Options>& f, const std::string& value) {
    const std::string message = refusal(table, f.name, value);
    EXPECT_EQ(message.rfind("flag -" + f.name + ": ", 0), 0u) << "-" << f.name << " '" << value << "': " << message;
}

// Every flag of `table` at and beyond each bound of its values.
template <typename Options>
void check_bounds(const std::vector<Flag<Options>>& table) {
    for (const Flag<Options>& f : table) {
        const FlagValues& v = f.values;
        switch (v.kind) {
            case FlagValues::Kind::Integer:
                expect_accepted(table, f, std::to_string(v.min));
                expect_accepted(table, f, std::to_string(v.max));
                expect_refused(table, f, std::to_string(v.min - 1));
                expect_refused(table, f, std::to_string(v.max + 1));
                for (const char* bad : {"", "1.5", "x", "0x10", "99999999999999999999"}) expect_refused(table, f, bad);
                break;
            case FlagValues::Kind::Real:
                // An open end is refused and a value just inside it accepted (above an open 0, one
                // that a float32 option holds too).
                if (v.lo_open) {
                    expect_refused(table, f, exact(v.lo));
                    expect_accepted(table, f, exact(v.lo == 0 ? 1e-30 : std::nextafter(v.lo, DBL_MAX)));
                } else {
                    expect_accepted(table, f, exact(v.lo));
                }
                if (v.hi_open) {
                    expect_refused(table, f, exact(v.hi));
                    expect_accepted(table, f, exact(std::nextafter(v.hi, -DBL_MAX)));
                } else {
                    expect_accepted(table, f, exact(v.hi));
                }
                expect_refused(table, f, exact(std::nextafter(v.lo, -DBL_MAX)));
                expect_refused(table, f, exact(std::nextafter(v.hi, DBL_MAX)));
                for (const char* bad : {"", "x", "nan", "inf", "-inf", "1e999", "1,5"}) expect_refused(table, f, bad);
                break;
            case FlagValues::Kind::Choice:
                for (const std::string& c : v.choices) {
                    expect_accepted(table, f, c);
                    expect_refused(table, f, c + "x");
                }
                expect_refused(table, f, "");
                break;
            case FlagValues::Kind::Text: expect_accepted(table, f, "some/path_*.bin"); break;
        }
    }
}

TEST(FlagTables, TrainFlagsAtAndBeyondEachBound) { check_bounds(train_flags()); }
TEST(FlagTables, EvalFlagsAtAndBeyondEachBound) { check_bounds(eval_flags()); }

TEST(FlagTables, AFloat32OptionRefusesWhatAFloat32CannotHold) {
    // -dt is a float32: 1e-40 is in (0, 1000] but would be a subnormal float, 0 to the trainer
    // (subnormals are flushed to zero).
    EXPECT_EQ(refusal(train_flags(), "dt", "1e-40"), "flag -dt: 1e-40 is too small for a float32 (below 1.2e-38)");
    EXPECT_EQ(read(train_flags(), {"-dt", "1e-37"}).dt, 1e-37f);
}

TEST(FlagTables, NamesAreUniqueAndRunDefiningFlagsAreRecorded) {
    std::set<std::string> names, records;
    for (const TrainFlag& f : train_flags()) {
        EXPECT_TRUE(names.insert(f.name).second) << "-" << f.name << " twice";
        if (!f.record.name.empty()) {
            EXPECT_TRUE(records.insert(f.record.name).second) << f.record.name << " twice";
        }
        if (f.on_resume != MAY_CHANGE) {
            EXPECT_FALSE(f.record.name.empty()) << "-" << f.name << " defines the run unrecorded";
        }
        EXPECT_FALSE(f.help.empty()) << "-" << f.name;
    }
    names.clear();
    for (const EvalFlag& f : eval_flags()) {
        EXPECT_TRUE(names.insert(f.name).second) << "-" << f.name << " twice";
        EXPECT_EQ(f.on_resume, MAY_CHANGE) << "-" << f.name;  // ./eval has no runs to resume
    }
}

TEST(FlagTables, DefaultsAndTheDefaultsWorkedOutFromOtherFlags) {
    const TrainOptions o = with_args({}, parse_train_options);
    EXPECT_EQ(o.ln, "pre");
    EXPECT_EQ(o.dt, 1.0f);
    EXPECT_EQ(o.steps, 1000);
    EXPECT_EQ(o.lr, 6e-4);
    EXPECT_EQ(o.lr_min, 6e-4 / 10);  // lr/10
    EXPECT_EQ(o.warmup, 20);          // min(20, steps/10)
    EXPECT_EQ(o.eps, 1e-8);
    EXPECT_EQ(o.seed, 42u);
    EXPECT_TRUE(o.shuffle && o.zero && !o.resume);
    EXPECT_EQ(o.B, 0);  // worked out at start-up
    EXPECT_TRUE(o.given.empty());
    EXPECT_EQ(o.command, "./program");
    const TrainOptions p = read(train_flags(), {"-lr", "1e-3", "-steps", "50"});
    EXPECT_EQ(p.given, (std::set<std::string>{"lr", "steps"}));
    EXPECT_EQ(p.lr_min, 0);  // read_flags leaves it; parse_train_options works it out
}

TEST(FlagTables, ChecksAcrossFlags) {
    auto parse = [](const std::vector<std::string>& words) { return refusal_of(words, parse_train_options); };
    EXPECT_EQ(parse({"-steps", "5", "-warmup", "6"}), "flag -warmup: 6 exceeds -steps 5");
    EXPECT_EQ(parse({"-steps", "5", "-warmup", "5"}), "");
    EXPECT_EQ(parse({"-steps", "9"}), "");  // the default warmup, min(20, 9/10) = 0
    EXPECT_EQ(parse({"-resume", "1", "-overwrite", "1"}), "flag -overwrite: cannot be combined with -resume 1");
    EXPECT_EQ(parse({"-change_steps", "1"}), "flag -change_steps: only applies with -resume 1");
    EXPECT_EQ(parse({"-lr", "1", "-lr", "2"}), "flag -lr given twice");
    EXPECT_EQ(parse({"-nope", "1"}), "unknown flag -nope");
    EXPECT_EQ(parse({"-lr"}), "flag -lr needs a value");
    EXPECT_EQ(parse({"lr", "1"}), "unexpected argument 'lr' (flags are -name value)");
    EXPECT_EQ(parse({"-", "1"}), "unexpected argument '-' (flags are -name value)");
    EXPECT_EQ(parse({"-lr", "0.001", "-lr_min", "0.001"}), "");  // a flat decay
    EXPECT_EQ(parse({"-lr", "0.001", "-lr_min", "0.002"}),
              "flag -lr_min: 0.002 exceeds -lr 0.001 (the rate would rise during the decay)");
}

TEST(FlagTables, EvalNeedsAModelOrARunFolderAndOneSigma) {
    auto parse = [](const std::vector<std::string>& words) { return refusal_of(words, parse_eval_options); };
    EXPECT_EQ(parse({}), "flag -model: a checkpoint file is required (or -run DIR, a ./train run folder)");
    EXPECT_EQ(parse({"-model", "m.bin"}), "");
    EXPECT_EQ(parse({"-run", "out"}), "");
    EXPECT_EQ(parse({"-model", "m.bin", "-sigma", "0.5", "-sigma_rel", "0.1"}),
              "flag -sigma: give -sigma (absolute) or -sigma_rel (relative), not both");
    for (const std::string other : {"prompt", "json", "pairs"})
        EXPECT_EQ(parse({"-model", "m.bin", "-export", "m.safetensors", "-" + other, "x"}),
                  "flag -" + other + ": -export only writes the model; give -" + other + " in another ./eval");
}

TEST(FlagTables, UsageNamesEveryFlagAndMarksThoseThatDefineTheRun) {
    const std::string usage = train_usage();
    for (const TrainFlag& f : train_flags()) {
        const std::string left = "\n  -" + f.name + " " + values_text(f.values);
        const size_t at = usage.find(left);
        ASSERT_NE(at, std::string::npos) << left << " not in\n" << usage;
        const size_t help = usage.find_first_not_of(" \n", at + left.size());  // the help, beside or below
        EXPECT_EQ(usage.compare(help, 2, "* ") == 0, f.on_resume != MAY_CHANGE) << usage.substr(at, 200);
        EXPECT_NE(usage.find(f.help.substr(0, f.help.find(' ')), at), std::string::npos) << "-" << f.name;
    }
    const std::string eval = eval_usage();
    for (const EvalFlag& f : eval_flags()) EXPECT_NE(eval.find("\n  -" + f.name + " "), std::string::npos) << "-" << f.name;
    for (const std::string& text : {usage, eval}) {
        std::stringstream in(text);
        for (std::string line; std::getline(in, line);) EXPECT_LE(line.size(), 110u) << line;  // 100 columns, UTF-8 aside
    }
}

TEST(FlagTables, DocsHoldTheTablesOfTheCode) {
    for (const FlagDoc& doc : flag_docs()) {
        const std::string text = read_file(doc.path);
        ASSERT_FALSE(text.empty()) << doc.path << " not found: run the test from the repository root";
        std::string expected;
        ASSERT_NO_THROW(expected = replace_between_markers(text, doc.marker, doc.content)) << doc.path;
        EXPECT_TRUE(expected == text) << doc.path << ": the table \"" << doc.marker
                                      << "\" differs from the code's; run make docs. The code's table:\n"
                                      << doc.content;
    }
}

// The flags named in the usage text `usage` (its lines "  -name VALUES ..."), in order.
std::vector<std::string> usage_flag_names(const std::string& usage) {
    std::vector<std::string> names;
    std::stringstream in(usage);
    for (std::string line; std::getline(in, line);)
        if (line.compare(0, 3, "  -") == 0) names.push_back(line.substr(3, line.find(' ', 3) - 3));
    return names;
}

// `-flags_json 1`'s JSON of `table` parses, and lists exactly the flags the parser takes and the
// usage names: each one's range or choices, accepted at its ends by read_flags and refused just
// beyond; its default, the value the parser takes when the flag is absent; its star.
template <typename Options>
void check_flags_json(const std::string& program, const std::vector<Flag<Options>>& table, const std::string& usage) {
    const Json doc = read_json(flags_json(program, table), program + " -flags_json 1");
    ASSERT_EQ(doc.get("program")->text(), program);
    const std::vector<Json>& rows = doc.get("flags")->items();
    std::vector<std::string> names;
    for (const Json& row : rows) names.push_back(row.get("name")->text());
    EXPECT_EQ(names, usage_flag_names(usage));
    ASSERT_EQ(rows.size(), table.size());
    EXPECT_NE(refusal(table, "not_a_flag", "1"), "") << "the parser takes a flag the JSON does not list";
    const Options absent = read(table, {});
    for (size_t i = 0; i < rows.size(); i++) {
        const Json& row = rows[i];
        const Json& values = *row.get("values");
        const Flag<Options>& f = table[i];
        const std::string kind = values.get("kind")->text();
        if (kind == "integer") {
            const long long lo = std::stoll(values.get("min")->text()), hi = std::stoll(values.get("max")->text());
            EXPECT_EQ(refusal(table, f.name, std::to_string(lo)), "") << f.name;
            EXPECT_EQ(refusal(table, f.name, std::to_string(hi)), "") << f.name;
            EXPECT_NE(refusal(table, f.name, std::to_string(lo - 1)), "") << f.name;
            EXPECT_NE(refusal(table, f.name, std::to_string(hi + 1)), "") << f.name;
        } else if (kind == "real") {
            const double lo = values.get("lo")->as_number(), hi = values.get("hi")->as_number();
            const bool lo_open = values.get("lo_open")->text() == "true", hi_open = values.get("hi_open")->text() == "true";
            EXPECT_EQ(refusal(table, f.name, exact(lo)) == "", !lo_open) << f.name;
            EXPECT_EQ(refusal(table, f.name, exact(hi)) == "", !hi_open) << f.name;
            EXPECT_NE(refusal(table, f.name, exact(std::nextafter(lo, -DBL_MAX))), "") << f.name;
            EXPECT_NE(refusal(table, f.name, exact(std::nextafter(hi, DBL_MAX))), "") << f.name;
        } else if (kind == "choice") {
            for (const Json& c : values.get("choices")->items()) EXPECT_EQ(refusal(table, f.name, c.text()), "") << f.name;
            EXPECT_NE(refusal(table, f.name, "not_a_choice"), "") << f.name;
        } else {
            EXPECT_EQ(kind, "text") << f.name;
            EXPECT_EQ(refusal(table, f.name, "some/path"), "") << f.name;
        }
        const Json& value = *row.get("default_value");
        if (value.kind() == Json::Kind::Null) continue;  // worked out at start-up, or none
        const Options given = read(table, {"-" + f.name, value.text()});
        EXPECT_EQ(f.json(given).str(), f.json(absent).str()) << "-" << f.name << "'s default is not " << value.text();
        const Json& number = *row.get("default_number");
        if (kind == "integer" || kind == "real") {
            EXPECT_EQ(number.as_number(), std::strtod(value.text().c_str(), nullptr)) << f.name;
        } else {
            EXPECT_EQ(number.kind(), Json::Kind::Null) << f.name;
        }
    }
}

TEST(FlagTables, FlagsJsonListsExactlyTheParsersFlags) {
    check_flags_json("train", train_flags(), train_usage());
    check_flags_json("eval", eval_flags(), eval_usage());
    const Json train = read_json(flags_json("train", train_flags()), "train");
    const std::string usage = train_usage();
    for (const Json& row : train.get("flags")->items()) {  // the star of -h, and config.json's member
        const std::string name = row.get("name")->text();
        const std::string left = "\n  -" + name + " " + row.get("syntax")->text();
        const size_t at = usage.find(left);
        ASSERT_NE(at, std::string::npos) << left;
        const bool star = usage.compare(usage.find_first_not_of(" \n", at + left.size()), 2, "* ") == 0;
        EXPECT_EQ(row.get("defines_run")->text() == "true", star) << name;
        EXPECT_NE(row.get("recorded_as"), nullptr) << name;
    }
    const Json eval = read_json(flags_json("eval", eval_flags()), "eval");
    EXPECT_EQ(eval.get("flags")->items()[0].get("recorded_as"), nullptr);  // ./eval writes no config.json
}

TEST(FlagTables, FlagsJsonIsAskedForAlone) {
    auto asked = [](const std::vector<std::string>& words) {
        return with_args(words, [](int argc, char** argv) { return flags_json_requested(argc, argv); });
    };
    EXPECT_TRUE(asked({"-flags_json", "1"}));
    EXPECT_FALSE(asked({}));
    EXPECT_FALSE(asked({"-out", "-flags_json"}));  // a value, not the flag
    EXPECT_THROW(asked({"-flags_json", "0"}), InputError);
    EXPECT_THROW(asked({"-lr", "1", "-flags_json", "1"}), InputError);
}

TEST(FlagTables, MarkersAreFoundOnceEach) {
    const std::string doc = "a\n<!-- BEGIN t -->\nold\n<!-- END t -->\nb\n";
    EXPECT_EQ(replace_between_markers(doc, "t", "new\n"), "a\n<!-- BEGIN t -->\nnew\n<!-- END t -->\nb\n");
    EXPECT_THROW(replace_between_markers(doc, "u", "x"), InputError);
    EXPECT_THROW(replace_between_markers(doc + doc, "t", "x"), InputError);
    EXPECT_THROW(replace_between_markers("<!-- END t -->\n<!-- BEGIN t -->\n", "t", "x"), InputError);
}

// ---------------------------------------------------------------------------------------------
// util/json.h

// The counts derived from ./train's flags (run/run_counts.h) against exact 128-bit arithmetic, over
// values drawn at and around every bound of the flags' ranges and powers of two: either refused
// with an InputError, exactly when a count would overflow or leave nothing to do, or all correct.
TEST(FlagCounts, BatchPositionsAndTotalBatchAtTheirEdges) {
    EXPECT_EQ(batch_positions(1, INT_MAX), INT_MAX);  // the most an int indexes
    EXPECT_THROW(batch_positions(1, INT_MAX + 1LL), InputError);
    EXPECT_EQ(step_counts(1, 1, 1, 1, 1).grad_accum, 1);
    EXPECT_THROW(step_counts(1, 1, 1, 0, 1), InputError);  // a total batch of 0 tokens
}

TEST(FlagCounts, StepCountsAreExactOrRefusedForExtremeValues) {
    const std::vector<long long> edges = {1, 2, 3, 7, 8, 255, 256, 1023, 1024, 65535, 65536, (1 << 20) - 1, 1 << 20,
                                          (1LL << 31) - 1, 1LL << 31, (1LL << 32) + 1, (1LL << 40) - 1, 1LL << 40,
                                          1LL << 62, LLONG_MAX};
    Rng rng(7);
    auto draw = [&](long long hi) {  // an edge up to hi, or a random value below it
        const long long e = edges[rng.below(edges.size())];
        return std::min(hi, rng.below(3) ? e : 1 + (long long)rng.below(uint64_t(std::min(e, hi))));
    };
    int accepted = 0, refused = 0;
    for (int trial = 0; trial < 200000; trial++) {
        const long long B = draw(1 << 20), T = draw(1 << 20), ranks = draw(1 << 16), total = draw(1LL << 40),
                        steps = draw(1 << 30);
        const __int128 positions = (__int128)B * T, micro = positions * ranks;
        const bool valid = positions <= INT_MAX && micro <= LLONG_MAX && total % (long long)micro == 0 &&
                           total / micro >= 1 && total / micro <= INT_MAX && (__int128)steps * total <= LLONG_MAX;
        try {
            const StepCounts c = step_counts(B, T, ranks, total, steps);
            ASSERT_TRUE(valid) << B << " " << T << " " << ranks << " " << total << " " << steps;
            ASSERT_EQ(c.positions, positions);
            ASSERT_EQ(c.micro_tokens, micro);
            ASSERT_EQ((__int128)c.grad_accum * micro, total);
            ASSERT_EQ(c.run_tokens, (__int128)steps * total);
            accepted++;
        } catch (const InputError& e) {
            ASSERT_FALSE(valid) << e.what();
            ASSERT_EQ(std::string(e.what()).find('\n'), std::string::npos);
            refused++;
        }
    }
    EXPECT_GT(accepted, 1000);  // both sides of every check are reached
    EXPECT_GT(refused, 1000);
    EXPECT_EQ(evaluation_tokens(1 << 30, 1 << 20, 1 << 10), 1LL << 60);
    EXPECT_THROW(evaluation_tokens(1 << 30, 1 << 20, 1 << 20), InputError);  // B*T = 2^40 positions
    EXPECT_THROW(evaluation_tokens(1LL << 40, 1 << 15, 1 << 15), InputError);  // 2^70 tokens
}

// The default step on CUDA (docs/train.md §1): GPT-2's 524,288 tokens on a large corpus, at
// most 1/16 of a small one's training tokens, never below one micro-step.
TEST(FlagCounts, TheDefaultGpuStepFitsTheCorpus) {
    EXPECT_EQ(default_gpu_total_batch(16384, 9000000000ull), 524288);
    EXPECT_EQ(default_gpu_total_batch(3 * 16384, 9000000000ull), 10 * 3 * 16384);  // a multiple of ranks·B·T
    EXPECT_EQ(default_gpu_total_batch(16384, 287625), 16384);         // the bundled corpus: one micro-step
    EXPECT_EQ(default_gpu_total_batch(1024, 287625), 17 * 1024);      // 1/16 of it is 17,976 tokens
    EXPECT_EQ(default_gpu_total_batch(16384, 1000), 16384);           // never below one micro-step
    EXPECT_EQ(default_gpu_total_batch(16384, 0), 524288);             // no readable shard: the loader says why
}

// The default step is one process's, whatever the ranks (docs/distributed.md): kept when ranks·B·T
// divides it, refused naming -total_batch when it does not.
TEST(FlagCounts, TheDefaultStepIsOneProcessesUnderAnyRanks) {
    EXPECT_EQ(default_total_batch(524288, 32, 1024, 1), 524288);
    EXPECT_EQ(default_total_batch(524288, 32, 1024, 8), 524288);  // 2 micro-steps on each of 8 GPUs
    EXPECT_EQ(default_total_batch(2048, 8, 256, 1), 2048);        // the CPU's B·T, one process
    try {
        default_total_batch(2048, 8, 256, 2);  // the CPU's B·T cannot split over 2 ranks
        ADD_FAILURE() << "not refused";
    } catch (const InputError& e) {
        EXPECT_EQ(std::string(e.what()), "flag -total_batch: not given, and its default, one process's step of 2048 "
                                         "tokens, is not a multiple of ranks*B*T = 2*8*256 = 4096; give -total_batch "
                                         "(a multiple of 4096) to choose the step");
    }
    EXPECT_THROW(default_total_batch(524288, 32, 1024, 3), InputError);  // 3 ranks do not divide 2^19
}

TEST(Json, WritesConfigLayoutAndReadsItBack) {
    Json j = Json::object();
    j.set("command", Json::string("./train -out \"a b\"\n\t\\ é"));
    j.set("dt", Json::number(json_float(0.1f)));
    j.set("lr", Json::number(6e-4));
    j.set("files", Json::array_of({"x.bin", "y.bin"}));
    j.set("resumed_at_step", Json());
    j.set("nested", Json::object());
    j.set("yes", Json::boolean(true));
    const std::string text = j.lines();
    EXPECT_EQ(text,
              "{\n  \"command\": \"./train -out \\\"a b\\\"\\n\\t\\\\ é\",\n  \"dt\": 0.1,\n  \"lr\": 0.0006,\n"
              "  \"files\": [\"x.bin\", \"y.bin\"],\n  \"resumed_at_step\": null,\n  \"nested\": {},\n  \"yes\": true\n}\n");
    const Json back = read_json(text, "config.json");
    EXPECT_EQ(back.lines(), text);
    EXPECT_EQ(back.get("command")->text(), "./train -out \"a b\"\n\t\\ é");
    EXPECT_EQ(back.get("files")->items().size(), 2u);
    EXPECT_EQ(back.get("missing"), nullptr);
    Json changed = back;
    changed.set("lr", Json::number(1e-3));  // in its place
    changed.set("added", Json::integer(7));  // last
    changed.remove("files");
    EXPECT_EQ(changed.str(), "{\"command\": \"./train -out \\\"a b\\\"\\n\\t\\\\ é\", \"dt\": 0.1, \"lr\": 0.001, "
                             "\"resumed_at_step\": null, \"nested\": {}, \"yes\": true, \"added\": 7}");
}

TEST(Json, KeepsANumbersTextAndComparesAsWritten) {
    const Json a = read_json("[1e-8, 0.100000001, -0, 12345678901234567890]", "x");
    EXPECT_EQ(a.str(), "[1e-8, 0.100000001, -0, 12345678901234567890]");
    EXPECT_EQ(a.items()[0].as_number(), 1e-8);
    EXPECT_NE(read_json("0.1", "x"), read_json("0.10", "x"));  // -resume 1 compares settings as written
    EXPECT_EQ(read_json(" { \"a\" : [ 1 , { } ] } ", "x"), read_json("{\"a\": [1, {}]}", "x"));
    EXPECT_EQ(Json::number(NAN).str(), "null");
}

TEST(Json, DecodesEscapes) {
    EXPECT_EQ(read_json("\"\\u00e9\\ud83d\\ude00\\/\\b\\f\\r\"", "x").text(), "é\xF0\x9F\x98\x80/\b\f\r");
    EXPECT_EQ(read_json("\"\\u0041\"", "x").text(), "A");
}

TEST(Json, RefusesWhatIsNotJsonWithTheFileAndByte) {
    for (const char* bad : {"", "{", "{\"a\" 1}", "{\"a\": 1,}", "[1 2]", "01", "1.", ".5", "-", "1e", "+1", "tru",
                            "\"open", "\"\\x\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\u12g4\"", "\"a\nb\"", "{} {}",
                            "{a: 1}", "nan", "[1,]", "'a'"}) {
        try {
            read_json(bad, "out/config.json");
            ADD_FAILURE() << "accepted: " << bad;
        } catch (const InputError& e) {
            EXPECT_EQ(std::string(e.what()).rfind("out/config.json: not JSON (", 0), 0u) << e.what();
        }
    }
    EXPECT_THROW(read_json(std::string(1000, '[') + std::string(1000, ']'), "x"), InputError);  // too deep, no crash
    EXPECT_NO_THROW(read_json(std::string(60, '[') + std::string(60, ']'), "x"));
}

}  // namespace
