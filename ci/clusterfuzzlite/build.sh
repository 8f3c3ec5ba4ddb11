#!/bin/bash -eu
# ClusterFuzzLite build of the CPU libFuzzer targets (fuzz preset). Runs inside the
# OSS-Fuzz base-builder image, which provides $CC/$CXX (clang), $CFLAGS/$CXXFLAGS with the
# sanitizer of the job, $LIB_FUZZING_ENGINE and $OUT.
apt-get update -qq && apt-get install -y -qq nlohmann-json3-dev libeigen3-dev libcli11-dev libfmt-dev libgtest-dev librapidcheck-dev ninja-build
cmake -S "$SRC/attnfuzz" -B build -G Ninja -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DATTNFUZZ_WITH_TORCH=OFF -DATTNFUZZ_FUZZ=ON -DATTNFUZZ_BENCHMARKS=OFF -DATTNFUZZ_WERROR=OFF
cmake --build build --target fuzz_case_parser fuzz_differential attnfuzz_mutant_ok
cp build/generators/fuzz/fuzz_case_parser build/generators/fuzz/fuzz_differential "$OUT/"
cp build/mutants/libattnfuzz_mutant_ok.so "$OUT/"
# Seed corpora, zipped as ClusterFuzzLite expects.
(cd "$SRC/attnfuzz/corpus/fuzz/fuzz_case_parser" && zip -q "$OUT/fuzz_case_parser_seed_corpus.zip" ./*)
# The differential target needs its backends: a wrapper option file sets none, so the
# job's environment must set ATTNFUZZ_FUZZ_BACKENDS=plugin:$OUT/libattnfuzz_mutant_ok.so
# (or the user's own plugin) for fuzz_differential.
