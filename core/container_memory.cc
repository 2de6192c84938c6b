#include "core/container_memory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace tg {
namespace {

// The cgroup files are a few hundred bytes; memory.stat about 1.5 KiB, mountinfo a few KiB
// in a container (more on a busy host: read in chunks until the end).
constexpr size_t kReadChunk = 4096;

// The whole file, or nullopt where it cannot be opened.
std::optional<std::string> ReadSmallFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char chunk[kReadChunk];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    text.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A file holding one number; nullopt where it cannot be read or holds no number.
std::optional<uint64_t> ReadCounter(const std::string& path) {
  std::optional<std::string> text = ReadSmallFile(path);
  uint64_t v = 0;
  if (!text.has_value() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &v)) {
    return std::nullopt;
  }
  return v;
}

// A limit file's value; nullopt for "max" (no number), an unlimited number, or no file.
std::optional<uint64_t> ReadLimit(const std::string& path) {
  const std::optional<uint64_t> v = ReadCounter(path);
  if (!v.has_value() || *v >= kNoCgroupLimit) return std::nullopt;
  return v;
}

// The value of `key` in a memory.stat file ("key value" lines).
std::optional<uint64_t> StatValue(const std::string& stat, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(stat, '\n')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(' ', 1));
    uint64_t v = 0;
    if (kv.first == key && absl::SimpleAtoi(kv.second, &v)) return v;
  }
  return std::nullopt;
}

// mountinfo escapes spaces and the like in paths as \ooo.
std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const absl::string_view oct = s.substr(i + 1, 3);
      if (oct.size() == 3 &&
          std::all_of(oct.begin(), oct.end(), [](char c) { return c >= '0' && c <= '7'; })) {
        out.push_back(static_cast<char>((oct[0] - '0') * 64 + (oct[1] - '0') * 8 + (oct[2] - '0')));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

struct Mount {
  std::string root;         // the cgroup the mount shows at its mount point.
  std::string mount_point;  // without the reader's root prefix.
};

// The v1 memory mount and the v2 mount from a mountinfo text.
void FindMounts(const std::string& mountinfo, std::optional<Mount>* v1, std::optional<Mount>* v2) {
  for (absl::string_view line : absl::StrSplit(mountinfo, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || dash == f.end() || f.end() - dash < 4) continue;
    const absl::string_view fstype = dash[1];
    const absl::string_view super_options = dash[3];
    Mount m{Unescape(f[3]), Unescape(f[4])};
    if (fstype == "cgroup2" && !v2->has_value()) {
      *v2 = std::move(m);
    } else if (fstype == "cgroup" && !v1->has_value()) {
      for (absl::string_view opt : absl::StrSplit(super_options, ',')) {
        if (opt == "memory") {
          *v1 = std::move(m);
          break;
        }
      }
    }
  }
}

// The v1 memory cgroup and the v2 cgroup of the process, from /proc/self/cgroup.
void FindCgroups(const std::string& proc_cgroup, std::optional<std::string>* v1,
                 std::optional<std::string>* v2) {
  for (absl::string_view line : absl::StrSplit(proc_cgroup, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (f[0] == "0" && f[1].empty()) {
      *v2 = std::string(f[2]);
      continue;
    }
    for (absl::string_view c : absl::StrSplit(f[1], ',')) {
      if (c == "memory") *v1 = std::string(f[2]);
    }
  }
}

std::string StripSlashes(absl::string_view s) {
  while (!s.empty() && s.back() == '/') s.remove_suffix(1);
  return std::string(s);
}

// The directories of `cgroup` under `mount`, leaf first, up to the mount point, each with
// `root` in front. Where the cgroup is not below the mount's root (a cgroup namespace the
// file does not agree with) or its directory is missing, the mount point alone: inside a
// container, that is the container's own cgroup.
std::vector<std::string> DirsOf(const std::string& root, const Mount& mount,
                                const std::string& cgroup) {
  const std::string top = StripSlashes(absl::StrCat(StripSlashes(root), mount.mount_point));
  const std::string mount_root = StripSlashes(mount.root);  // "" for "/".
  std::string rel;
  if (mount_root.empty()) {
    rel = StripSlashes(cgroup);
  } else if (cgroup == mount_root || absl::StartsWith(cgroup, absl::StrCat(mount_root, "/"))) {
    rel = StripSlashes(absl::string_view(cgroup).substr(mount_root.size()));
  }
  if (!rel.empty() && !IsDirectory(top + rel)) rel.clear();
  std::vector<std::string> dirs;
  for (;;) {
    dirs.push_back(top + rel);
    if (rel.empty()) break;
    rel.resize(rel.rfind('/') == std::string::npos ? 0 : rel.rfind('/'));
  }
  return dirs;
}

// Folds one limited cgroup into the reading.
void Limit(ContainerMemory* m, const std::string& dir, uint64_t limit, uint64_t usage) {
  limit = std::max<uint64_t>(limit, 1);  // a limit of 0 holds nothing; 0 here means none.
  const uint64_t headroom = limit > usage ? limit - usage : 0;
  if (m->limit == 0) {
    m->available = headroom;
  } else {
    m->available = std::min(m->available, headroom);
  }
  if (m->limit == 0 || limit < m->limit) {
    m->limit = limit;
    m->limited_by = dir;
  }
}

// A cgroup's working set: charged bytes less its inactive page cache.
uint64_t WorkingSet(const std::string& dir, const char* usage_file, const char* inactive_key,
                    std::string* stat_out) {
  const uint64_t usage = ReadCounter(absl::StrCat(dir, "/", usage_file)).value_or(0);
  std::string stat = ReadSmallFile(absl::StrCat(dir, "/memory.stat")).value_or("");
  const uint64_t inactive = StatValue(stat, inactive_key).value_or(0);
  if (stat_out != nullptr) *stat_out = std::move(stat);
  return usage > inactive ? usage - inactive : 0;
}

}  // namespace

ContainerMemoryReader::ContainerMemoryReader(std::string root) {
  const std::string r = StripSlashes(root);  // "" for "/".
  std::optional<Mount> v1_mount;
  std::optional<Mount> v2_mount;
  FindMounts(ReadSmallFile(r + "/proc/self/mountinfo").value_or(""), &v1_mount, &v2_mount);
  // Without mountinfo (or with it hiding the mounts): where systems mount them.
  if (!v1_mount.has_value() && IsDirectory(r + "/sys/fs/cgroup/memory")) {
    v1_mount = Mount{"/", "/sys/fs/cgroup/memory"};
  }
  if (!v2_mount.has_value()) {
    if (ReadSmallFile(r + "/sys/fs/cgroup/cgroup.controllers").has_value()) {
      v2_mount = Mount{"/", "/sys/fs/cgroup"};
    } else if (ReadSmallFile(r + "/sys/fs/cgroup/unified/cgroup.controllers").has_value()) {
      v2_mount = Mount{"/", "/sys/fs/cgroup/unified"};
    }
  }
  std::optional<std::string> v1_cgroup;
  std::optional<std::string> v2_cgroup;
  FindCgroups(ReadSmallFile(r + "/proc/self/cgroup").value_or(""), &v1_cgroup, &v2_cgroup);
  if (v1_mount.has_value()) v1_dirs_ = DirsOf(r, *v1_mount, v1_cgroup.value_or("/"));
  if (v2_mount.has_value()) v2_dirs_ = DirsOf(r, *v2_mount, v2_cgroup.value_or("/"));
}

ContainerMemory ContainerMemoryReader::Read() const {
  ContainerMemory m;
  for (size_t i = 0; i < v2_dirs_.size(); ++i) {
    const std::string& dir = v2_dirs_[i];
    const std::optional<uint64_t> limit = ReadLimit(dir + "/memory.max");
    if (i == 0 || limit.has_value()) {
      const uint64_t usage = WorkingSet(dir, "memory.current", "inactive_file", nullptr);
      if (i == 0) m.usage = usage;
      if (limit.has_value()) Limit(&m, dir, *limit, usage);
    }
  }
  for (size_t i = 0; i < v1_dirs_.size(); ++i) {
    const std::string& dir = v1_dirs_[i];
    const std::optional<uint64_t> limit = ReadLimit(dir + "/memory.limit_in_bytes");
    if (i != 0 && !limit.has_value()) continue;
    std::string stat;
    const uint64_t usage = WorkingSet(dir, "memory.usage_in_bytes", "total_inactive_file", &stat);
    if (i == 0) {
      if (m.usage == 0) m.usage = usage;
      // The effective limit, including ancestors this mount does not show (a container's).
      const std::optional<uint64_t> hierarchical = StatValue(stat, "hierarchical_memory_limit");
      if (hierarchical.has_value() && *hierarchical < kNoCgroupLimit) {
        Limit(&m, dir, *hierarchical, usage);
      }
    }
    if (limit.has_value()) Limit(&m, dir, *limit, usage);
  }
  return m;
}

const ContainerMemoryReader& ContainerMemoryReader::Process() {
  static const ContainerMemoryReader* const reader = new ContainerMemoryReader("/");
  return *reader;
}

}  // namespace tg
