// CPU lists as the kernel writes them (cpuset(7)'s "list format", Cpus_allowed_list in
// /proc/<pid>/status): "0-3,8,10-11".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vrdma {

// CPU numbers are below this (the kernel's cpu_set_t holds CPU_SETSIZE, 1024).
inline constexpr uint32_t kMaxCpus = 1024;

// The CPUs `text` names, ascending and without repeats; nullopt with `*error` saying what is
// wrong (an empty list, an empty item, a reversed range, a CPU >= kMaxCpus).
std::optional<std::vector<uint32_t>> parse_cpu_list(std::string_view text, std::string* error);

// The list format of ascending CPUs, ranges joined: {0,1,2,5} -> "0-2,5"; {} -> "".
std::string cpu_list_text(const std::vector<uint32_t>& cpus);

// The CPUs the calling thread may run on (sched_getaffinity); empty if the kernel does not say.
std::vector<uint32_t> allowed_cpus();

}  // namespace vrdma
