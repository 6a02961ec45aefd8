// Test of the emulated NCCL (nccl.cpp), run under `mpirun -np 3` by test_distributed: every
// rank checks the results of each call, on buffers from cudaMalloc (the emulated runtime),
// against values worked out here by hand from NCCL's documented semantics, prints a line per failed check, and exits 1 if any failed; rank 0
// prints "nccl emulation: ok" when all ranks passed. Plain MPI, no test framework, so that one
// line per rank is all the output.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {

int rank = 0, ranks = 1, failures = 0;

void expect(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what);
    failures++;
}

// Device memory holding `values`.
template <typename T>
T* to_device(const std::vector<T>& values) {
    T* device = nullptr;
    expect(cudaMalloc(&device, values.size() * sizeof(T)) == cudaSuccess, "cudaMalloc");
    expect(cudaMemcpy(device, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess,
           "cudaMemcpy to the device");
    return device;
}
// The n elements at `device`, freed.
template <typename T>
std::vector<T> from_device(T* device, size_t n) {
    std::vector<T> values(n);
    expect(cudaMemcpy(values.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess,
           "cudaMemcpy from the device");
    cudaFree(device);
    return values;
}

// A communicator over all ranks, its id made on rank 0 and sent by MPI.
ncclComm_t make_comm() {
    ncclUniqueId id{};
    if (rank == 0) expect(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    MPI_Bcast(id.internal, sizeof id.internal, MPI_CHAR, 0, MPI_COMM_WORLD);
    ncclComm_t comm = nullptr;
    expect(ncclCommInitRank(&comm, ranks, id, rank) == ncclSuccess, "ncclCommInitRank over all ranks");
    return comm;
}

void all_reduce_sums_floats(ncclComm_t comm) {
    const size_t n = 7;
    std::vector<float> mine(n);
    for (size_t i = 0; i < n; i++) mine[i] = float((rank + 1) * i) + 0.5f;
    float *data = to_device(mine), *send = to_device(mine), *recv = to_device(std::vector<float>(n, -1.0f));
    expect(ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess, "ncclAllReduce in place");
    expect(ncclAllReduce(send, recv, n, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess, "ncclAllReduce out of place");
    expect(ncclAllReduce(data, data, 0, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess, "ncclAllReduce of nothing");
    const std::vector<float> in_place = from_device(data, n), out = from_device(recv, n), sent = from_device(send, n);
    // Σ_r ((r + 1)·i + 0.5) = i·W(W + 1)/2 + W/2: small integers and halves, exact in float.
    for (size_t i = 0; i < n; i++) {
        const float expected = float(i * ranks * (ranks + 1) / 2) + 0.5f * ranks;
        expect(in_place[i] == expected, "in-place sum");
        expect(out[i] == expected, "out-of-place sum");
        expect(sent[i] == mine[i], "out-of-place sendbuff unchanged");
    }
    // Values whose sum depends on the order: every rank must still hold the same bits.
    float* tiny = to_device(std::vector<float>{rank == 0 ? 1.0f : 3e-8f});
    expect(ncclAllReduce(tiny, tiny, 1, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess, "ncclAllReduce of one");
    const float sum = from_device(tiny, 1)[0];
    std::vector<float> everyone(ranks);
    MPI_Allgather(&sum, 1, MPI_FLOAT, everyone.data(), 1, MPI_FLOAT, MPI_COMM_WORLD);
    for (int r = 0; r < ranks; r++) expect(std::memcmp(&everyone[r], &sum, sizeof sum) == 0, "same sum on every rank");
}

void all_reduce_refuses_what_it_lacks(ncclComm_t comm) {
    int* x = to_device(std::vector<int>{1});
    float* y = to_device(std::vector<float>{1});
    float host = 1;
    expect(ncclAllReduce(x, x, 1, ncclInt32, ncclSum, comm, nullptr) == ncclInvalidArgument, "int sum refused");
    expect(ncclAllReduce(y, y, 1, ncclFloat, ncclMax, comm, nullptr) == ncclInvalidArgument, "float max refused");
    expect(ncclAllReduce(y, y, 1, ncclFloat, ncclSum, nullptr, nullptr) == ncclInvalidArgument, "null comm refused");
    expect(ncclAllReduce(&host, &host, 1, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument,
           "host memory refused");
    cudaFree(x);
    cudaFree(y);
}

// Ranges of unequal size (10 over 3 ranks: 3, 3, 4 elements), each broadcast in place by its
// owner inside one group: afterwards every rank holds every owner's values.
void grouped_broadcasts_gather_ranges(ncclComm_t comm) {
    const int n = 10;
    auto lo = [](int r) { return n * r / ranks; };
    std::vector<float> mine(n, -1.0f);
    for (int i = lo(rank); i < lo(rank + 1); i++) mine[i] = 100.0f * rank + i;
    float* data = to_device(mine);
    expect(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
    for (int r = 0; r < ranks; r++)
        expect(ncclBroadcast(data + lo(r), data + lo(r), lo(r + 1) - lo(r), ncclFloat, r, comm, nullptr) == ncclSuccess,
               "ncclBroadcast in place");
    expect(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd");
    const std::vector<float> gathered = from_device(data, n);
    for (int r = 0; r < ranks; r++)
        for (int i = lo(r); i < lo(r + 1); i++) expect(gathered[i] == 100.0f * r + i, "gathered range");

    const int root = ranks - 1;  // out of place, another type: sendbuff is read on the root only
    int *send = to_device(std::vector<int>(3, rank == root ? 42 : -7)), *recv = to_device(std::vector<int>(3, 0));
    expect(ncclBroadcast(send, recv, 3, ncclInt32, root, comm, nullptr) == ncclSuccess, "ncclBroadcast out of place");
    expect(ncclBroadcast(recv, recv, 3, ncclInt32, ranks, comm, nullptr) == ncclInvalidArgument,
           "root outside the communicator refused");
    for (int v : from_device(recv, 3)) expect(v == 42, "broadcast value");
    cudaFree(send);
    expect(ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart refused");
}

// A collective returns once posted, as on a GPU: rank 0 posts a sum the others post only after
// a barrier, so until then its stream is busy (cudaStreamQuery: cudaErrorNotReady) without an
// asynchronous error; the stream then finishes it with the right sum. A communicator aborted
// with nothing pending, and the null one, behave as documented.
void collectives_are_asynchronous(ncclComm_t comm) {
    float* data = to_device(std::vector<float>{float(rank + 1)});
    cudaStream_t stream = nullptr;
    expect(cudaStreamCreate(&stream) == cudaSuccess, "cudaStreamCreate");
    if (rank == 0) {
        expect(ncclAllReduce(data, data, 1, ncclFloat, ncclSum, comm, stream) == ncclSuccess, "ncclAllReduce posted");
        expect(cudaStreamQuery(stream) == cudaErrorNotReady, "stream busy while the others have not posted");
        ncclResult_t async = ncclInternalError;
        expect(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess, "no asynchronous error");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank != 0)
        expect(ncclAllReduce(data, data, 1, ncclFloat, ncclSum, comm, stream) == ncclSuccess, "ncclAllReduce posted");
    while (cudaStreamQuery(stream) == cudaErrorNotReady) {}
    expect(cudaStreamQuery(stream) == cudaSuccess, "stream done");
    expect(from_device(data, 1)[0] == float(ranks * (ranks + 1) / 2), "the sum, once the stream is done");
    cudaStreamDestroy(stream);

    ncclResult_t async = ncclSuccess;
    expect(ncclCommGetAsyncError(nullptr, &async) == ncclInvalidArgument, "ncclCommGetAsyncError of no communicator");
    expect(ncclCommAbort(nullptr) == ncclInvalidArgument, "ncclCommAbort of no communicator");
    ncclComm_t other = make_comm();
    expect(ncclCommAbort(other) == ncclSuccess, "ncclCommAbort");
}

// A communicator that does not cover the processes, or an id not from ncclGetUniqueId, is
// refused, on every rank alike.
void bad_communicators_are_refused() {
    ncclUniqueId id{};
    ncclComm_t comm = nullptr;
    expect(ncclCommInitRank(&comm, ranks, id, rank) == ncclInvalidArgument, "an id of zeros refused");
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(id.internal, sizeof id.internal, MPI_CHAR, 0, MPI_COMM_WORLD);
    expect(ncclCommInitRank(&comm, ranks + 1, id, rank) == ncclInvalidUsage, "nranks other than the processes refused");
    expect(ncclCommInitRank(&comm, ranks, id, ranks) == ncclInvalidArgument, "rank >= nranks refused");
    expect(std::strlen(ncclGetErrorString(ncclInvalidUsage)) > 0, "ncclGetErrorString");
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    ncclComm_t comm = make_comm();
    all_reduce_sums_floats(comm);
    all_reduce_refuses_what_it_lacks(comm);
    grouped_broadcasts_gather_ranges(comm);
    collectives_are_asynchronous(comm);
    expect(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
    bad_communicators_are_refused();
    int all_failures = 0;
    MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all_failures == 0) std::printf("nccl emulation: ok on %d ranks\n", ranks);
    MPI_Finalize();
    return failures ? 1 : 0;
}
