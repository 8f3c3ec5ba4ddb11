#pragma once
// Python-level kernels as backends (DESIGN.md, "Implementations under test"; the user's side:
// docs/python-backends.md). `py:MODULE:CLASS[?key=value&...]` names an adapter class of the
// attnfuzz_py package (python/attnfuzz_py/); the backend runs it in a persistent Python worker
// process, started once per backend instance (so once per campaign worker) and reused for every
// case. Control messages go over pipes (backends/python_bridge_protocol.h), tensors through shared
// memory (backends/shared_tensors.h), with the C plugin ABI's semantics: the problem, the mask as
// expression and dense, offsets and restrictions, strided layouts, poisoned outputs, the contract,
// dLSE and masked-row flags, supports with a reason.
//
// A Python exception is an error of the call, with the traceback's last lines. A crash or a
// hang of the Python process (ATTNFUZZ_PY_TIMEOUT_S per call, ATTNFUZZ_PY_START_TIMEOUT_S for the
// start-up; 300 s each by default) is an error naming how it
// ended; the worker is restarted for the next call. Inside a campaign the error is a finding.
//
// Which Python: ATTNFUZZ_PYTHON, else the venv ci/setup.sh made (.deps/pyenv), else python3.
// The package: ATTNFUZZ_PY_PACKAGE_DIR, else python/ of the source tree this was built from.
#include <memory>
#include <string>

#include "harness/backend.h"

namespace attnfuzz {

// spec: the part after "py:". Throws std::invalid_argument, with the reason, for a malformed
// spec, a worker that cannot start, an adapter that cannot load, or another protocol version.
std::unique_ptr<Backend> make_python_backend(const std::string& spec);

}  // namespace attnfuzz
