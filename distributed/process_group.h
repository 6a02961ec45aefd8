// distributed/process_group.h — the process group of data-parallel training (docs/distributed.md): which rank this process is, how many there are, and the few collective
// operations ./train needs on flat host buffers. The model knows nothing of it.
//
//   SingleProcess  one process (a build without MPI, or ./train started without mpirun);
//   MpiGroup       the processes mpirun (or srun) started, over MPI_COMM_WORLD (distributed/mpi_group.h,
//                  compiled only where the Makefile found mpicxx: USE_MPI defined).
//
// Every sum runs in rank order, (x_0 + x_1) + x_2 + ..., the same on every rank and in every
// run with the same number of ranks, so a run is reproducible and resumes bit for bit.
// A flat array of n elements is split into one contiguous range per rank (shard()); the
// optimiser's share of the parameters under ZeRO-1 is that range.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "util/errors.h"

// A contiguous range [lo, hi) of a flat array.
struct Range {
    size_t lo, hi;
    size_t size() const { return hi - lo; }
};

// Rank r's range of an array of n elements split over `ranks` ranks: [n·r/ranks, n·(r+1)/ranks).
inline Range shard(size_t n, int r, int ranks) {
    auto bound = [&](size_t i) { return n / ranks * i + n % ranks * i / ranks; };  // ⌊n·i/ranks⌋ without overflow
    return {bound(r), bound(r + 1)};
}

class ProcessGroup {
public:
    virtual ~ProcessGroup() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // The rank among the processes on this machine (which GPU to take).
    virtual int local_rank() const = 0;

    // data (n floats) becomes the sum over the ranks of their data, on every rank.
    virtual void sum(float* data, size_t n) = 0;
    // The sum over the ranks of x, on every rank.
    virtual double sum(double x) = 0;
    // The largest x over the ranks, on every rank.
    virtual int max(int x) = 0;
    // In place on data (n floats): every rank receives rank r's range shard(n, r, size()).
    virtual void all_gather(float* data, size_t n) = 0;
    // Rank 0 receives in `full` (n floats) every rank's range shard(n, r, size()), which each
    // rank passes in `mine`; `full` is not touched on the other ranks.
    virtual void gather_to_root(const float* mine, float* full, size_t n) = 0;
    // Every rank's x, in rank order, on every rank.
    virtual std::vector<uint64_t> all_values(uint64_t x) = 0;
    // Rank `root`'s text, on every rank.
    virtual std::string broadcast(const std::string& text, int root) = 0;
    // Ends every process of the group at once with this exit status (a rank that fails must
    // not leave the others waiting in a collective).
    [[noreturn]] virtual void abort(int status) = 0;
    // Leaves the group at the end of the program; returns `status`.
    virtual int finish(int status) = 0;

    // This rank's range of an array of n elements.
    Range my_shard(size_t n) const { return shard(n, rank(), size()); }
    bool is_root() const { return rank() == 0; }

    // Collective agreement after start-up: when `error` is not empty on some rank, every rank
    // throws InputError with the message of the lowest such rank (prefixed with its rank when
    // that is not 0). Rank 0 then prints the one line; the other ranks print nothing.
    void agree(const std::string& error) {
        const std::vector<uint64_t> failed = all_values(error.empty() ? 0 : 1);
        for (int r = 0; r < size(); r++)
            if (failed[r]) {
                const std::string message = broadcast(error, r);
                throw InputError(r == 0 ? message : "rank " + std::to_string(r) + ": " + message);
            }
    }

    // Refuses (InputError on every rank) when the ranks run with different `settings`, compared
    // as a hash: every rank must train the same model on the same schedule.
    void check_same_settings(const std::string& settings) {
        uint64_t h = 1469598103934665603ull;  // FNV-1a
        for (unsigned char c : settings) h = (h ^ c) * 1099511628211ull;
        const std::vector<uint64_t> hashes = all_values(h);
        for (int r = 1; r < size(); r++)
            if (hashes[r] != hashes[0])
                throw InputError("rank " + std::to_string(r) + " was started with other settings than rank 0 " +
                                 "(every rank of mpirun must get the same flags and files)");
    }
};

// The seconds a rank waits for a collective between GPUs (NCCL) before it takes a peer for
// failed and ends the job: GPT2_NCCL_TIMEOUT, 1800 when unset (a step's collectives take
// milliseconds, but a peer may first write a checkpoint).
inline double nccl_timeout_seconds() {
    const char* text = std::getenv("GPT2_NCCL_TIMEOUT");
    if (text == nullptr || *text == '\0') return 1800;
    char* end = nullptr;
    const double seconds = std::strtod(text, &end);
    if (*end != '\0' || !(seconds > 0))
        throw InputError(std::string("GPT2_NCCL_TIMEOUT: '") + text + "' is not a positive number of seconds");
    return seconds;
}

// One process: every collective is the identity.
class SingleProcess : public ProcessGroup {
public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    int local_rank() const override { return 0; }
    void sum(float*, size_t) override {}
    double sum(double x) override { return x; }
    int max(int x) override { return x; }
    void all_gather(float*, size_t) override {}
    void gather_to_root(const float* mine, float* full, size_t n) override { std::copy(mine, mine + n, full); }
    std::vector<uint64_t> all_values(uint64_t x) override { return {x}; }
    std::string broadcast(const std::string& text, int) override { return text; }
    [[noreturn]] void abort(int status) override { std::exit(status); }
    int finish(int status) override { return status; }
};
