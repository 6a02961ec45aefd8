# GPT-2 with Pre-, Post- and Peri-LN: build, test and benchmark.
#   make            build ./train ./eval ./tokenize (CUDA backend too when nvcc is found)
#   make test       build and run every test; the last line is "N passed, N failed"
#   make train      build ./train only
CXX      ?= g++
CXXFLAGS ?= -O3 -march=native
CXXFLAGS += -std=c++17 -fopenmp -Wall -Wextra -Wno-unused-parameter
LDLIBS   += -lm
BUILD    := build

BINARIES := train eval tokenize
HEADERS  := $(wildcard *.h)

all: $(BINARIES)

# ---- programs --------------------------------------------------------------
train: train.cpp $(HEADERS)
	$(CXX) $(CXXFLAGS) -o $@ train.cpp $(LDLIBS)

eval: eval.cpp $(HEADERS)
	$(CXX) $(CXXFLAGS) -o $@ eval.cpp $(LDLIBS)

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
	@bash test/run_tests.sh $(TEST_BINS)

# Regenerate the PyTorch golden fixtures (needs Debian's python3-torch; see test/golden/README.md).
golden:
	/usr/bin/python3 test/make_golden.py

clean:
	rm -rf $(BUILD) $(BINARIES)

.PHONY: all test clean golden
