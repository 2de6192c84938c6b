#include "backends/vulkan/vk_instance.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "backends/vulkan/vk_check.h"
#include "core/status_macros.h"

namespace tg::vulkan {
namespace {

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

bool EnvIsOne(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

bool HasInstanceExtension(const char* name) {
  uint32_t n = 0;
  if (vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkExtensionProperties> props(n);
  if (vkEnumerateInstanceExtensionProperties(nullptr, &n, props.data()) != VK_SUCCESS) return false;
  for (const auto& p : props) {
    if (std::strcmp(p.extensionName, name) == 0) return true;
  }
  return false;
}

bool HasLayer(const char* name) {
  uint32_t n = 0;
  if (vkEnumerateInstanceLayerProperties(&n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkLayerProperties> props(n);
  if (vkEnumerateInstanceLayerProperties(&n, props.data()) != VK_SUCCESS) return false;
  for (const auto& p : props) {
    if (std::strcmp(p.layerName, name) == 0) return true;
  }
  return false;
}

std::atomic<Instance*> g_strict_instance{nullptr};

// Under TG_VULKAN_VALIDATION=1 a validation error anywhere fails the process, so that a test
// run with the layer on cannot pass while the layer complains.
void ExitOnValidationErrors() {
  Instance* instance = g_strict_instance.load();
  if (instance == nullptr || instance->validation_errors() == 0) return;
  std::fprintf(stderr, "vulkan: %lld validation error(s) (TG_VULKAN_VALIDATION=1): failing\n",
               static_cast<long long>(instance->validation_errors()));
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace

namespace {

// Mesa's drivers leak a few hundred bytes at load (lavapipe, and the GPU drivers it probes),
// and once the loader unloads a driver LeakSanitizer cannot even name it. Sanitizer builds
// therefore keep an unused driver loaded, and suppress leaks allocated inside the drivers and
// their LLVM (see __lsan_default_suppressions below).
#if defined(TG_SANITIZE)
constexpr bool kUnloadUnusedDriver = false;
#else
constexpr bool kUnloadUnusedDriver = true;
#endif

absl::Mutex g_instance_mu(absl::kConstInit);
Instance* g_instance = nullptr;  // never destroyed while devices may use it.

}  // namespace

absl::StatusOr<Instance*> Instance::Get() {
  absl::MutexLock lock(&g_instance_mu);
  if (g_instance != nullptr) return g_instance;
  auto created = std::unique_ptr<Instance>(new Instance());
  if (absl::Status s = created->Init(); !s.ok()) {
    created->Destroy();
    return s;
  }
  g_instance = created.release();
  return g_instance;
}

void Instance::Release() {
  absl::MutexLock lock(&g_instance_mu);
  if (g_instance == nullptr || g_instance->strict_) return;  // strict: counted until exit.
  if (!kUnloadUnusedDriver) return;
  g_instance->Destroy();
  delete g_instance;
  g_instance = nullptr;
}

void Instance::Destroy() {
  if (messenger_ != VK_NULL_HANDLE) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy != nullptr) destroy(instance_, messenger_, nullptr);
    messenger_ = VK_NULL_HANDLE;
  }
  if (instance_ != VK_NULL_HANDLE) vkDestroyInstance(instance_, nullptr);
  instance_ = VK_NULL_HANDLE;
}

absl::Status Instance::Init() {
  strict_ = EnvIsOne("TG_VULKAN_VALIDATION");
  const char* env_layers = std::getenv("VK_INSTANCE_LAYERS");
  const bool layer_from_env = env_layers != nullptr && absl::StrContains(env_layers, "validation");
  std::vector<const char*> layers;
  if (strict_) {
    if (!HasLayer(kValidationLayer)) {
      return absl::FailedPreconditionError(
          absl::StrCat("TG_VULKAN_VALIDATION=1 but ", kValidationLayer,
                       " is not installed (apt-get install vulkan-validationlayers)"));
    }
    if (!layer_from_env) layers.push_back(kValidationLayer);
  }
  const bool messenger =
      (strict_ || layer_from_env) && HasInstanceExtension(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  std::vector<const char*> extensions;
  if (messenger) extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);

  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "tensorgrid";
  app.pEngineName = "tensorgrid";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.pApplicationInfo = &app;
  info.enabledLayerCount = static_cast<uint32_t>(layers.size());
  info.ppEnabledLayerNames = layers.data();
  info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  if (const VkResult r = vkCreateInstance(&info, nullptr, &instance_); r != VK_SUCCESS) {
    absl::Status s = VkError(r, "vkCreateInstance");
    return absl::UnavailableError(s.message());
  }
  if (messenger) {
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
    if (create == nullptr) return absl::InternalError("vkCreateDebugUtilsMessengerEXT missing");
    VkDebugUtilsMessengerCreateInfoEXT m{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    m.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                        VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    m.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                    VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                    VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    m.pfnUserCallback = &Instance::OnMessage;
    m.pUserData = this;
    TG_VK_RETURN_IF_ERROR(create(instance_, &m, nullptr, &messenger_));
  }
  if (strict_) {
    g_strict_instance.store(this);
    std::atexit(ExitOnValidationErrors);
  }
  return absl::OkStatus();
}

VKAPI_ATTR VkBool32 VKAPI_CALL Instance::OnMessage(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                   VkDebugUtilsMessageTypeFlagsEXT types,
                                                   const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                   void* user) {
  auto* self = static_cast<Instance*>(user);
  const bool error = (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) != 0;
  if (error) self->errors_.fetch_add(1);
  std::fprintf(stderr, "vulkan: validation %s: %s\n", error ? "error" : "warning",
               data != nullptr && data->pMessage != nullptr ? data->pMessage : "(no message)");
  return VK_FALSE;  // never abort the call that triggered the message.
}

}  // namespace tg::vulkan

#if defined(TG_SANITIZE)
// LeakSanitizer reads this at exit in every binary that links the Vulkan backend (tools,
// tests): memory the Vulkan loader, Mesa's drivers or their LLVM allocated and lost is
// theirs, not ours.
extern "C" const char* __lsan_default_suppressions() { return "leak:libvulkan\nleak:libLLVM\n"; }
#endif
