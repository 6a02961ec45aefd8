// distributed/mpi_group.h — MpiGroup, the process group of distributed/process_group.h over MPI (OpenMPI's mpirun, or
// srun), and start_process_group, which picks it or SingleProcess. Included by ./train only;
// built where the Makefile found mpicxx (USE_MPI defined).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#ifdef USE_MPI
#include <mpi.h>
#endif

#include "distributed/process_group.h"

#ifdef USE_MPI
// The processes of MPI_COMM_WORLD. MPI errors return codes (not OpenMPI's default of aborting
// with a page of text); any failed call prints one line and aborts the whole job.
class MpiGroup : public ProcessGroup {
public:
    MpiGroup(int* argc, char*** argv) {
        int provided = 0;
        if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            std::fprintf(stderr, "MPI_Init failed\n");
            std::exit(1);
        }
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
        check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
        MPI_Comm local;
        check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
              "MPI_Comm_split_type");
        check(MPI_Comm_rank(local, &local_rank_), "MPI_Comm_rank");
        MPI_Comm_free(&local);
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    int local_rank() const override { return local_rank_; }

    // Reduce-scatter by hand, so that the order is fixed: every rank receives every rank's copy
    // of its own range, adds them up in rank order, and the sums are gathered back.
    void sum(float* data, size_t n) override {
        if (size_ == 1) return;
        std::vector<int> send_counts(size_), send_offsets(size_), recv_counts(size_), recv_offsets(size_);
        const Range mine = my_shard(n);
        for (int r = 0; r < size_; r++) {
            const Range range = shard(n, r, size_);
            send_counts[r] = count(range.size());
            send_offsets[r] = count(range.lo);
            recv_counts[r] = count(mine.size());
            recv_offsets[r] = count(mine.size() * r);
        }
        std::vector<float> copies(mine.size() * size_);
        check(MPI_Alltoallv(data, send_counts.data(), send_offsets.data(), MPI_FLOAT, copies.data(),
                            recv_counts.data(), recv_offsets.data(), MPI_FLOAT, MPI_COMM_WORLD),
              "MPI_Alltoallv");
        for (size_t i = 0; i < mine.size(); i++) {
            float total = copies[i];
            for (int r = 1; r < size_; r++) total += copies[r * mine.size() + i];
            data[mine.lo + i] = total;
        }
        all_gather(data, n);
    }
    double sum(double x) override {
        std::vector<double> all(size_);
        check(MPI_Allgather(&x, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD), "MPI_Allgather");
        double total = all[0];
        for (int r = 1; r < size_; r++) total += all[r];
        return total;
    }
    int max(int x) override {
        int out = x;
        check(MPI_Allreduce(&x, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
        return out;
    }
    void all_gather(float* data, size_t n) override {
        std::vector<int> counts, offsets;
        layout(n, &counts, &offsets);
        check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, data, counts.data(), offsets.data(), MPI_FLOAT,
                             MPI_COMM_WORLD),
              "MPI_Allgatherv");
    }
    void gather_to_root(const float* mine, float* full, size_t n) override {
        std::vector<int> counts, offsets;
        layout(n, &counts, &offsets);
        check(MPI_Gatherv(mine, counts[rank_], MPI_FLOAT, full, counts.data(), offsets.data(), MPI_FLOAT, 0,
                          MPI_COMM_WORLD),
              "MPI_Gatherv");
    }
    std::vector<uint64_t> all_values(uint64_t x) override {
        std::vector<uint64_t> all(size_);
        check(MPI_Allgather(&x, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD), "MPI_Allgather");
        return all;
    }
    std::string broadcast(const std::string& text, int root) override {
        uint64_t length = text.size();
        check(MPI_Bcast(&length, 1, MPI_UINT64_T, root, MPI_COMM_WORLD), "MPI_Bcast");
        std::string out = rank_ == root ? text : std::string(length, '\0');
        check(MPI_Bcast(out.data(), count(length), MPI_CHAR, root, MPI_COMM_WORLD), "MPI_Bcast");
        return out;
    }
    [[noreturn]] void abort(int status) override {
        std::fflush(stdout);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, status);
        std::exit(status);  // (MPI_Abort does not return)
    }
    int finish(int status) override {
        MPI_Finalize();
        return status;
    }

private:
    int rank_ = 0, size_ = 1, local_rank_ = 0;

    void check(int code, const char* call) {
        if (code == MPI_SUCCESS) return;
        char text[MPI_MAX_ERROR_STRING];
        int length = 0;
        MPI_Error_string(code, text, &length);
        std::fprintf(stderr, "rank %d: %s failed: %.*s\n", rank_, call, length, text);
        abort(1);
    }
    // MPI counts are int: a range of 2^31 floats or more (8 GiB) would need a derived datatype.
    int count(size_t n) {
        if (n > size_t(INT32_MAX)) {
            std::fprintf(stderr, "rank %d: a collective of %zu floats exceeds MPI's int count\n", rank_, n);
            abort(1);
        }
        return int(n);
    }
    // Counts and offsets of every rank's range of n elements.
    void layout(size_t n, std::vector<int>* counts, std::vector<int>* offsets) {
        for (int r = 0; r < size_; r++) {
            const Range range = shard(n, r, size_);
            counts->push_back(count(range.size()));
            offsets->push_back(count(range.lo));
        }
    }
};
#endif  // USE_MPI

// The value of environment variable `name` as an integer, or `otherwise` when unset.
inline long environment_integer(const char* name, long otherwise) {
    const char* value = std::getenv(name);
    return value && *value ? std::strtol(value, nullptr, 10) : otherwise;
}

// The process group this program was started in: MPI's when an MPI launcher started it
// (OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE, a PMI launcher such as srun PMI_SIZE or
// PMIX_RANK), else a single process, so ./train alone needs no mpirun. A build without MPI
// started by a launcher with several ranks says so and exits with status 2 rather than run
// the same training once per rank into the same folder.
inline std::unique_ptr<ProcessGroup> start_process_group(int* argc, char*** argv) {
    const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
#ifdef USE_MPI
    if (launched) return std::make_unique<MpiGroup>(argc, argv);
#else
    const long ranks = std::max(environment_integer("OMPI_COMM_WORLD_SIZE", 1), environment_integer("PMI_SIZE", 1));
    if (launched && ranks > 1) {
        if (environment_integer("OMPI_COMM_WORLD_RANK", environment_integer("PMI_RANK", 0)) == 0)
            std::fprintf(stderr, "%s: started as %ld ranks, but this build has no MPI (install libopenmpi-dev and "
                         "rebuild: make clean all)\n", (*argv)[0], ranks);
        std::exit(2);
    }
#endif
    return std::make_unique<SingleProcess>();
}
