# The two commands of the README. Both configure and build on first use.
#   make bench   build, then print the accuracy-and-time table (CPU; GPU when present)
#   make test    build, then run the test suite (quick tier; `make test-full` adds the full tier)
BUILD ?= build
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build bench test test-full test-asan clean

all: build

$(BUILD)/CMakeCache.txt:
	@command -v cmake >/dev/null && pkg-config --exists jansson 2>/dev/null || ./tools/install-deps.sh
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# make bench: the CPU table (docs/bench-cpu.md); only the lyco command is built. The PyTorch-CPU
# peer runs in the interpreter tools/bench-venv.sh prints (it installs torch into .venv-bench on
# first use, saying so; LYCO_BENCH_INSTALL=0 skips that). BENCH_ARGS passes options (--full, …).
# With an NVIDIA GPU present, the GPU table follows (GPU_BENCH_ARGS passes options to it).
BENCH_ARGS ?=
bench: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target lyco
	@py="$$(./tools/bench-venv.sh)"; LYCO_TORCH_PYTHON="$$py" ./$(BUILD)/lyco bench $(BENCH_ARGS)
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	    echo "== GPU: lyco bench --backend cuda --quick --first-call (docs/kernels.md)"; \
	    ./$(BUILD)/lyco bench --backend cuda --quick --first-call $(GPU_BENCH_ARGS); \
	else echo "== no NVIDIA GPU here: GPU table skipped"; fi

# where nvcc builds the CUDA backend, the SASS check (tools/sass-lint.sh) needs cuobjdump/nvdisasm:
# fetched from PyPI into .cuda-tools/ when nvcc came without them (a failure only skips that test)
test: build
	@./tools/install-deps.sh --cuda-tools || echo "lyco: cuobjdump/nvdisasm not installed: ctest sass_lint will be skipped"
	cd $(BUILD) && ctest -L quick --output-on-failure -j $(JOBS)

test-full: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan:
	$(MAKE) BUILD=build-asan CMAKE_FLAGS="-DLYCO_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DLYCO_WERROR=ON -DLYCO_CUDA=OFF" test

clean:
	rm -rf $(BUILD) build-asan
