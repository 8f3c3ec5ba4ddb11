#pragma once
// The one writer of every file attnfuzz produces (findings, state, summaries, reports, JUnit,
// reproducers, generated cases). A write cannot be redirected: the temporary file is created
// beside the target with O_CREAT | O_EXCL | O_NOFOLLOW (a name planted there, a symbolic link
// say, is never followed or reused), and the target must be a regular file or a new name. A
// device node, FIFO, socket, directory or symbolic link at the target is refused: the rename
// would put a regular file in its place (`--junit /dev/full` run as root would replace the device).
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnfuzz {

// A write that was refused or failed; the message is one line naming the file.
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Why `path` cannot be written (nothing when it can): something other than a regular file is
// there, or its directory is missing or not writable. Checked before long work, so a command
// refuses a bad output flag before it runs any case.
std::optional<std::string> unwritable_output(const std::string& path);

// Writes `text` to `path` atomically (temporary file, fsync, rename): a reader sees the old
// file or the whole new one. Throws OutputError.
void write_file_atomic(const std::string& path, const std::string& text);

// One file of a batch, for commands that write many independent files (run --record).
struct OutputFile {
  std::string path, text;
};
// Writes every file, going on after a failure: one write that fails (a full disk, a name that is
// refused) must not lose the others. Returns the paths written and one error line per failure.
struct OutputResult {
  std::vector<std::string> written, errors;
};
OutputResult write_files_atomic(const std::vector<OutputFile>& files);

}  // namespace attnfuzz
