#include "backends/vulkan/vk_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "absl/synchronization/mutex.h"
#include "backends/vulkan/vk_device.h"
#include "core/status_macros.h"

namespace tg::vulkan {
namespace {

struct Total {
  int64_t calls = 0;
  double us = 0;
};

absl::Mutex g_mu(absl::kConstInit);
std::map<std::string, Total>* g_totals = nullptr;  // per kernel variant, whole process.

void PrintTotals() {
  absl::MutexLock lock(&g_mu);
  if (g_totals == nullptr) return;
  std::vector<std::pair<std::string, Total>> rows(g_totals->begin(), g_totals->end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.us > b.second.us; });
  double all = 0;
  for (const auto& r : rows) all += r.second.us;
  std::fprintf(stderr, "vulkan profile: %.1f ms in kernels\n", all / 1000);
  for (const auto& [label, t] : rows) {
    std::fprintf(stderr, "  %-28s %8lld calls %10.1f us %5.1f%% %8.2f us/call\n", label.c_str(),
                 static_cast<long long>(t.calls), t.us, 100 * t.us / std::max(all, 1e-9),
                 t.us / static_cast<double>(std::max<int64_t>(t.calls, 1)));
  }
}

}  // namespace

std::unique_ptr<Profiler> Profiler::CreateIfEnabled(VulkanDevice* device) {
  const char* env = std::getenv("TG_VULKAN_PROFILE");
  if (env == nullptr || std::strcmp(env, "1") != 0) return nullptr;
  std::unique_ptr<Profiler> p(new Profiler(device));
  VkQueryPoolCreateInfo info{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  info.queryType = VK_QUERY_TYPE_TIMESTAMP;
  info.queryCount = kMaxQueries;
  if (vkCreateQueryPool(device->vk(), &info, nullptr, &p->pool_) != VK_SUCCESS) return nullptr;
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(device->info().handle, &props);
  p->period_ns_ = props.limits.timestampPeriod;
  absl::MutexLock lock(&g_mu);
  if (g_totals == nullptr) {
    g_totals = new std::map<std::string, Total>();  // lives until exit, printed then.
    std::atexit(PrintTotals);
  }
  return p;
}

Profiler::~Profiler() {
  if (pool_ != VK_NULL_HANDLE) vkDestroyQueryPool(device_->vk(), pool_, nullptr);
}

void Profiler::Begin(VkCommandBuffer cb) {
  vkCmdResetQueryPool(cb, pool_, 0, kMaxQueries);
  used_ = 0;
  labels_.clear();
}

void Profiler::Before(VkCommandBuffer cb, std::string label) {
  if (used_ + 2 > kMaxQueries) return;
  vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, pool_, used_);
  labels_.push_back(std::move(label));
}

void Profiler::After(VkCommandBuffer cb) {
  if (used_ + 2 > kMaxQueries) return;
  vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, used_ + 1);
  used_ += 2;
}

absl::Status Profiler::Collect() {
  if (used_ == 0) return absl::OkStatus();
  std::vector<uint64_t> ticks(used_);
  TG_RETURN_IF_ERROR(device_->Check(
      vkGetQueryPoolResults(device_->vk(), pool_, 0, used_, ticks.size() * sizeof(uint64_t),
                            ticks.data(), sizeof(uint64_t),
                            VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
      "vkGetQueryPoolResults"));
  absl::MutexLock lock(&g_mu);
  for (uint32_t i = 0; i + 1 < used_; i += 2) {
    Total& t = (*g_totals)[labels_[i / 2]];
    ++t.calls;
    t.us += static_cast<double>(ticks[i + 1] - ticks[i]) * period_ns_ / 1000.0;
  }
  used_ = 0;
  return absl::OkStatus();
}

}  // namespace tg::vulkan
