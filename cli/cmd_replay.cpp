// `attnfuzz replay`: re-runs reproducers, each in a fresh isolated worker, and says which
// still fail and which are fixed; `--known` reads them as known deviations.
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "campaign/coverage.h"
#include "campaign/junit.h"
#include "campaign/known.h"
#include "campaign/minimize.h"
#include "campaign/output_file.h"
#include "campaign/run_dir.h"
#include "campaign/worker_protocol.h"
#include "cli/arg_checks.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "harness/case_json.h"
#include "harness/errors.h"
#include "harness/inputs.h"
#include "harness/json_input.h"
#include "harness/plugin_path.h"
#include "backends/registry.h"

namespace attnfuzz::cli {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A path named on the command line is a reproducer, or an error. Inside a directory, .json
// files of the project's other formats (cases, summaries, campaign state, corpora) are skipped;
// everything else (a truncated, empty or unknown file) is judged, and so an error.
struct ReplayInput {
  std::string path;
  bool named = false;  // given on the command line, not found in a directory
};

// `unreadable`: paths that do not exist, or directory entries that cannot be examined (a
// symbolic link loop), each with the reason.
std::vector<ReplayInput> collect_repros(const std::vector<std::string>& paths, std::vector<std::pair<std::string, std::string>>& unreadable) {
  std::vector<ReplayInput> out;
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<ReplayInput> found;
      for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        std::error_code status_ec;
        const bool regular = it->is_regular_file(status_ec);
        if (status_ec)
          unreadable.emplace_back(it->path().string(), status_ec.message());
        else if (regular && it->path().extension() == ".json")
          found.push_back({it->path().string(), false});
      }
      if (ec) unreadable.emplace_back(p, ec.message());
      std::sort(found.begin(), found.end(), [](const ReplayInput& a, const ReplayInput& b) { return a.path < b.path; });
      out.insert(out.end(), found.begin(), found.end());
    } else if (fs::exists(p, ec)) {
      out.push_back({p, true});
    } else {
      unreadable.emplace_back(p, ec ? ec.message() : "no such file or directory");
    }
  }
  return out;
}

// Another attnfuzz format that a directory of reproducers may hold beside them.
bool other_known_format(const std::string& text) {
  try {
    const json j = json::parse(text);
    const auto f = j.is_object() ? j.find("format") : j.end();
    if (f == j.end() || !f->is_string()) return false;
    const std::string format = f->get<std::string>();
    return format == kCaseFormat || format == rundir::kSummaryFormat || format == rundir::kStateFormat || format == kKnownSetFormat ||
           format == rundir::kCorpusFormat;
  } catch (const json::exception&) {
    return false;
  }
}

struct ReplayArgs {
  std::vector<std::string> paths, backends;
  std::string junit;
  double timeout = 60;
  bool known = false;  // the paths are known deviations: say which still fail and which are fixed
  bool any_plugin_build = false;  // replay a plugin whose content hash is not the recorded one
  bool runnable_only = false;     // leave out, and say so, reproducers whose backend is not available here
};

// Why a reproducer's blamed backend cannot run on this machine (a built-in backend the registry
// lists as unavailable: LibTorch's CUDA half missing, no GPU), or nothing. The user's own code
// (plugin:, py:) is always tried: it says itself what it needs.
std::optional<std::string> not_runnable_here(const Signature& sig) {
  static const std::vector<BackendInfo> known = list_backends();
  for (const std::string& b : sig.blamed_backends())
    for (const BackendInfo& i : known)
      if (i.name == b && !i.available) return b + " is not available here: " + i.unavailable_reason;
  return std::nullopt;
}

int replay_command(const ReplayArgs& a) {
  try {
    refuse_repeated_backends(a.backends);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "attnfuzz: {}\n", message_safe(e.what(), 600));
    return kExitBadInput;
  }
  const std::vector<std::string>& paths = a.paths;
  const std::vector<std::string>& backends_override = a.backends;
  const std::string& junit = a.junit;
  const double timeout = a.timeout;
  // With --known, each reproducer is named by its known deviation's id.
  std::map<std::string, std::string> known_id;  // path -> id
  if (a.known) {
    try {
      const KnownFindings known = KnownFindings::load(paths);
      for (const auto& k : known.all()) known_id[k.path] = k.id;
    } catch (const std::exception& e) {
      fmt::print(stderr, "attnfuzz: {}\n", message_safe(e.what(), 600));
      return kExitBadInput;
    }
  }
  auto label = [&](const std::string& path) {
    const auto it = known_id.find(path);
    return it == known_id.end() ? path : "known " + it->second + "  " + path;
  };
  std::vector<JUnitCase> cases;
  int failing = 0, fixed = 0, untested = 0, errors = 0, skipped = 0, legacy = 0, bad_inputs = 0, not_here = 0;
  if (!junit.empty()) {
    if (const auto why = writable_file("--junit", junit)) {
      fmt::print(stderr, "attnfuzz: {}\n", *why);
      return kExitBadInput;
    }
  }
  // A replay that went wrong: an ERROR row in the table, and the same on stderr (a script that
  // keeps only stderr must see it too).
  auto error_row = [&](const std::string& shown, const std::string& why) {
    const std::string line = printable(shown) + ": " + printable(why);
    fmt::print("ERROR     {}\n", line);
    std::fflush(stdout);
    fmt::print(stderr, "attnfuzz: replay: {}\n", line);
    ++errors;
  };
  // A file that cannot be replayed at all.
  auto bad_input = [&](const std::string& path, const std::string& why) {
    error_row(path, why);
    ++bad_inputs;
  };
  std::vector<std::pair<std::string, std::string>> unreadable;
  const std::vector<ReplayInput> inputs = collect_repros(paths, unreadable);
  for (const auto& [path, why] : unreadable) {
    bad_input(path, why);
    cases.push_back({"replay", path, why, ""});
  }
  for (const auto& [path, named] : inputs) {
    Reproducer r;
    try {
      const std::string text = read_input_file(path);
      if (!named && other_known_format(text)) {
        ++skipped;  // a case, a summary or a state file beside the reproducers
        continue;
      }
      r = parse_repro(text);
    } catch (const CaseError& e) {
      bad_input(path, e.what());
      cases.push_back({"replay", path, std::string("unreadable: ") + e.what(), ""});
      continue;
    }
    if (a.runnable_only)
      if (const auto why = not_runnable_here(r.finding.signature)) {
        ++not_here;
        fmt::print("not here  {}  {}: {}\n", label(path), r.finding.signature.to_string(), message_safe(*why, 300));
        continue;
      }
    if (r.legacy_checksum) {
      ++legacy;
      fmt::print("note      {}: written before record_checksum: only its inputs can be verified\n", path);
    }
    const uint64_t sum = checksum(generate_inputs(r.c));
    // Old crash and timeout reproducers recorded no input checksum (zero); new ones always do.
    if ((r.input_checksum || !r.legacy_checksum) && sum != r.input_checksum) {
      bad_input(path, fmt::format("input checksum {:016x} differs from the recorded {:016x}; not judged", sum, r.input_checksum));
      cases.push_back({"replay", path, "input checksum differs from the recorded one", ""});
      continue;
    }
    std::vector<std::string> names, notes;
    try {
      names = runnable_backends(r, backends_override.empty() ? r.backends : backends_override, a.any_plugin_build, &notes);
    } catch (const std::exception& e) {  // a plugin not found here, or another build of it
      ++untested;
      fmt::print("UNTESTED  {}  {}: {}\n", label(path), r.finding.signature.to_string(), message_safe(e.what(), 900));
      std::fflush(stdout);
      fmt::print(stderr, "attnfuzz: replay: {}: untested: {}\n", printable(path), message_safe(e.what(), 900));
      cases.push_back({"replay", path, std::string("untested: ") + e.what(), ""});
      continue;
    }
    for (const std::string& n : notes) fmt::print("note      {}: {}\n", printable(path), message_safe(n, 900));
    WorkerProcess w(worker_argv(names), {});
    const Signature& sig = r.finding.signature;
    WorkerRequest req;
    req.c = r.c;
    req.check_determinism = needs_determinism(sig);
    const WorkerCall call = call_worker(w, req, timeout);
    bool still = false;
    if (call.status != WorkerProcess::Reply::Status::ok) {
      const FindingClass died = call.status == WorkerProcess::Reply::Status::timed_out ? FindingClass::timeout : FindingClass::crash;
      still = sig.cls == died;
      if (!still) {
        error_row(label(path), "the worker died (" + call.detail + ") while replaying");
        cases.push_back({"replay", path, "worker died: " + call.detail, ""});
        continue;
      }
    } else {
      if (call.reply.error) {
        error_row(label(path), *call.reply.error);
        cases.push_back({"replay", path, *call.reply.error, ""});
        continue;
      }
      for (const auto& f : call.reply.findings)
        if (f.finding.signature == sig) still = true;
    }
    // Not shown again is `fixed` only if the blamed backend ran the case to the end and passed.
    const std::optional<std::string> not_tested = still ? std::nullopt : why_untested(sig, call.reply.runs);
    if (not_tested) {
      ++untested;
      fmt::print("UNTESTED  {}  {}: {}\n", label(path), sig.to_string(), printable(*not_tested));
      std::fflush(stdout);
      fmt::print(stderr, "attnfuzz: replay: {}: untested, not fixed: {}\n", printable(path), printable(*not_tested));
      cases.push_back({"replay", path, "untested: " + *not_tested, ""});
    } else if (still) {
      ++failing;
      fmt::print("FAILING   {}  {}\n", label(path), sig.to_string());
      cases.push_back({"replay", path, "still failing: " + sig.to_string(), ""});
    } else {
      ++fixed;
      fmt::print("fixed     {}  {}\n", label(path), sig.to_string());
      cases.push_back({"replay", path, "", "fixed: " + sig.to_string()});
    }
  }
  fmt::print("{} still failing, {} fixed, {} untested, {} errors, {} files skipped (not reproducers){}{}\n", failing, fixed, untested, errors,
             skipped, legacy ? fmt::format(", {} legacy (inputs verified only)", legacy) : std::string(),
             a.runnable_only ? fmt::format(", {} left out (their backend is not available here)", not_here) : std::string());
  if (a.runnable_only && not_here > 0 && failing + fixed + untested + errors == 0)
    fmt::print("no reproducer of {} can run on this machine: each blames a backend that is not available here\n",
               printable(fmt::format("{}", fmt::join(paths, " "))));
  // A directory without a single reproducer replays nothing: said, not an error (all fixed).
  if (failing + fixed + untested + errors + not_here == 0)
    fmt::print(stderr, "attnfuzz: replay: warning: no reproducer ({}) found in {}\n", kReproFormat,
               printable(fmt::format("{}", fmt::join(paths, " "))));
  if (!junit.empty()) {
    try {
      write_file_atomic(junit, junit_xml("attnfuzz.replay", cases));
    } catch (const std::exception& e) {  // a full disk
      fmt::print(stderr, "attnfuzz: replay: --junit: {}\n", message_safe(e.what(), 600));
      return kExitBadInput;
    }
  }
  // A reproducer whose blamed backend did not run it is 4, as in check: nothing was tested, and
  // that takes precedence. A finding still failing, or a replay that went wrong, is 1; otherwise
  // a file that is no reproducer, an edited one or one whose inputs differ is bad input, 2.
  // With --known, a known deviation still failing is what is expected: only errors count.
  if (untested) fmt::print(stderr, "attnfuzz: replay: {} reproducer(s) untested: their backend did not run them (lines above)\n", untested);
  if (untested) return kExitUntested;
  if (a.known) {
    fmt::print("known deviations: {} still failing, {} fixed (remove those from the known list)\n", failing, fixed);
    if (errors > bad_inputs) return kExitDivergence;
    return bad_inputs ? kExitBadInput : kExitOk;
  }
  if (failing || errors > bad_inputs) return kExitDivergence;
  return bad_inputs ? kExitBadInput : kExitOk;
}

}  // namespace

void add_replay_command(CLI::App& app, int& exit_code) {
  auto ra = std::make_shared<ReplayArgs>();
  CLI::App* replay = app.add_subcommand("replay", "Re-run reproducers: still failing / fixed; non-zero exit on any divergence");
  replay->add_option("paths", ra->paths, "reproducer files or directories")->required();
  add_shared_option(replay, Flag::backends, ra->backends, "to run instead of the recorded ones");
  add_shared_option(replay, Flag::junit, ra->junit);
  add_shared_option(replay, Flag::timeout, ra->timeout, "watchdog per reproducer, seconds");
  add_oracle_device_option(replay);
  add_plugin_path_option(replay, "(a reproducer's plugins)");
  replay->add_flag("--any-plugin-build", ra->any_plugin_build,
                   "replay a plugin whose library is not the one recorded (another content hash), e.g. a fixed build");
  replay->add_flag("--runnable-only", ra->runnable_only,
                   "leave out, and list, the reproducers whose blamed backend is not available on this machine (no GPU, say)");
  replay->add_flag("--known", ra->known,
                   "the paths are known deviations (campaign --known): say which still fail and which are fixed; exit 0 unless a "
                   "replay went wrong");
  replay->callback([ra, &exit_code] { exit_code = replay_command(*ra); });
}

}  // namespace attnfuzz::cli
