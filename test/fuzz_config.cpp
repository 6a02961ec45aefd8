// Fuzz target: config.json as -resume 1 reads it (util/json.h's reader, run/run_config.h's check). The
// input is the file's text: it must be read as JSON and written back as the same value (on one
// line, and an object also one member per line, config.json's layout), or be refused with an
// InputError; a JSON object then goes through the resume check against the config.json of a
// run with default settings, which accepts it or refuses it with an InputError. Nothing else
// (a crash, a hang, another exception) may happen.
#include <cstdlib>
#include <string>

#include "util/json.h"
#include "run/run_config.h"
#include "flags/train_flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    Json saved;
    try {
        saved = read_json(text, "config.json");
    } catch (const InputError&) {
        return 0;
    }
    if (read_json(saved.str(), "again") != saved) std::abort();
    if (saved.kind() != Json::Kind::Object) return 0;
    if (read_json(saved.lines(), "again") != saved) std::abort();
    static const TrainOptions options = [] {
        char program[] = "./train";
        char* argv[] = {program};
        return parse_train_options(1, argv);
    }();
    static const Json now = [] {
        Json j = Json::object();
        for (const TrainFlag& f : train_flags()) j.set(f.record.name.empty() ? "unrecorded" : f.record.name, f.json(options));
        return j;
    }();
    try {
        check_same_run(saved, now, options, "config.json");
    } catch (const InputError&) {
    }
    return 0;
}
