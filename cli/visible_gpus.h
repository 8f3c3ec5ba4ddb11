#pragma once
// The GPUs `campaign --devices` may name, and the check of its ids against them.
//
// A worker of a --devices id runs with CUDA_VISIBLE_DEVICES=<id> (campaign/campaign.cpp), which
// replaces the campaign's own: the id means what CUDA makes of it in a process with that
// variable alone. So the inventory is what the CUDA driver enumerates with CUDA_VISIBLE_DEVICES
// unset (in the driver's order, CUDA_DEVICE_ORDER as inherited), and
//   - a decimal id is an index below that count;
//   - a GPU-<uuid> id (or a prefix CUDA accepts: one that names a single GPU) is the UUID of one;
//   - a MIG-<uuid> id is a MIG instance the driver shows when the variable names it (MIG
//     instances are enumerated only then), asked once per such id;
//   - two ids naming one GPU (0 and its GPU-<uuid>, say) are refused, as is anything else.
// The driver (libcuda.so.1, loaded at run time, so the cpu build asks it too) is asked in a child
// process, `attnfuzz gpus`: this one never initializes CUDA, since the campaign's final report
// forks children that may run GPU backends (harness/isolated_call.h).
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace attnfuzz::cli {

struct GpuInventory {
  std::vector<std::string> uuids;  // "GPU-8e6a...-...", one per device, in the driver's order
  std::string why_none;            // without a device: why (no driver, cuInit's error, none found)
};

// The devices the driver shows with CUDA_VISIBLE_DEVICES set to `visible` (unset: nothing).
GpuInventory gpu_inventory(const std::optional<std::string>& visible = std::nullopt);

// Throws std::invalid_argument, one line naming the id, for an id that names no GPU here, and
// for two ids that name one GPU (the rules above).
void check_device_ids(const std::vector<std::string>& ids);

// The hidden `attnfuzz gpus`: one line per device the driver shows to this process (its UUID), or
// one line `none: <why>`.
void add_gpus_command(CLI::App& app, int& exit_code);

}  // namespace attnfuzz::cli
