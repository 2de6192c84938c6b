// Early-return helpers for absl::Status / absl::StatusOr (the Abseil release the
// project builds against has no public ASSIGN_OR_RETURN).
#ifndef TENSORGRID_CORE_STATUS_MACROS_H_
#define TENSORGRID_CORE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"

#define TG_CONCAT_INNER(a, b) a##b
#define TG_CONCAT(a, b) TG_CONCAT_INNER(a, b)

// Returns the status of `expr` from the enclosing function when it is not OK.
#define TG_RETURN_IF_ERROR(expr)            \
  do {                                          \
    if (absl::Status _st = (expr); !_st.ok()) { \
      return _st;                               \
    }                                           \
  } while (0)

// `lhs = *expr` when expr (a StatusOr) is OK, else returns its status.
#define TG_ASSIGN_OR_RETURN(lhs, expr) \
  TG_ASSIGN_OR_RETURN_IMPL(TG_CONCAT(_status_or_, __LINE__), lhs, expr)
#define TG_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(*tmp)

#endif  // TENSORGRID_CORE_STATUS_MACROS_H_
