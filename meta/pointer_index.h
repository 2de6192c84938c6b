// PointerIndex: a reusable open-addressing map from an address to a small integer, for the
// partitioner's per-node source lookups (a decode step makes about a thousand). Reset()
// keeps the storage (absl::flat_hash_map frees large tables on clear()), so a replayed plan
// allocates nothing for it. Not thread-safe.
#ifndef TENSORGRID_META_POINTER_INDEX_H_
#define TENSORGRID_META_POINTER_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tg::meta {

class PointerIndex {
 public:
  // Forgets every key and makes room for up to n of them.
  void Reset(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    keys_.assign(cap, nullptr);
    values_.resize(cap);
    mask_ = cap - 1;
  }
  // `key` must not be null or present already.
  void Insert(const void* key, int32_t value) {
    size_t i = Hash(key) & mask_;
    while (keys_[i] != nullptr) i = (i + 1) & mask_;
    keys_[i] = key;
    values_[i] = value;
  }
  // The value of `key`, or -1.
  int32_t Find(const void* key) const {
    for (size_t i = Hash(key) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == key) return values_[i];
      if (keys_[i] == nullptr) return -1;
    }
  }

 private:
  static size_t Hash(const void* p) {
    // Tensors are a few hundred bytes apart: mix the bits (Fibonacci hashing).
    return static_cast<size_t>((reinterpret_cast<uintptr_t>(p) >> 4) * 0x9E3779B97F4A7C15ull >> 20);
  }

  std::vector<const void*> keys_;
  std::vector<int32_t> values_;
  size_t mask_ = 0;
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_POINTER_INDEX_H_
