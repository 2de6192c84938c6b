// Names of an enum's values, kept in one table per enum so that a value's name, a name's
// value and the list of names in an error message all come from the same place:
//
//   constexpr EnumName<SplitMode> kSplitModes[] = {
//       {SplitMode::kNone, "none"}, {SplitMode::kLayer, "layer"}, {SplitMode::kTensor, "tensor"}};
//   NameOf(kSplitModes, mode)   -> "layer"
//   ValueOf(kSplitModes, "tensor") -> SplitMode::kTensor
//   NameList(kSplitModes)       -> "none, layer, tensor"
//   NameList(kSplitModes, " ")  -> "none layer tensor"
//
// A linear scan: the tables are a handful of entries. Pure functions; thread-safe.
#ifndef TENSORGRID_CORE_ENUM_NAMES_H_
#define TENSORGRID_CORE_ENUM_NAMES_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace tg {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `value` in `table`; `fallback` when the table has no entry for it.
template <typename E, size_t N>
constexpr const char* NameOf(const EnumName<E> (&table)[N], E value, const char* fallback = "?") {
  for (const EnumName<E>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return fallback;
}

// The value that `name` names in `table`, or nullopt (names compare exactly).
template <typename E, size_t N>
constexpr std::optional<E> ValueOf(const EnumName<E> (&table)[N], absl::string_view name) {
  for (const EnumName<E>& entry : table) {
    if (name == entry.name) return entry.value;
  }
  return std::nullopt;
}

// The names in table order, joined by `separator` (what an "unknown name" error lists).
template <typename E, size_t N>
std::string NameList(const EnumName<E> (&table)[N], absl::string_view separator = ", ") {
  std::string list;
  for (const EnumName<E>& entry : table) {
    if (!list.empty()) list.append(separator.data(), separator.size());
    list += entry.name;
  }
  return list;
}

}  // namespace tg

#endif  // TENSORGRID_CORE_ENUM_NAMES_H_
