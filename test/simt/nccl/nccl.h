// The NCCL calls the CUDA backend uses, for the emulated build (docs/simt.md, "NCCL"): the
// emulated compile puts test/simt/nccl first on the include path, so gpt2.cu's <nccl.h> is this
// file, and nccl.cpp implements it over MPI between the emulated processes (each one an MPI
// rank started by mpirun). Names, types and values follow NCCL's public header, so the code
// compiles unchanged against the real library; only what the project calls is declared.
#pragma once
#include <cstddef>

#include <cuda_runtime.h>

#define NCCL_UNIQUE_ID_BYTES 128

typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef struct ncclComm* ncclComm_t;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

typedef enum {
    ncclInt8 = 0, ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2, ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6, ncclHalf = 6,
    ncclFloat32 = 7, ncclFloat = 7,
    ncclFloat64 = 8, ncclDouble = 8,
    ncclBfloat16 = 9
} ncclDataType_t;

const char* ncclGetErrorString(ncclResult_t result);
// A new id for one communicator, made on one rank and sent to the others by the caller.
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
// Collective over the nranks processes that pass the same id: this process is rank `rank`.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
// Frees the communicator and abandons the operations it has not completed.
ncclResult_t ncclCommAbort(ncclComm_t comm);
// The communicator's asynchronous error: ncclSuccess, or what went wrong in an operation posted
// on a stream after its call returned.
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
// recvbuff (count elements) = the reduction over the ranks of their sendbuff; in place allowed.
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
// recvbuff (count elements) = rank root's sendbuff, on every rank; in place allowed.
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
// Operations between ncclGroupStart and ncclGroupEnd are issued as one.
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
