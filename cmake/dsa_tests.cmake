# Tests, registered with CTest under the prefix "dsa." (included from the top CMakeLists.txt when
# DSA_BUILD_TESTS is on). GPU programs exit 77 without an sm_90 GPU: reported as skipped.
enable_testing()

add_executable(test_ref tests/test_ref.c)
target_compile_options(test_ref PRIVATE ${DSA_WARNINGS})
target_include_directories(test_ref PRIVATE tests/support) # rng.h
target_link_libraries(test_ref PRIVATE dsa_ref)
add_test(NAME dsa.ref COMMAND test_ref)

add_executable(test_api tests/test_api.c)
target_compile_options(test_api PRIVATE ${DSA_WARNINGS})
target_link_libraries(test_api PRIVATE dsa_static)
add_test(NAME dsa.api COMMAND test_api)

# ---- GPU tests: one program a stage, every kernel against the CPU reference -------------------------
#   test_gpu_indexer    indexer decode and prefill: scores and top-k (dsa_indexer_*)
#   test_gpu_topk       plain top-k (dsa_topk)
#   test_gpu_attention  sparse MLA attention (dsa_sparse_mla)
#   test_gpu_cache      the cache writers (dsa_index_k_store, dsa_mla_kv_store)
#   test_gpu_api        across the stages: workspace one byte short, empty batches, CUDA graph capture
#   test_gpu_garbage    every device array filled with garbage: outputs sane, guard bytes intact
#   test_gpu_cp         context parallelism's single-GPU pieces and simulated ranks
# What they share (tests/support): the harness (reporting, per-case memory, guards, check.h's
# handler, the seeded dsa_rng), the indexer's and attention's problem builders (the row checks are
# in dsa_support, shared with dsa-bench).
add_library(dsa_gpu_harness STATIC tests/support/gpu_harness.c tests/support/indexer_problem.c
                                   tests/support/mla_problem.c tests/support/score_rows.c)
target_compile_options(dsa_gpu_harness PRIVATE ${DSA_WARNINGS})
target_include_directories(dsa_gpu_harness PUBLIC tests/support)
target_link_libraries(dsa_gpu_harness PUBLIC dsa_static dsa_support dsa_ref m)
set(DSA_GPU_TESTS test_gpu_indexer test_gpu_topk test_gpu_attention test_gpu_cache test_gpu_api
                  test_gpu_garbage test_gpu_cp)
foreach(prog ${DSA_GPU_TESTS})
  add_executable(${prog} tests/${prog}.c)
  target_compile_options(${prog} PRIVATE ${DSA_WARNINGS})
  target_link_libraries(${prog} PRIVATE dsa_gpu_harness)
endforeach()
# A GPU test: `prog` under the environment `env` (";"-separated, may be empty); exit 77 = skipped
# (no sm_90 GPU).
function(dsa_gpu_test name prog env)
  add_test(NAME ${name} COMMAND ${prog})
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)
  if(env)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${env}")
  endif()
endfunction()
# Each program on the choice tables' kernels.
dsa_gpu_test(dsa.gpu_indexer test_gpu_indexer "")
dsa_gpu_test(dsa.gpu_topk test_gpu_topk "")
dsa_gpu_test(dsa.gpu_attention test_gpu_attention "")
dsa_gpu_test(dsa.gpu_cache test_gpu_cache "")
dsa_gpu_test(dsa.gpu_api test_gpu_api "")
dsa_gpu_test(dsa.gpu_garbage test_gpu_garbage "")
# context parallelism's single-GPU pieces: merge, LSE combine, simulated ranks against one GPU
dsa_gpu_test(dsa.gpu_cp test_gpu_cp "")
# ... and the merge on each kernel forced (the table picks runs for most of its small cases)
dsa_gpu_test(dsa.gpu_cp_merge_runs test_gpu_cp "DSA_KERNEL=merge:runs")
dsa_gpu_test(dsa.gpu_cp_merge_select test_gpu_cp "DSA_KERNEL=merge:select")
dsa_gpu_test(dsa.gpu_cp_merge_tree test_gpu_cp "DSA_KERNEL=merge:tree")
# The attention cases on each kernel forced.
dsa_gpu_test(dsa.gpu_attention_mma_split test_gpu_attention "DSA_KERNEL=attention:mma_split")
dsa_gpu_test(dsa.gpu_attention_rows_as_m test_gpu_attention "DSA_KERNEL=attention:rows_as_m")
dsa_gpu_test(dsa.gpu_attention_heads_as_m test_gpu_attention "DSA_KERNEL=attention:heads_as_m")
# (seesaw takes bf16 KV; the FP8 cases run the table's kernel under it)
dsa_gpu_test(dsa.gpu_attention_seesaw test_gpu_attention "DSA_KERNEL=attention:seesaw")
# (token groups take 8, 16 and 32 heads; the others run heads_as_m under it)
dsa_gpu_test(dsa.gpu_attention_token_groups test_gpu_attention "DSA_KERNEL=attention:token_groups")
dsa_gpu_test(dsa.gpu_garbage_rows_as_m test_gpu_garbage "DSA_KERNEL=attention:rows_as_m;DSA_TEST_ONLY=attention")
dsa_gpu_test(dsa.gpu_garbage_heads_as_m test_gpu_garbage "DSA_KERNEL=attention:heads_as_m;DSA_TEST_ONLY=attention")
dsa_gpu_test(dsa.gpu_garbage_seesaw test_gpu_garbage "DSA_KERNEL=attention:seesaw;DSA_TEST_ONLY=attention")
dsa_gpu_test(dsa.gpu_garbage_token_groups test_gpu_garbage "DSA_KERNEL=attention:token_groups;DSA_TEST_ONLY=attention")
dsa_gpu_test(dsa.gpu_garbage_merge_runs test_gpu_garbage "DSA_KERNEL=merge:runs;DSA_TEST_ONLY=cp pieces")
dsa_gpu_test(dsa.gpu_garbage_merge_tree test_gpu_garbage "DSA_KERNEL=merge:tree;DSA_TEST_ONLY=cp pieces")
# the indexer cases on each scorer forced (the table: wgmma for prefill, wgmma_tma for FP8-q decode
# with 64-key pages, mma otherwise)
dsa_gpu_test(dsa.gpu_scores_mma test_gpu_indexer "DSA_KERNEL=scores:mma")
dsa_gpu_test(dsa.gpu_scores_wgmma test_gpu_indexer "DSA_KERNEL=scores:wgmma")
dsa_gpu_test(dsa.gpu_scores_wgmma_tma test_gpu_indexer "DSA_KERNEL=scores:wgmma_tma")
# every top-k row with scores on the chain; rows up to 16,384 on the slices kernel instead of
# registers: the plain top-k cases and the indexer's
dsa_gpu_test(dsa.gpu_topk_chain test_gpu_topk "DSA_KERNEL=topk:chain")
dsa_gpu_test(dsa.gpu_topk_slices test_gpu_topk "DSA_KERNEL=topk:slices")
dsa_gpu_test(dsa.gpu_topk_chain_indexer test_gpu_indexer "DSA_KERNEL=indexer:separate,topk:chain")
dsa_gpu_test(dsa.gpu_topk_slices_indexer test_gpu_indexer "DSA_KERNEL=indexer:separate,topk:slices")
# decode as two kernels, and every decode case fused: on TMA pages (FP8 q, 64-key pages) and on the
# cp.async scorer (bf16 q and FP8 q)
dsa_gpu_test(dsa.gpu_indexer_separate test_gpu_indexer "DSA_KERNEL=indexer:separate")
dsa_gpu_test(dsa.gpu_indexer_fused test_gpu_indexer "DSA_KERNEL=indexer:fused")
dsa_gpu_test(dsa.gpu_indexer_fused_wgmma test_gpu_indexer "DSA_KERNEL=indexer:fused,scores:wgmma")
# the API cases (a workspace one byte short, empty batches, the CUDA graph of decode + attention) on
# each forced kernel too: every kernel captured in a graph
foreach(forced attention:mma_split attention:rows_as_m attention:heads_as_m attention:seesaw attention:token_groups
        scores:mma scores:wgmma
        scores:wgmma_tma topk:chain topk:slices indexer:separate indexer:fused)
  string(REPLACE ":" "_" _name ${forced})
  dsa_gpu_test(dsa.gpu_api_${_name} test_gpu_api "DSA_KERNEL=${forced}")
endforeach()
# dsa_cp: its argument errors on the host (no GPU); the step on 2, 4 and 8 GPUs (as many as the host
# has; skipped with fewer than 2) through NCCL against one GPU, on the table's merge and on runs
if(DSA_HAVE_NCCL)
  add_executable(test_cp_nccl tests/test_cp_nccl.c tests/support/cp_problem.cu)
  target_compile_options(test_cp_nccl PRIVATE $<$<COMPILE_LANGUAGE:C>:${DSA_WARNINGS}>)
  target_include_directories(test_cp_nccl PRIVATE tests/support src) # src: common/shard.h (cp_problem.cu)
  target_link_libraries(test_cp_nccl PRIVATE dsa_cp_static dsa_support)
  add_test(NAME dsa.cp_errors COMMAND test_cp_nccl --host)
  dsa_gpu_test(dsa.cp_nccl test_cp_nccl "NCCL_NVLS_ENABLE=0")
  dsa_gpu_test(dsa.cp_nccl_merge_runs test_cp_nccl "NCCL_NVLS_ENABLE=0;DSA_KERNEL=merge:runs")
  dsa_gpu_test(dsa.cp_nccl_merge_select test_cp_nccl "NCCL_NVLS_ENABLE=0;DSA_KERNEL=merge:select")
endif()

# ---- Host-layer tests that run without a GPU, under AddressSanitizer + UndefinedBehaviorSanitizer ----
include(CheckCSourceCompiles)
set(DSA_SAN_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=address,undefined")
set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=address,undefined")
check_c_source_compiles("int main(void) { return 0; }" DSA_HAVE_SANITIZERS)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
if(NOT DSA_HAVE_SANITIZERS)
  message(WARNING "dsa: the C compiler cannot build with -fsanitize=address,undefined; host tests and fuzzers run unsanitized")
  set(DSA_SAN_FLAGS "")
endif()

# The host layer linked with stub launchers (tests/support/stub_kernels.c): chunk loops run on the CPU.
add_library(dsa_host_stub STATIC ${DSA_HOST_SOURCES} tests/support/stub_kernels.c)
target_include_directories(dsa_host_stub PUBLIC include src tests/support)
target_compile_options(dsa_host_stub PUBLIC ${DSA_SAN_FLAGS} PRIVATE ${DSA_WARNINGS})
target_link_options(dsa_host_stub PUBLIC ${DSA_SAN_FLAGS})

# The real library with its C sources sanitized (the kernels' objects are shared, not rebuilt).
add_library(dsa_host_san STATIC ${DSA_HOST_SOURCES} src/host/device.c $<TARGET_OBJECTS:dsa_kernels>)
target_include_directories(dsa_host_san PUBLIC include PRIVATE src)
target_compile_options(dsa_host_san PUBLIC ${DSA_SAN_FLAGS} PRIVATE ${DSA_WARNINGS})
target_link_options(dsa_host_san PUBLIC ${DSA_SAN_FLAGS})
target_link_libraries(dsa_host_san PUBLIC CUDA::cudart_static)

add_executable(test_host tests/test_host.c)
target_link_libraries(test_host PRIVATE dsa_host_stub)
add_test(NAME dsa.host COMMAND test_host)

add_executable(fuzz_api_stub tests/fuzz_api.c)
target_compile_definitions(fuzz_api_stub PRIVATE FUZZ_STUB)
target_link_libraries(fuzz_api_stub PRIVATE dsa_host_stub m)
add_test(NAME dsa.fuzz_stub COMMAND fuzz_api_stub 2000000 20261130)

add_executable(fuzz_api_real tests/fuzz_api.c)
target_include_directories(fuzz_api_real PRIVATE tests/support) # rng.h
target_link_libraries(fuzz_api_real PRIVATE dsa_host_san m)
add_test(NAME dsa.fuzz_real COMMAND fuzz_api_real 1000000 20261201)
# The CUDA driver maps memory where ASan keeps its shadow gap; the runtime's one-time allocations
# are not leaks of ours.
set_tests_properties(dsa.fuzz_real PROPERTIES ENVIRONMENT "ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0")

# ---- The installed package, used as a consumer would: CMake (both targets) and pkg-config (both) ----
add_test(NAME dsa.consumer
         COMMAND ${CMAKE_COMMAND} -E env CC=${CMAKE_C_COMPILER}
                 sh ${PROJECT_SOURCE_DIR}/tests/consumer/run.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR}/tests/consumer
                 ${PROJECT_BINARY_DIR}/consumer)

# ---- Python package (python/dsa) under pytest: the CPU part everywhere, the GPU part on an H100/H200 ----
# pytest comes from the interpreter found, or from a virtual environment made here once.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  set(DSA_PYTEST_PYTHON ${Python3_EXECUTABLE})
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import pytest" RESULT_VARIABLE _dsa_no_pytest OUTPUT_QUIET ERROR_QUIET)
  if(_dsa_no_pytest)
    set(_venv ${PROJECT_BINARY_DIR}/pyenv)
    if(NOT EXISTS ${_venv}/bin/python)
      message(STATUS "dsa: pytest not found; installing it into ${_venv}")
      execute_process(COMMAND ${Python3_EXECUTABLE} -m venv --system-site-packages ${_venv} OUTPUT_QUIET)
      execute_process(COMMAND ${_venv}/bin/python -m pip install -q pytest RESULT_VARIABLE _dsa_pip)
      if(_dsa_pip)
        message(WARNING "dsa: could not install pytest (pip exit ${_dsa_pip}); the dsa.python test will fail until it is available")
      endif()
    endif()
    set(DSA_PYTEST_PYTHON ${_venv}/bin/python)
  endif()
  add_executable(dsa_abi_dump tests/support/abi_dump.c)
  target_include_directories(dsa_abi_dump PRIVATE include)
  set(_dsa_fastcall_env DSA_FASTCALL=0)
  if(TARGET dsa_fastcall)
    set(_dsa_fastcall_env DSA_FASTCALL=$<TARGET_FILE:dsa_fastcall>)
  endif()
  add_test(NAME dsa.python
           COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${PROJECT_SOURCE_DIR}/python DSA_LIBRARY=$<TARGET_FILE:dsa>
                   DSA_ABI_DUMP=$<TARGET_FILE:dsa_abi_dump> ${_dsa_fastcall_env} PYTHONDONTWRITEBYTECODE=1
                   ${DSA_PYTEST_PYTHON} -m pytest -q -p no:cacheprovider ${PROJECT_SOURCE_DIR}/python/tests)
  if(TARGET dsa-dev-cudart-noop AND NOT DSA_STATIC_CUDART)
    # libdsa over a CUDA runtime that does nothing and counts (dev/cudart_noop.c): a repeated call asks no
    # occupancy and sets no attribute again, and launches (and memsets) at most twice
    add_test(NAME dsa.host_runtime_calls
             COMMAND ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=$<TARGET_FILE_DIR:dsa-dev-cudart-noop>
                     PYTHONPATH=${PROJECT_SOURCE_DIR}/python DSA_LIBRARY=$<TARGET_FILE:dsa> DSA_FASTCALL=0
                     PYTHONDONTWRITEBYTECODE=1 ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/dev/host_call_cost.py --check)
  endif()
else()
  message(WARNING "dsa: no Python 3 interpreter: the Python package's tests are not registered")
endif()

# ---- dsa-bench's host side under ASan + UBSan, over the no-op runtime (device memory is host memory
# there: dev/cudart_noop_bench.c), so a bench that reads its pools or block tables out of bounds stops
# here instead of measuring other data (a --shape pool too small for the GLM chunk's context did,
# 2026-12-05). Kernels do not run: the rows' times are meaningless, their inputs are what is checked.
if(DSA_BUILD_BENCH AND DSA_HAVE_SANITIZERS AND TARGET dsa-dev-cudart-noop AND NOT DSA_STATIC_CUDART)
  add_executable(dsa-bench-san ${DSA_BENCH_SOURCES})
  target_compile_options(dsa-bench-san PRIVATE $<$<COMPILE_LANGUAGE:C>:${DSA_WARNINGS} ${DSA_SAN_FLAGS}>)
  target_link_options(dsa-bench-san PRIVATE ${DSA_SAN_FLAGS})
  target_link_libraries(dsa-bench-san PRIVATE dsa_support dsa_static)
  target_include_directories(dsa-bench-san PRIVATE src)
  foreach(run "attn --shape chunked" "attn --batches 3,64 --heads 16" "attn --chunk-tokens 100,2048 --heads 8 --slot-order"
              "attn --chunk-tokens 4096 --chunk-context 4k" "attn --chunk-tokens 300 --chunk-shares 0,50,99"
              "attn --shape prefill" "glm --sizes 8192,20000 --mtp 2"
              "serve --batches 2 --sizes 8192")
    string(REPLACE " " ";" _args "${run} --iters 2 --warmup 1")
    string(REGEX REPLACE "[^a-z0-9]+" "_" _name "${run}")
    add_test(NAME dsa.bench_host_${_name}
             COMMAND ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=$<TARGET_FILE_DIR:dsa-dev-cudart-noop>
                     ASAN_OPTIONS=detect_leaks=0 $<TARGET_FILE:dsa-bench-san> ${_args})
  endforeach()
endif()
