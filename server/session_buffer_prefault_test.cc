// Tests of BackgroundPrefault (server/session_buffer_prefault.h) against the kernel's own
// account of which pages are mapped in (mincore), on real anonymous memory.
#include "server/session_buffer_prefault.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace tg::server {
namespace {

// Fresh anonymous memory, unmapped at scope exit.
class Mapping {
 public:
  explicit Mapping(size_t size) : size_(size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  ~Mapping() {
    if (data_ != nullptr) munmap(data_, size_);
  }
  uint8_t* data() const { return data_; }

  // Pages of [offset, offset + n) that the kernel has mapped in.
  size_t ResidentPages(size_t offset, size_t n) const {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> in((n + page - 1) / page);
    if (mincore(data_ + offset, n, in.data()) != 0) return 0;
    size_t count = 0;
    for (unsigned char c : in) count += c & 1;
    return count;
  }

 private:
  size_t size_;
  uint8_t* data_;
};

TEST(BackgroundPrefaultTest, MapsEveryPageInAndChangesNoByte) {
  const size_t size = BackgroundPrefault::kMinBytes + (3 << 20);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  Mapping m(size);
  ASSERT_NE(m.data(), nullptr);
  // Bytes already written (an upload racing the prefault) must survive it.
  const char kMark[] = "written before the prefault";
  std::memcpy(m.data() + 5 * page + 17, kMark, sizeof(kMark));
  std::memcpy(m.data() + size - sizeof(kMark), kMark, sizeof(kMark));
  ASSERT_LT(m.ResidentPages(0, size), size / page / 2);

  BackgroundPrefault prefault(m.data(), size);
  prefault.Wait();
  EXPECT_EQ(m.ResidentPages(0, size), size / page);
  EXPECT_EQ(prefault.done_bytes(), size);
  EXPECT_EQ(std::memcmp(m.data() + 5 * page + 17, kMark, sizeof(kMark)), 0);
  EXPECT_EQ(std::memcmp(m.data() + size - sizeof(kMark), kMark, sizeof(kMark)), 0);
  EXPECT_EQ(m.data()[page * 100], 0);  // a page mapped in by the prefault reads as zero.
}

TEST(BackgroundPrefaultTest, OnlyWholePagesInsideTheRange) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t size = BackgroundPrefault::kMinBytes + 4 * page;
  Mapping m(size);
  ASSERT_NE(m.data(), nullptr);
  // A range that starts and ends mid-page: the partial pages at either end are not its own.
  BackgroundPrefault prefault(m.data() + page + 100, size - 3 * page);
  prefault.Wait();
  EXPECT_EQ(m.ResidentPages(0, 2 * page), 0u);
  EXPECT_EQ(m.ResidentPages(size - 2 * page, 2 * page), 0u);
  EXPECT_EQ(m.ResidentPages(2 * page, size - 4 * page), size / page - 4);
}

TEST(BackgroundPrefaultTest, SmallBuffersAreLeftToFaultInOnFirstTouch) {
  const size_t size = BackgroundPrefault::kMinBytes - (1 << 20);
  Mapping m(size);
  ASSERT_NE(m.data(), nullptr);
  BackgroundPrefault prefault(m.data(), size);
  prefault.Wait();
  EXPECT_EQ(prefault.done_bytes(), 0u);
  EXPECT_EQ(m.ResidentPages(0, size), 0u);
}

}  // namespace
}  // namespace tg::server
