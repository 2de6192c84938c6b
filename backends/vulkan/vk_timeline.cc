#include "backends/vulkan/vk_timeline.h"

#include "absl/strings/str_cat.h"
#include "backends/vulkan/vk_check.h"
#include "backends/vulkan/vk_device.h"
#include "core/status_macros.h"

namespace tg::vulkan {
namespace {

// A host wait gives up after this long: a kernel that never ends (a driver hang) becomes an
// error instead of a process stuck for ever.
constexpr uint64_t kWaitTimeoutNs = uint64_t{300} * 1000 * 1000 * 1000;

}  // namespace

absl::StatusOr<std::shared_ptr<Timeline>> Timeline::Create(VulkanDevice* device) {
  std::shared_ptr<Timeline> t(new Timeline(device));
  VkSemaphoreTypeCreateInfo type{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
  type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  type.initialValue = 0;
  VkSemaphoreCreateInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
  info.pNext = &type;
  TG_RETURN_IF_ERROR(device->Check(vkCreateSemaphore(device->vk(), &info, nullptr, &t->semaphore_),
                                   "vkCreateSemaphore"));
  return t;
}

Timeline::~Timeline() {
  if (semaphore_ != VK_NULL_HANDLE) vkDestroySemaphore(device_->vk(), semaphore_, nullptr);
}

uint64_t Timeline::last_submitted() const {
  absl::MutexLock lock(&mu_);
  return submitted_;
}

uint64_t Timeline::retired() const {
  absl::MutexLock lock(&mu_);
  return retired_;
}

absl::StatusOr<uint64_t> Timeline::Submit(VkCommandBuffer cb, absl::Span<const SemaphoreWait> waits,
                                          Completion done) {
  absl::MutexLock lock(&mu_);
  const uint64_t value = submitted_ + 1;
  std::vector<VkSemaphore> wait_semaphores;
  std::vector<uint64_t> wait_values;
  std::vector<VkPipelineStageFlags> wait_stages;
  for (const SemaphoreWait& w : waits) {
    wait_semaphores.push_back(w.semaphore);
    wait_values.push_back(w.value);
    wait_stages.push_back(VK_PIPELINE_STAGE_ALL_COMMANDS_BIT);
  }
  VkTimelineSemaphoreSubmitInfo values{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
  values.waitSemaphoreValueCount = static_cast<uint32_t>(wait_values.size());
  values.pWaitSemaphoreValues = wait_values.data();
  values.signalSemaphoreValueCount = 1;
  values.pSignalSemaphoreValues = &value;
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.pNext = &values;
  submit.waitSemaphoreCount = static_cast<uint32_t>(wait_semaphores.size());
  submit.pWaitSemaphores = wait_semaphores.data();
  submit.pWaitDstStageMask = wait_stages.data();
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &cb;
  submit.signalSemaphoreCount = 1;
  submit.pSignalSemaphores = &semaphore_;
  TG_RETURN_IF_ERROR(device_->QueueSubmit(submit));
  submitted_ = value;
  pending_.push_back({value, cb, std::move(done)});
  return value;
}

void Timeline::RetireLocked(uint64_t done) {
  while (!pending_.empty() && pending_.front().value <= done) {
    Pending p = std::move(pending_.front());
    pending_.pop_front();
    if (p.done) {
      absl::Status s = p.done();
      if (!s.ok() && error_.ok()) error_ = std::move(s);
    }
    free_.push_back(p.cb);
    retired_ = p.value;
  }
}

absl::Status Timeline::Poll() {
  absl::MutexLock lock(&mu_);
  if (pending_.empty()) return absl::OkStatus();
  uint64_t value = 0;
  TG_RETURN_IF_ERROR(device_->Check(vkGetSemaphoreCounterValue(device_->vk(), semaphore_, &value),
                                    "vkGetSemaphoreCounterValue"));
  RetireLocked(value);
  return absl::OkStatus();
}

absl::Status Timeline::Wait(uint64_t value, bool take_error) {
  absl::MutexLock lock(&mu_);
  if (value > submitted_) {
    return absl::InternalError(absl::StrCat("Vulkan: waiting for submission ", value,
                                            " of a stream that submitted ", submitted_));
  }
  if (retired_ < value) {
    TG_RETURN_IF_ERROR(device_->CheckLost());
    VkSemaphoreWaitInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
    info.semaphoreCount = 1;
    info.pSemaphores = &semaphore_;
    info.pValues = &value;
    const VkResult r = vkWaitSemaphores(device_->vk(), &info, kWaitTimeoutNs);
    if (r == VK_TIMEOUT) {
      return absl::DeadlineExceededError(absl::StrCat(
          device_->name(), ": work did not finish within ", kWaitTimeoutNs / 1000000000, " s"));
    }
    TG_RETURN_IF_ERROR(device_->Check(r, "vkWaitSemaphores"));
    RetireLocked(value);
  }
  if (!take_error) return absl::OkStatus();
  absl::Status error = std::move(error_);
  error_ = absl::OkStatus();
  return error;
}

std::vector<VkCommandBuffer> Timeline::TakeRetiredCommandBuffers() {
  absl::MutexLock lock(&mu_);
  std::vector<VkCommandBuffer> out;
  out.swap(free_);
  return out;
}

}  // namespace tg::vulkan
