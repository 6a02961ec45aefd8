// The emulated NCCL (nccl.h) over MPI, for the emulated build only (docs/simt.md, "NCCL"). Each
// emulated process is one MPI rank holding one emulated GPU, whose "device" memory is host
// memory. Buffers must be device memory (from cudaMalloc), as NCCL needs. As on a GPU, a
// collective returns once it is posted on the stream (test/simt/internal.h, PendingWork): when
// the stream reaches it, it starts a non-blocking MPI operation, and the stream finishes it
// before its next work, at cudaStreamSynchronize, or when cudaStreamQuery finds it done.
// Semantics are NCCL's documented ones for what is implemented:
//   ncclGetUniqueId       an id that names one communicator (random bytes, made on one rank);
//   ncclCommInitRank      collective: the processes passing the same id form a communicator of
//                         nranks ranks, this one rank `rank`. The emulation needs them to be all
//                         the processes of MPI_COMM_WORLD, and says so otherwise;
//   ncclAllReduce         float sum, in place or not; the sum is taken in rank order on every
//                         rank, so all ranks hold the same bits (real NCCL's order is its ring's
//                         or tree's, also the same on every rank); other types and operations are
//                         refused with ncclInvalidArgument and a line on stderr;
//   ncclBroadcast         any type, in place or not (sendbuff is read on the root only);
//   ncclGroupStart/End    nesting counted; the operations inside are posted as they are called,
//                         which a caller that issues the same sequence on every rank cannot tell
//                         apart from their being issued together;
//   ncclCommGetAsyncError the error of an operation that failed after its call returned: an MPI
//                         call of the emulation that failed (ncclSystemError), or a peer whose
//                         process has exited (ncclRemoteError, "remote process exited"), found
//                         while the stream waits for the operation; else ncclSuccess. An
//                         operation that met an error writes nothing and never completes
//                         otherwise: the stream stays busy until the communicator is aborted;
//   ncclCommAbort         abandons the communicator's unfinished operations and frees it;
//   ncclCommDestroy       waits for the communicator's operations, then frees it.
// For the tests of a peer that stops answering, SIMT_NCCL_STOP_AT=K makes this process stop
// itself (SIGSTOP) at its K-th collective call, before posting it.
#include <nccl.h>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../internal.h"

struct ncclComm {
    MPI_Comm mpi;                   // the ranks, ordered by their NCCL rank
    int rank, size;
    std::vector<long> pids;         // each rank's process, to tell when one has exited
    ncclResult_t async_error = ncclSuccess;
};

namespace {

const char ID_MAGIC[] = "simt-nccl";  // the first bytes of every id ncclGetUniqueId makes
int group_depth = 0;                   // ncclGroupStart minus ncclGroupEnd calls
long collective_calls = 0;             // ncclAllReduce and ncclBroadcast calls so far

// Says why a call is refused, in one line, and returns `result`.
ncclResult_t refuse(ncclResult_t result, const char* call, const char* why) {
    std::fprintf(stderr, "emulated NCCL: %s: %s\n", call, why);
    return result;
}

// Bytes per element of `type`, or 0 for one the emulation does not know.
size_t element_bytes(ncclDataType_t type) {
    switch (type) {
        case ncclInt8: case ncclUint8: return 1;
        case ncclFloat16: case ncclBfloat16: return 2;
        case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
        case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    }
    return 0;
}

// MPI counts are int: the emulation refuses larger messages instead of splitting them.
bool fits_int(size_t n) { return n <= size_t(INT_MAX); }

// True when `bytes` bytes at `buffer` are device memory (nothing to check when bytes is 0).
bool on_device(const void* buffer, size_t bytes) { return bytes == 0 || simt::is_device_range(buffer, bytes); }

// True while process `pid` runs (it exists and is not a zombie waiting to be reaped).
bool process_alive(long pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return false;
    const size_t name_end = line.rfind(')');
    return name_end != std::string::npos && name_end + 2 < line.size() && line[name_end + 2] != 'Z' &&
           line[name_end + 2] != 'X';
}

// Counts a collective call; at the K-th of SIMT_NCCL_STOP_AT=K this process stops itself, a
// peer that stops answering as the others see it.
void count_collective_call() {
    collective_calls++;
    const char* stop_at = std::getenv("SIMT_NCCL_STOP_AT");
    if (stop_at != nullptr && std::atol(stop_at) == collective_calls) raise(SIGSTOP);
}

// A collective posted on the stream: when the stream reaches it (the work before it done), it
// copies its input from device memory and starts a non-blocking MPI operation, whose result it
// stores into device memory once that completes. Every rank starts its collectives in the
// order it called them, as MPI needs.
class Collective : public simt::PendingWork {
public:
    explicit Collective(ncclComm_t comm) : simt::PendingWork(comm), comm(comm) {}

    bool poll() override {
        if (comm->async_error != ncclSuccess) return false;  // stuck until aborted
        if (!started) {
            started = true;
            if (start() != MPI_SUCCESS) return fail(ncclSystemError);
        }
        int done = 0;
        if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return fail(ncclSystemError);
        if (done) {
            store();
            return true;
        }
        for (int r = 0; r < comm->size; r++)
            if (r != comm->rank && !process_alive(comm->pids[r])) return fail(ncclRemoteError);
        return false;
    }
    void finish() override {
        while (!poll()) {
            if (comm->async_error != ncclSuccess) {
                std::fprintf(stderr, "emulated NCCL: the stream waits for an operation that failed (%s); it never "
                                     "completes (as on a GPU: abort the communicator)\n",
                             ncclGetErrorString(comm->async_error));
                std::abort();
            }
            usleep(100);
        }
    }

protected:
    ncclComm_t comm;
    MPI_Request request = MPI_REQUEST_NULL;

    // Reads the input from device memory and starts the MPI operation (`request`).
    virtual int start() = 0;
    // Writes the result into device memory.
    virtual void store() = 0;

private:
    bool started = false;

    bool fail(ncclResult_t error) {
        comm->async_error = error;
        return false;
    }
};

// The sum of every rank's count floats, in rank order, into recvbuff.
class AllReduce : public Collective {
public:
    AllReduce(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t count)
        : Collective(comm), sendbuff(sendbuff), recvbuff(static_cast<float*>(recvbuff)), count(count), mine(count),
          copies(count * comm->size) {}

private:
    int start() override {
        {
            const simt::DeviceMemoryAccess access;
            std::memcpy(mine.data(), sendbuff, count * sizeof(float));
        }
        return MPI_Iallgather(mine.data(), int(count), MPI_FLOAT, copies.data(), int(count), MPI_FLOAT, comm->mpi,
                              &request);
    }
    void store() override {
        const simt::DeviceMemoryAccess access;
        for (size_t i = 0; i < count; i++) {
            float total = copies[i];
            for (int r = 1; r < comm->size; r++) total += copies[r * count + i];
            recvbuff[i] = total;
        }
    }
    const void* sendbuff;
    float* recvbuff;
    size_t count;
    std::vector<float> mine, copies;  // this rank's values; every rank's, in rank order
};

// The root's bytes into every rank's recvbuff.
class Broadcast : public Collective {
public:
    Broadcast(ncclComm_t comm, const void* sendbuff, void* recvbuff, size_t bytes, int root)
        : Collective(comm), sendbuff(sendbuff), recvbuff(recvbuff), root(root), bytes(bytes), staged(bytes) {}

private:
    int start() override {
        if (comm->rank == root) {
            const simt::DeviceMemoryAccess access;
            std::memcpy(staged.data(), sendbuff, bytes);
        }
        return MPI_Ibcast(staged.data(), int(bytes), MPI_BYTE, root, comm->mpi, &request);
    }
    void store() override {
        const simt::DeviceMemoryAccess access;
        std::memcpy(recvbuff, staged.data(), bytes);
    }
    const void* sendbuff;
    void* recvbuff;
    int root;
    size_t bytes;
    std::vector<char> staged;  // the root's bytes
};

}  // namespace

const char* ncclGetErrorString(ncclResult_t result) {
    switch (result) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error";
        case ncclSystemError: return "unhandled system error (an MPI call of the emulation failed)";
        case ncclInternalError: return "internal error";
        case ncclInvalidArgument: return "invalid argument";
        case ncclInvalidUsage: return "invalid usage";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
        case ncclNumResults: break;
    }
    return "unknown result code";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    if (!id) return refuse(ncclInvalidArgument, "ncclGetUniqueId", "id is null");
    std::random_device entropy;
    std::memset(id->internal, 0, sizeof id->internal);
    std::memcpy(id->internal, ID_MAGIC, sizeof ID_MAGIC);
    for (size_t i = sizeof ID_MAGIC; i < sizeof id->internal; i++) id->internal[i] = char(entropy());
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    const char* call = "ncclCommInitRank";
    if (!comm) return refuse(ncclInvalidArgument, call, "comm is null");
    if (nranks < 1 || rank < 0 || rank >= nranks) return refuse(ncclInvalidArgument, call, "rank outside [0, nranks)");
    if (std::memcmp(id.internal, ID_MAGIC, sizeof ID_MAGIC) != 0)
        return refuse(ncclInvalidArgument, call, "the id was not made by ncclGetUniqueId");
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) return refuse(ncclInvalidUsage, call, "the emulation runs over MPI: MPI_Init first (start under mpirun)");
    MPI_Comm mpi;
    if (MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &mpi) != MPI_SUCCESS) return ncclSystemError;
    MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);  // failures become asynchronous errors
    int size = 0, position = 0;
    MPI_Comm_size(mpi, &size);
    MPI_Comm_rank(mpi, &position);
    // Every process must agree, or every one returns the same error.
    std::vector<char> ids(size_t(size) * sizeof id.internal);
    if (MPI_Allgather(id.internal, sizeof id.internal, MPI_CHAR, ids.data(), sizeof id.internal, MPI_CHAR, mpi) !=
        MPI_SUCCESS)
        return ncclSystemError;
    int mine_ok = size == nranks && position == rank, all_ok = 0;
    for (int r = 0; r < size; r++) mine_ok &= std::memcmp(ids.data() + r * sizeof id.internal, id.internal, sizeof id.internal) == 0;
    if (MPI_Allreduce(&mine_ok, &all_ok, 1, MPI_INT, MPI_MIN, mpi) != MPI_SUCCESS) return ncclSystemError;
    if (!all_ok) {
        MPI_Comm_free(&mpi);
        return refuse(ncclInvalidUsage, call,
                      "the emulation needs every MPI process in one communicator, each with its own rank and the same id");
    }
    std::vector<long> pids(size);
    const long pid = getpid();
    if (MPI_Allgather(&pid, 1, MPI_LONG, pids.data(), 1, MPI_LONG, mpi) != MPI_SUCCESS) return ncclSystemError;
    *comm = new ncclComm{mpi, rank, nranks, pids};
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return refuse(ncclInvalidArgument, "ncclCommDestroy", "comm is null");
    simt::finish_pending_work();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm->mpi);
    delete comm;
    return ncclSuccess;
}

// The unfinished MPI operations are left behind (MPI cannot cancel a collective); the process
// is expected to end soon, as after any failure of a peer.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return refuse(ncclInvalidArgument, "ncclCommAbort", "comm is null");
    simt::drop_pending_work(comm);
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
    if (!comm || !asyncError) return refuse(ncclInvalidArgument, "ncclCommGetAsyncError", "comm or asyncError is null");
    *asyncError = comm->async_error;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
    const char* call = "ncclAllReduce";
    if (!comm) return refuse(ncclInvalidArgument, call, "comm is null");
    if (datatype != ncclFloat32 || op != ncclSum)
        return refuse(ncclInvalidArgument, call, "the emulation implements the sum of ncclFloat32 only");
    if (!fits_int(count)) return refuse(ncclInvalidArgument, call, "more than INT_MAX elements (MPI's count)");
    if (!on_device(sendbuff, count * sizeof(float)) || !on_device(recvbuff, count * sizeof(float)))
        return refuse(ncclInvalidArgument, call, "a buffer is not device memory (cudaMalloc)");
    count_collective_call();
    if (count > 0) simt::enqueue_pending_work(std::make_unique<AllReduce>(comm, sendbuff, recvbuff, count));
    return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t) {
    const char* call = "ncclBroadcast";
    if (!comm) return refuse(ncclInvalidArgument, call, "comm is null");
    const size_t bytes = count * element_bytes(datatype);
    if (element_bytes(datatype) == 0) return refuse(ncclInvalidArgument, call, "unknown data type");
    if (root < 0 || root >= comm->size) return refuse(ncclInvalidArgument, call, "root outside [0, nranks)");
    if (!fits_int(bytes)) return refuse(ncclInvalidArgument, call, "more than INT_MAX bytes (MPI's count)");
    if ((comm->rank == root && !on_device(sendbuff, bytes)) || !on_device(recvbuff, bytes))
        return refuse(ncclInvalidArgument, call, "a buffer is not device memory (cudaMalloc)");
    count_collective_call();
    if (bytes > 0) simt::enqueue_pending_work(std::make_unique<Broadcast>(comm, sendbuff, recvbuff, bytes, root));
    return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
    if (group_depth == 0) return refuse(ncclInvalidUsage, "ncclGroupEnd", "no ncclGroupStart to end");
    group_depth--;
    return ncclSuccess;
}
