// util/progress.h — a line on stderr at least every `interval` seconds while a long phase runs, so
// that a slow step or evaluation never looks like a hang (docs/logs.md "Progress lines").
//
//   Progress progress("eval", 10);            // 0 seconds: no lines, no thread
//   progress.begin("evaluation, batch 1 of 10");
//   progress.update("evaluation, batch 2 of 10");  // what the phase does now
//   progress.end();
//
// A thread waits beside the program; once a phase has run for `interval` seconds since it began
// or since its last line, it prints "eval progress: evaluation, batch 2 of 10 (12.0 s)" (not
// "eval: ...", the start of an error line). A phase shorter than the interval prints nothing;
// stdout's step lines and log.jsonl are never touched.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

class Progress {
public:
    using Clock = std::chrono::steady_clock;

    Progress(std::string program, double interval_seconds)
        : program_(std::move(program)), interval_(std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(interval_seconds))) {
        if (interval_seconds > 0) watcher_ = std::thread([this] { watch(); });
    }
    ~Progress() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            quit_ = true;
        }
        wake_.notify_one();
        if (watcher_.joinable()) watcher_.join();
    }
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    // A phase starts: its clock and the time of its last line are now.
    void begin(const std::string& what) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            what_ = what;
            began_ = last_line_ = Clock::now();
            active_ = true;
        }
        wake_.notify_one();
    }
    // What the running phase does now (its clock goes on).
    void update(const std::string& what) {
        std::lock_guard<std::mutex> lock(mutex_);
        what_ = what;
    }
    void end() {
        std::lock_guard<std::mutex> lock(mutex_);
        active_ = false;
    }

private:
    const std::string program_;
    const Clock::duration interval_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::string what_;
    Clock::time_point began_, last_line_;
    bool active_ = false, quit_ = false;
    std::thread watcher_;

    // The watcher: sleeps until the running phase's next line is due (or a phase begins), prints
    // it, and so on until the destructor says quit.
    void watch() {
        std::unique_lock<std::mutex> lock(mutex_);
        while (!quit_) {
            if (!active_) {
                wake_.wait(lock, [&] { return quit_ || active_; });
                continue;
            }
            const Clock::time_point due = last_line_ + interval_;
            if (Clock::now() < due) {
                wake_.wait_until(lock, due);
                continue;  // a new phase may have begun meanwhile: its own time is due
            }
            const double seconds = std::chrono::duration<double>(Clock::now() - began_).count();
            std::fprintf(stderr, "%s progress: %s (%.1f s)\n", program_.c_str(), what_.c_str(), seconds);
            last_line_ = Clock::now();
        }
    }
};
