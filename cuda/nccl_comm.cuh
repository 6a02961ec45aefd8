// cuda/nccl_comm.cuh — the CUDA backend's collectives over NCCL (docs/distributed.md), compiled where the Makefile found NCCL and MPI (USE_NCCL defined); elsewhere the
// backend stages its buffers through host memory and the process group instead.
//
// NcclComm joins the ranks of a ProcessGroup, one GPU each, in one NCCL communicator and runs
// the two collectives of data-parallel training on device buffers, on a given stream:
//   sum         every rank's gradients summed in place (ncclAllReduce);
//   all_gather  every rank's optimiser range of the parameters to every rank, in place: one
//               ncclBroadcast per rank of its range, issued together in one ncclGroupStart/End.
//               Broadcasts and not ncclAllGather, because the ranges (shard() in distributed/process_group.h)
//               differ in size by up to one element and ncclAllGather needs equal counts: it
//               would need a scratch buffer padded to N equal parts and two more copies of the
//               parameters; broadcasts into the parameters themselves need neither.
// Each waits until its stream has finished the collective, asking NCCL for asynchronous errors
// meanwhile, as NCCL's documentation asks of a program that waits for its operations (NCCL User
// Guide, "Error handling and communicator abort"): a peer that fails or stops answering ends
// this rank with one line (CollectiveError) after at most `timeout_s` seconds instead of a hang.
#pragma once
#ifdef USE_NCCL
#include <nccl.h>

#include <chrono>
#include <string>
#include <thread>

#include "cuda/cuda_common.cuh"
#include "distributed/process_group.h"
#include "util/errors.h"

// Throws CollectiveError naming the NCCL call when it failed (not the user's input; under
// mpirun it must end every rank: ./train aborts the job on it).
inline void nccl_check(ncclResult_t result, const char* call) {
    if (result != ncclSuccess) throw CollectiveError(std::string(call) + " failed: " + ncclGetErrorString(result));
}

class NcclComm {
public:
    // Collective over `group`, after this rank's GPU is the current device: rank 0 makes the
    // unique id, the process group broadcasts it, every rank joins as its own rank.
    NcclComm(ProcessGroup& group, double timeout_s) : ranks(group.size()), rank(group.rank()), timeout_s(timeout_s) {
        ncclUniqueId id{};
        if (group.is_root()) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
        const std::string shared = group.broadcast(std::string(id.internal, sizeof id.internal), 0);
        shared.copy(id.internal, sizeof id.internal);
        nccl_check(ncclCommInitRank(&comm, ranks, id, rank), "ncclCommInitRank");
    }
    ~NcclComm() {
        if (comm) ncclCommDestroy(comm);
    }
    NcclComm(const NcclComm&) = delete;
    NcclComm& operator=(const NcclComm&) = delete;

    // data (n floats on the device) becomes the sum over the ranks of their data.
    void sum(float* data, size_t n, cudaStream_t stream) {
        nccl_check(ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm, stream), "ncclAllReduce");
        wait(stream, "ncclAllReduce");
    }
    // In place on data (n floats on the device): every rank receives rank r's range shard(n, r, N).
    void all_gather(float* data, size_t n, cudaStream_t stream) {
        nccl_check(ncclGroupStart(), "ncclGroupStart");
        for (int r = 0; r < ranks; r++) {
            const Range range = shard(n, r, ranks);
            nccl_check(ncclBroadcast(data + range.lo, data + range.lo, range.size(), ncclFloat, r, comm, stream),
                       "ncclBroadcast");
        }
        nccl_check(ncclGroupEnd(), "ncclGroupEnd");
        wait(stream, "ncclBroadcast");
    }

private:
    // Waits until `stream` has finished the collective `call`. On an asynchronous error, or when
    // it has not finished after timeout_s (a peer that died or hangs: NCCL itself may never
    // notice), aborts the communicator and throws CollectiveError.
    void wait(cudaStream_t stream, const char* call) {
        const auto start = std::chrono::steady_clock::now();
        for (;;) {
            const cudaError_t state = cudaStreamQuery(stream);
            if (state == cudaSuccess) return;
            if (state != cudaErrorNotReady) cudaCheck(state);
            ncclResult_t async = ncclSuccess;
            nccl_check(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError");
            const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::string failure;
            if (async != ncclSuccess && async != ncclInProgress)
                failure = std::string(call) + " failed on the device: " + ncclGetErrorString(async);
            else if (waited > timeout_s)
                failure = std::string(call) + " has not finished after " + std::to_string((long)timeout_s) +
                          " s: a peer failed or stopped answering (GPT2_NCCL_TIMEOUT sets the limit)";
            if (!failure.empty()) {
                ncclCommAbort(comm);
                comm = nullptr;
                throw CollectiveError("rank " + std::to_string(rank) + ": " + failure);
            }
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
    }

    int ranks, rank;
    double timeout_s;
    ncclComm_t comm = nullptr;
};
#endif  // USE_NCCL
