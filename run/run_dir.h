// run/run_dir.h — the -out folder of ./train (docs/train.md §6): one run per folder, every write
// the run depends on checked, and -resume 1 continuing the same run or refusing.
//
//   RunFolder      checks the path, holds an exclusive lock on the folder for the run's life,
//                  refuses a fresh run into a folder holding another run's files unless asked
//                  to replace them (-overwrite 1), then removes them first.
//   RunLog         log.jsonl, one record per line, each written whole or not at all.
//   checkpoint_steps   the complete model/state pairs, found by listing the folder.
// config.json is run/run_config.h's; the checkpoint pairs themselves are run/resume.h's.
#pragma once
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "util/errors.h"
#include "util/json.h"
#include "util/paths.h"

// Runs `write` (which may throw InputError for a failed write, as model.h's atomic writes do)
// and turns a failure into an OutputError: at this point the input has long been accepted.
template <typename Write>
void checked_write(Write write) {
    try {
        write();
    } catch (const InputError& e) {
        throw OutputError(e.what());
    }
}

// "DIR/name" for a run folder DIR.
inline std::string in_folder(const std::string& dir, const std::string& name) {
    return dir + (dir.back() == '/' ? "" : "/") + name;
}

// DIR/STEM_N.bin, the file of a checkpoint pair after N steps: numbered(dir, "model", 3) is
// DIR/model_00000003.bin.
inline std::string numbered(const std::string& dir, const char* stem, int step) {
    char name[64];
    std::snprintf(name, sizeof name, "%s_%08d.bin", stem, step);
    return in_folder(dir, name);
}

// True when `name` is one of the files ./train writes in its folder: log.jsonl, config.json,
// model_N.bin, state_N.bin, or one of those still being written (NAME.tmp).
inline bool is_run_file(std::string name) {
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) name.resize(name.size() - 4);
    if (name == "log.jsonl" || name == "config.json") return true;
    int n = 0, used = 0;
    for (const char* stem : {"model_%8d.bin%n", "state_%8d.bin%n"})
        if (std::sscanf(name.c_str(), stem, &n, &used) == 1 && used == (int)name.size() && name.size() == 18) return true;
    return false;
}

// The names of the files in `dir` that is_run_file counts, sorted; empty when dir does not exist.
inline std::vector<std::string> run_files(const std::string& dir) {
    std::vector<std::string> names;
    DIR* d = opendir(dir.c_str());
    if (!d) return names;
    while (const dirent* e = readdir(d))
        if (is_run_file(e->d_name)) names.push_back(e->d_name);
    closedir(d);
    std::sort(names.begin(), names.end());
    return names;
}

// The step counts N for which both model_N.bin and state_N.bin are in `dir`, ascending.
inline std::vector<int> checkpoint_steps(const std::string& dir) {
    const std::vector<std::string> names = run_files(dir);
    std::vector<int> steps;
    for (const std::string& name : names) {
        int n = 0;
        if (name.size() == 18 && std::sscanf(name.c_str(), "model_%8d.bin", &n) == 1 && n > 0 &&
            std::binary_search(names.begin(), names.end(), "state_" + name.substr(6)))
            steps.push_back(n);
    }
    return steps;
}

// With -keep_checkpoints K (> 0): removes the complete pairs of `dir` other than the newest K
// and the final one (after `final_step` steps), model file first, so a pair is whole or not
// listed; throws OutputError when a file cannot be removed.
inline void remove_old_checkpoints(const std::string& dir, int keep, int final_step) {
    const std::vector<int> steps = checkpoint_steps(dir);  // ascending
    for (size_t i = 0; keep > 0 && i + keep < steps.size(); i++) {
        if (steps[i] == final_step) continue;
        for (const char* stem : {"model", "state"})
            if (std::remove(numbered(dir, stem, steps[i]).c_str()) != 0)
                throw OutputError("-keep_checkpoints: cannot remove " + numbered(dir, stem, steps[i]) + " (" +
                                  std::strerror(errno) + ")");
    }
}

// Refuses (InputError) an input of ./train that is one of the run files of its folder `dir`,
// which the run writes, replaces or removes (compared by identity: a link or another spelling
// counts).
inline void check_inputs_outside_folder(const std::string& dir, const std::vector<CommandInput>& inputs) {
    for (const std::string& name : run_files(dir))
        check_not_an_input("-out " + in_folder(dir, name), file_id(in_folder(dir, name)), inputs);
}

// The file of a run folder that writing `path` would replace, or "" for none: a name ./train
// writes (is_run_file) in a folder holding run files, as the rename of a whole-file write
// replaces it (the folder however spelled: "./", "..", a link to it) or as a link at `path`
// leads to it.
inline std::string run_file_at(const std::string& path) {
    std::vector<std::string> places = {path};
    if (char* real = realpath(path.c_str(), nullptr)) {  // where a link leads
        places.push_back(real);
        std::free(real);
    }
    for (const std::string& place : places)
        if (is_run_file(file_name_of(place)) && !run_files(folder_of(place)).empty()) return place;
    return "";
}

// Refuses (InputError starting with `name`, e.g. "flag -json RUN/config.json") an output that
// would replace a file of a run folder (run_file_at), however its path is spelled.
inline void check_not_a_run_file(const std::string& path, const std::string& name) {
    const std::string replaced = run_file_at(path);
    if (!replaced.empty())
        throw InputError(name + " would replace " + replaced + ", a file of a ./train run folder: write it elsewhere "
                         "or under another name");
}

// Removes DIR's config.json and log.jsonl, those of a run stopped before its first step was done:
// nothing of it is kept, so the same command starts it again instead of finding another run's
// files (docs/train.md §7).
inline void remove_unstarted_run(const std::string& dir) {
    for (const char* name : {"log.jsonl", "config.json"}) std::remove(in_folder(dir, name).c_str());
}

// Creates dir and its parents; throws InputError when that fails.
inline void make_dirs(const std::string& dir) {
    std::string path;
    std::stringstream parts(dir);
    std::string part;
    if (dir[0] == '/') path = "/";
    while (std::getline(parts, part, '/')) {
        if (part.empty()) continue;
        path += part + "/";
        if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
            throw InputError("flag -out: cannot create " + path + " (" + std::strerror(errno) + ")");
    }
}

// The output folder of one run. Constructed before any work: it refuses an unusable path and,
// when the folder exists, takes its lock at once (a second ./train on it is refused, touching
// nothing). create() makes the folder when the output starts.
class RunFolder {
public:
    // `resume`: -resume 1 (the folder's run is continued); `overwrite`: -overwrite 1 (another
    // run's files are removed before this one writes).
    RunFolder(const std::string& dir, bool resume, bool overwrite) : dir_(dir), resume_(resume), overwrite_(overwrite) {
        if (dir.empty()) throw InputError("flag -out: the output folder is empty");
        struct stat st;
        if (lstat(dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode) && stat(dir.c_str(), &st) != 0)
            throw InputError("flag -out: " + dir + " is a symbolic link that leads nowhere (" + std::strerror(errno) +
                             "): give the folder itself, or remove the link");
        std::string existing = dir;  // the nearest part of the path that exists
        while (stat(existing.c_str(), &st) != 0) {
            if (errno != ENOENT && errno != ENOTDIR) throw InputError("flag -out: " + existing + ": " + std::strerror(errno));
            const size_t slash = existing.find_last_of('/', existing.size() > 1 ? existing.size() - 2 : 0);
            existing = slash == std::string::npos ? "." : slash == 0 ? "/" : existing.substr(0, slash);
        }
        if (!S_ISDIR(st.st_mode)) throw InputError("flag -out: " + existing + " exists and is not a folder");
        if (access(existing.c_str(), W_OK | X_OK) != 0)
            throw InputError("flag -out: " + existing + " is not writable (" + std::strerror(errno) + ")");
        if (existing == dir) claim();
    }
    RunFolder(const RunFolder&) = delete;
    RunFolder& operator=(const RunFolder&) = delete;
    ~RunFolder() {
        if (fd_ >= 0) close(fd_);  // releases the lock
    }

    // Makes the folder (and its parents) if needed, holds its lock, and removes another run's
    // files when -overwrite 1 asked for it, and files a killed process left half-written
    // (NAME.tmp: no one else writes here while the lock is held). Throws InputError as the
    // constructor does.
    void create() {
        make_dirs(dir_);
        if (fd_ < 0) claim();
        for (const std::string& name : run_files(dir_)) {
            const bool half_written = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
            if ((half_written || (overwrite_ && !resume_)) && std::remove(in_folder(dir_, name).c_str()) != 0)
                throw InputError("flag -out: cannot remove " + in_folder(dir_, name) + " (" + std::strerror(errno) + ")");
        }
    }

    const std::string& path() const { return dir_; }

private:
    std::string dir_;
    bool resume_, overwrite_;
    int fd_ = -1;

    // Locks the existing folder (flock on the folder itself: no lock file, and the lock goes
    // with the process however it ends), then refuses a fresh run over another run's files.
    void claim() {
        fd_ = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd_ < 0) throw InputError("flag -out: cannot open " + dir_ + " (" + std::strerror(errno) + ")");
        if (flock(fd_, LOCK_EX | LOCK_NB) != 0)
            throw InputError("flag -out: " + dir_ + " is in use by another ./train (it holds the folder's lock); "
                             "wait for it to finish or choose another -out");
        const std::vector<std::string> names = run_files(dir_);
        if (resume_ || overwrite_ || names.empty()) return;
        std::string list;
        for (size_t i = 0; i < names.size() && i < 3; i++) list += (i ? ", " : "") + names[i];
        if (names.size() > 3) list += ", ... (" + std::to_string(names.size()) + " files)";
        throw InputError("flag -out: " + dir_ + " holds another run's files (" + list +
                         "); continue it with -resume 1, replace it with -overwrite 1, or choose another -out");
    }
};

// Calls `each` with every line of DIR/log.jsonl, without its newline, in order; nothing when there
// is no log. The log must be a regular file (util/paths.h, open_input: a FIFO or folder there is
// refused, not waited for).
template <typename Each>
void for_each_log_line(const std::string& dir, Each each) {
    const std::string path = in_folder(dir, "log.jsonl");
    if (!path_exists(path)) return;
    const InputFile file = open_input(path, "log");
    char* line = nullptr;
    size_t capacity = 0;
    for (ssize_t n; (n = getline(&line, &capacity, file.get())) >= 0;)
        each(std::string(line, size_t(n) - (n > 0 && line[n - 1] == '\n')));
    std::free(line);
}

// One line of log.jsonl as a JSON object; an empty object for a line that is not one (cut off
// by a crash, or not ./train's).
inline Json log_record(const std::string& line) {
    try {
        Json record = read_json(line, "log.jsonl");
        return record.kind() == Json::Kind::Object ? record : Json::object();
    } catch (const InputError&) {
        return Json::object();
    }
}

// The training loss of a step record (docs/logs.md §1), or nullptr for any other record.
inline const Json* step_loss(const Json& record) {
    const Json* loss = record.get("loss");
    return loss && loss->kind() == Json::Kind::Number && !record.get("event") ? loss : nullptr;
}

// The numbers of a record's array member `name` (null, a non-finite value, as NaN); empty when
// the record has no such array.
inline std::vector<double> record_numbers(const Json& record, const std::string& name) {
    std::vector<double> out;
    const Json* array = record.get(name);
    if (!array || array->kind() != Json::Kind::Array) return out;
    for (const Json& x : array->items()) out.push_back(x.kind() == Json::Kind::Number ? x.as_number() : NAN);
    return out;
}

// What the run-outcome rules take from a logged `stats` record (docs/logs.md §4): the largest
// attention logit of each block and the mean |X_L| of the last layer.
struct LoggedStats {
    std::vector<double> attn_logit_max;  // per block
    double mean_abs_L;                   // mean |X_L|
};

// log.jsonl: one JSON record per line, appended with one write each and checked; a record that
// cannot be written whole is cut off again, so the log stays parseable, and the run stops.
class RunLog {
public:
    // Opens DIR/log.jsonl. When resuming after `keep_before` steps, records of later steps (from
    // a run that went on past its last checkpoint) are dropped so the log reads as one run;
    // `dropped` receives how many, losses() the training losses of the kept steps in step order
    // (the run-outcome rules replay them), stats() what their stats records say (the rules replay
    // them too) and elapsed() the seconds the run had trained by the last kept step (0 for a fresh
    // log, or one without "elapsed").
    RunLog(const std::string& dir, bool resuming, int keep_before, int* dropped = nullptr) : path_(in_folder(dir, "log.jsonl")) {
        std::string kept;
        int skipped = 0;
        if (resuming) {
            for_each_log_line(dir, [&](const std::string& line) {
                const Json record = log_record(line);
                const Json* step = record.get("step");
                if (!step || step->kind() != Json::Kind::Number || step->as_number() >= keep_before) {
                    skipped++;
                    return;
                }
                kept += line + "\n";
                if (const Json* loss = step_loss(record)) losses_.push_back(loss->as_number());
                const Json* elapsed = record.get("elapsed");
                if (elapsed && elapsed->kind() == Json::Kind::Number) elapsed_ = elapsed->as_number();
                const Json* event = record.get("event");
                if (event && event->kind() == Json::Kind::String && event->text() == "stats") {
                    const std::vector<double> mean_abs = record_numbers(record, "mean_abs");
                    stats_.push_back({record_numbers(record, "attn_logit_max"), mean_abs.empty() ? NAN : mean_abs.back()});
                }
            });
        }
        if (dropped) *dropped = skipped;
        try {  // a link is followed: its target is replaced, as every output's is (util/paths.h)
            const OutputTarget target = output_target(path_, path_);
            if (target.stream) throw InputError(path_ + " is not a regular file: the log is rewritten whole on -resume 1");
            path_ = target.path;
        } catch (const InputError& e) {
            throw OutputError(e.what());
        }
        const std::string tmp = path_ + ".tmp";
        fd_ = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
        if (fd_ < 0) throw OutputError(tmp + ": cannot open for writing (" + std::strerror(errno) + ")");
        append(kept);
        if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
            const int error = errno;
            std::remove(tmp.c_str());
            throw OutputError(path_ + ": cannot write (" + std::strerror(error) + ")");
        }
    }
    RunLog(const RunLog&) = delete;
    RunLog& operator=(const RunLog&) = delete;
    ~RunLog() { close(fd_); }

    // Appends one record (a JSON object without newline); throws OutputError when it cannot be
    // written whole (the partial line is removed again).
    void write(const std::string& json) { append(json + "\n"); }
    const std::vector<double>& losses() const { return losses_; }
    double elapsed() const { return elapsed_; }
    const std::vector<LoggedStats>& stats() const { return stats_; }

private:
    std::vector<double> losses_;
    double elapsed_ = 0;
    std::vector<LoggedStats> stats_;
    std::string path_;
    int fd_;

    void append(const std::string& text) {
        const off_t before = lseek(fd_, 0, SEEK_END);
        size_t done = 0;
        while (done < text.size()) {
            const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
            if (n > 0) { done += (size_t)n; continue; }
            if (n < 0 && errno == EINTR) continue;
            const int error = n < 0 ? errno : ENOSPC;
            if (before >= 0 && ftruncate(fd_, before) != 0) {}  // best effort: the record is whole or absent
            throw OutputError(path_ + ": cannot write a log record (" + std::strerror(error) + ")");
        }
    }
};

// True when DIR/log.jsonl holds the record that ends a run of `steps` steps: its outcome record
// (docs/logs.md), or the record of a stop at that step (a final validation loss not finite).
inline bool logged_final_outcome(const std::string& dir, int steps) {
    bool logged = false;
    for_each_log_line(dir, [&](const std::string& line) {
        const Json record = log_record(line);
        const Json* step = record.get("step");
        const Json* event = record.get("event");
        if (step && step->kind() == Json::Kind::Number && step->as_number() == steps && event &&
            event->kind() == Json::Kind::String && (event->text() == "outcome" || event->text() == "diverged"))
            logged = true;
    });
    return logged;
}

// The loss of step 0 as DIR/log.jsonl wrote it (JSON text), or "" when the log has no such record.
inline std::string logged_first_loss(const std::string& dir) {
    std::string first;
    for_each_log_line(dir, [&](const std::string& line) {
        const Json record = log_record(line);
        const Json* step = record.get("step");
        const Json* loss = step_loss(record);
        if (first.empty() && step && step->text() == "0" && loss) first = loss->text();
    });
    return first;
}
