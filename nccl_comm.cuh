// nccl_comm.cuh — the CUDA backend's collectives over NCCL (README "Training on several GPUs
// or nodes"), compiled where the Makefile found NCCL and MPI (USE_NCCL defined); elsewhere the
// backend stages its buffers through host memory and the process group instead.
//
// NcclComm joins the ranks of a ProcessGroup, one GPU each, in one NCCL communicator and runs
// the two collectives of data-parallel training on device buffers, on the backend's stream:
//   sum         every rank's gradients summed in place (ncclAllReduce);
//   all_gather  every rank's optimiser range of the parameters to every rank, in place: one
//               ncclBroadcast per rank of its range, issued together in one ncclGroupStart/End.
//               Broadcasts and not ncclAllGather, because the ranges (shard() in distributed.h)
//               differ in size by up to one element and ncclAllGather needs equal counts: it
//               would need a scratch buffer padded to N equal parts and two more copies of the
//               parameters; broadcasts into the parameters themselves need neither.
#pragma once
#ifdef USE_NCCL
#include <nccl.h>

#include <stdexcept>
#include <string>

#include "distributed.h"

// Throws std::runtime_error naming the NCCL call when it failed (a failed collective is not
// the user's input, but under mpirun it must end every rank: ./train aborts the job on it).
inline void nccl_check(ncclResult_t result, const char* call) {
    if (result != ncclSuccess) throw std::runtime_error(std::string(call) + " failed: " + ncclGetErrorString(result));
}

class NcclComm {
public:
    // Collective over `group`, after this rank's GPU is the current device: rank 0 makes the
    // unique id, the process group broadcasts it, every rank joins as its own rank.
    NcclComm(ProcessGroup& group, cudaStream_t stream) : stream(stream), ranks(group.size()) {
        ncclUniqueId id{};
        if (group.is_root()) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
        const std::string shared = group.broadcast(std::string(id.internal, sizeof id.internal), 0);
        shared.copy(id.internal, sizeof id.internal);
        nccl_check(ncclCommInitRank(&comm, ranks, id, group.rank()), "ncclCommInitRank");
    }
    ~NcclComm() { ncclCommDestroy(comm); }
    NcclComm(const NcclComm&) = delete;
    NcclComm& operator=(const NcclComm&) = delete;

    // data (n floats on the device) becomes the sum over the ranks of their data.
    void sum(float* data, size_t n) {
        nccl_check(ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm, stream), "ncclAllReduce");
    }
    // In place on data (n floats on the device): every rank receives rank r's range shard(n, r, N).
    void all_gather(float* data, size_t n) {
        nccl_check(ncclGroupStart(), "ncclGroupStart");
        for (int r = 0; r < ranks; r++) {
            const Range range = shard(n, r, ranks);
            nccl_check(ncclBroadcast(data + range.lo, data + range.lo, range.size(), ncclFloat, r, comm, stream),
                       "ncclBroadcast");
        }
        nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    }

private:
    cudaStream_t stream;
    int ranks;
    ncclComm_t comm = nullptr;
};
#endif  // USE_NCCL
