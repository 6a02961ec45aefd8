// run/run_config.h — DIR/config.json of ./train (docs/train.md §4, docs/cli.md §3): what made the
// run. It is written from the run (the command, backend, the model and data the flags resolved
// to) and from train_flags() (every recorded flag at its resolved value), through util/json.h; and
// read back by -resume 1, which refuses a flag that defines the run (MUST_MATCH in the table) at
// another value than the one recorded.
#pragma once
#include <cstdlib>
#include <string>
#include <vector>

#include "dataloader.h"
#include "util/errors.h"
#include "util/json.h"
#include "run/resume.h"
#include "run/run_dir.h"
#include "run/setup.h"
#include "flags/train_flags.h"

// The config.json `r` starts with, on `backend`, reading `train` (and `val`, when evaluating):
// the command line, the backend (on CUDA with the kinds of product it fuses), the model and its
// origin, the data files and tokens, the ranks and micro-steps, then every flag the table records
// from its option, at its resolved value. On -resume 1 "model" is what -init says ("" without it); resumed_config then keeps the
// run's own.
inline Json config_json(const Run& r, const Backend& backend, const DataLoader& train, const DataLoader* val) {
    Json j = Json::object();
    j.set("command", Json::string(r.opt.command));
    j.set("backend", Json::string(backend.name()));
    if (const FusionChoice* fused = backend.fusion())
        j.set("fused_products", Json::array_of(fused_kind_names(fused->kinds)));
    j.set("model", Json::string(r.resuming ? init_origin(r.opt.init) : r.model_origin));
    const Json model = model_json(r.cfg);  // placement, dt, sizes
    for (const auto& [name, value] : model.members()) j.set(name, value);
    j.set("train_files", Json::array_of(train.files()));
    j.set("train_tokens", Json::number(std::to_string(train.total_tokens())));
    j.set("val_files", val ? Json::array_of(val->files()) : Json::array());
    j.set("train_data", Json::string(r.opt.train_data));  // the globs, for ./eval -run
    j.set("val_data", Json::string(r.opt.val_data));
    j.set("ranks", Json::integer(r.ranks));
    j.set("grad_accum", Json::integer(r.grad_accum));
    for (const TrainFlag& f : train_flags())
        if (f.record.from_option) j.set(f.record.name, f.json(r.opt));
    j.set("resumed_at_step", r.resuming ? Json::integer(r.state.steps_done) : Json());
    return j;
}

// The id of a fresh run, which config.json ("run_id"), its checkpoints and its optimiser states
// record (docs/formats.md §2, §3) so that -resume 1 refuses a file of another run: a 64-bit
// FNV-1a hash of what defines the run, the members `config` records for the flags that define it
// (the model, its sizes, the data, the seed, the schedule, ...), and the weights of a -init file
// (`initial_params`; empty for a fresh size, which the seed defines). Two runs with one id are
// the same computation, so their files are the same too. Never 0, which means "none".
inline uint64_t fresh_run_id(const Json& config, const std::vector<float>& initial_params) {
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&h](const void* data, size_t bytes) {
        for (size_t i = 0; i < bytes; i++) h = (h ^ static_cast<const unsigned char*>(data)[i]) * 0x100000001b3ull;
    };
    for (const TrainFlag& f : train_flags()) {
        if (f.on_resume == OnResume::MayChange) continue;  // a flag added or changed later leaves ids alone
        const Json* value = config.get(f.record.name);
        const std::string text = f.record.name + "=" + (value ? value->str() : "") + "\n";
        mix(text.data(), text.size());
    }
    for (const char* size : {"L", "NH", "C", "V", "maxT"}) {
        const std::string text = std::string(size) + "=" + config.get(size)->str() + "\n";
        mix(text.data(), text.size());
    }
    mix(initial_params.data(), initial_params.size() * sizeof(float));
    return h ? h : 1;
}

// Refuses (InputError naming the flag) a -resume 1 whose settings contradict the run's: for every
// flag that defines the run (and -init when given), the member that records it must hold the
// same value in `now`, the config.json this start would write, as in `saved`, the folder's (read
// from `path`). -steps may differ with -change_steps 1.
inline void check_same_run(const Json& saved, const Json& now, const TrainOptions& o, const std::string& path) {
    for (const TrainFlag& f : train_flags()) {
        const bool defines = f.on_resume == MUST_MATCH || (f.on_resume == OnResume::MustMatchIfGiven && o.given.count(f.name));
        if (!defines || (f.name == "steps" && o.change_steps)) continue;
        const Json* was = saved.get(f.record.name);
        const Json* is = now.get(f.record.name);
        // dt is a float32: older folders wrote 0.1 as 0.100000001, the same float
        const bool same_float = f.name == "dt" && was && is &&
                                std::strtof(was->text().c_str(), nullptr) == std::strtof(is->text().c_str(), nullptr);
        if (is && (!was || *was != *is) && !same_float)
            throw InputError("flag -" + f.name + ": -resume 1 would change " + f.record.name + " from " +
                             (was ? was->str() : "(absent)") + " (" + path + ") to " + is->str() +
                             "; resume with the run's own settings" +
                             std::string(f.name == "steps" ? ", give -change_steps 1 to change -steps on purpose," : "") +
                             " or start a new run with another -out");
    }
}

// `now` with the member "steps_changes": the changes of -steps `saved` records and, when this
// resume changes it (-change_steps 1), {"at_step": N, "from": old, "to": new}, said on one line.
inline void record_steps_change(const Run& r, const Json& saved, Json& now) {
    const Json* recorded = saved.get("steps_changes");
    Json changes = recorded ? *recorded : Json::array();
    const Json from = saved.get("steps") ? *saved.get("steps") : Json(), to = Json::integer(r.opt.steps);
    if (from != to) {
        Json change = Json::object();
        change.set("at_step", Json::integer(r.state.steps_done));
        change.set("from", from);
        change.set("to", to);
        changes.push(change);
        std::printf("resume: -steps changed from %s to %s at step %d (-change_steps 1); the schedule now ends at step %s\n",
                    from.str().c_str(), to.str().c_str(), r.state.steps_done, to.str().c_str());
    }
    if (!changes.items().empty()) now.set("steps_changes", changes);
}

// On -resume 1 with DIR/config.json at `path`: refuses settings that contradict it
// (check_same_run), a resumed checkpoint of other sizes than the run's, or one whose step-0 loss
// is not the log's; returns `now` as the resumed run writes it, keeping the run's original
// command and model and recording a change of -steps. Resuming a checkpoint without a
// config.json is refused: nothing would say what the run was.
inline Json resumed_config(const Run& r, const std::string& path, Json now) {
    if (!path_exists(path)) {
        if (r.resuming) throw InputError(path + ": missing, so -resume 1 cannot check that it continues the same run");
        return now;
    }
    const Json saved = read_json_file(path);
    if (saved.kind() != Json::Kind::Object) throw InputError(path + ": not a JSON object");
    check_same_run(saved, now, r.opt, path);
    const std::string checkpoint = numbered(r.opt.out_dir, "model", r.state.steps_done);
    for (const char* size : {"L", "NH", "C", "V", "maxT"}) {
        const Json* was = saved.get(size);
        if (r.resuming && was && *was != *now.get(size))
            throw InputError(checkpoint + ": a model with " + size + " " + now.get(size)->str() + ", but the run's is " +
                             was->str() + " (" + path + "); the file belongs to another run");
    }
    const Json* saved_id = saved.get("run_id");
    if (r.resuming && saved_id && saved_id->str() != json_string(run_id_text(r.state.run_id)))
        throw InputError(numbered(r.opt.out_dir, "state", r.state.steps_done) + ": belongs to another run (run id " +
                         run_id_text(r.state.run_id) + ", but " + path + " has " + saved_id->str() + ")");
    const std::string first_loss = logged_first_loss(r.opt.out_dir);
    if (r.resuming && !first_loss.empty() && first_loss != json_number(r.state.first_loss))
        throw InputError(numbered(r.opt.out_dir, "state", r.state.steps_done) + ": belongs to another run (its step-0 loss " +
                         json_number(r.state.first_loss) + " is not the " + first_loss + " of log.jsonl)");
    for (const char* kept : {"command", "model"})
        if (const Json* was = saved.get(kept)) now.set(kept, *was);
    record_steps_change(r, saved, now);
    return now;
}
