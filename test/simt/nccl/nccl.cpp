// The emulated NCCL (nccl.h) over MPI, for the emulated build only (docs/simt.md, "NCCL"). Each
// emulated process is one MPI rank holding one emulated GPU, whose "device" memory is host
// memory and whose stream runs every operation at the call, so each collective here completes
// before it returns. Buffers must be device memory (from cudaMalloc), as NCCL needs; the
// collectives open it to host access while they run. Semantics are NCCL's documented ones for
// what is implemented:
//   ncclGetUniqueId    an id that names one communicator (random bytes, made on one rank);
//   ncclCommInitRank   collective: the processes passing the same id form a communicator of
//                      nranks ranks, this one rank `rank`. The emulation needs them to be all
//                      the processes of MPI_COMM_WORLD, and says so otherwise;
//   ncclAllReduce      float sum, in place or not; the sum is taken in rank order on every
//                      rank, so all ranks hold the same bits (real NCCL's order is its ring's or
//                      tree's, also the same on every rank); other types and operations are
//                      refused with ncclInvalidArgument and a line on stderr;
//   ncclBroadcast      any type, in place or not (sendbuff is read on the root only);
//   ncclGroupStart/End nesting counted; the operations inside have already completed, which a
//                      caller that issues the same sequence on every rank cannot tell apart.
#include <nccl.h>
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "../internal.h"

struct ncclComm {
    MPI_Comm mpi;     // the ranks, ordered by their NCCL rank
    int rank, size;
};

namespace {

const char ID_MAGIC[] = "simt-nccl";  // the first bytes of every id ncclGetUniqueId makes
int group_depth = 0;                   // ncclGroupStart minus ncclGroupEnd calls

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
    *comm = new ncclComm{mpi, rank, nranks};
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return refuse(ncclInvalidArgument, "ncclCommDestroy", "comm is null");
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm->mpi);
    delete comm;
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
    if (count == 0) return ncclSuccess;
    simt::DeviceMemoryAccess access;
    std::vector<float> copies(count * comm->size);  // every rank's buffer, in rank order
    if (MPI_Allgather(sendbuff, int(count), MPI_FLOAT, copies.data(), int(count), MPI_FLOAT, comm->mpi) != MPI_SUCCESS)
        return ncclSystemError;
    float* out = static_cast<float*>(recvbuff);
    for (size_t i = 0; i < count; i++) {
        float total = copies[i];
        for (int r = 1; r < comm->size; r++) total += copies[r * count + i];
        out[i] = total;
    }
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
    if (bytes == 0) return ncclSuccess;
    simt::DeviceMemoryAccess access;
    if (comm->rank == root && sendbuff != recvbuff) std::memmove(recvbuff, sendbuff, bytes);
    return MPI_Bcast(recvbuff, int(bytes), MPI_BYTE, root, comm->mpi) == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
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
