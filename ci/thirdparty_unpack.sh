# Source on the GPU machine, from the repository root, after each call that carried parts of
# ci/thirdparty_carry.sh (.carry-3p/part-N.tar.xz):   . ci/thirdparty_unpack.sh
# Unpacks every part present into .site-3p/ (git-ignored: kept while the machine is held), each
# once, says which libraries are complete, and exports what their adapters need.
s=$PWD/.site-3p
mkdir -p "$s/.done"
for p in "$PWD"/.carry-3p/part-*.tar.xz; do
  [ -f "$p" ] || continue
  id=$(basename "$p").$(stat -c %s "$p")
  [ -e "$s/.done/$id" ] && continue
  if xz -dc "$p" | tar -x --ignore-zeros -C "$s"; then touch "$s/.done/$id"; echo "3p: unpacked $(basename "$p") ($(stat -c %s "$p") bytes)"
  else echo "3p: FAILED to unpack $p"; fi
done
for lib in "fa4:fa4-mlir fa4-runtime fa4-python" "flashinfer:fa4-mlir fa4-runtime fa4-python fi-python fi-data"; do
  miss=""
  for u in ${lib#*:}; do [ -e "$s/.units/$u" ] || miss="$miss $u"; done
  echo "3p: ${lib%%:*} ${miss:+in}complete${miss:+ (missing:$miss)}"
done
export PYTHONPATH="$s:$s/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}"
export FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=$s/fa4-cache FLASHINFER_WORKSPACE_BASE=$s/fi-workspace
export FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a} CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH=$CUDA_HOME/bin:$PATH
