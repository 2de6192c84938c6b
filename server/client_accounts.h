// ClientAccounts: what each client of an rpc-server holds across all its sessions, so that one
// client cannot take the whole server by opening several sessions, each within
// --session-mem-limit: its sessions together hold at most --client-mem-limit bytes, and it
// has at most --client-max-sessions open. A client is known by the name of its own token
// (--client-tokens), else by its IP address (AuthPolicy::ClientOf), so that two tenants of a
// server, or two hosts, each keep their share whatever the other does.
//
// ClientAccount: one client's counters. A session holds its client's account (a shared_ptr)
// from Open until it is destroyed; every byte the session charges (HandleTable, through
// MemoryReservation) is charged to the account too.
// Thread-safety: thread-safe. ClientAccount's byte count is an atomic; ClientAccounts' map is
// guarded by one mutex.
#ifndef TENSORGRID_SERVER_CLIENT_ACCOUNTS_H_
#define TENSORGRID_SERVER_CLIENT_ACCOUNTS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace tg::server {

class ClientAccounts;

// A session's handle on its client's counts (all the client's sessions share them).
class ClientAccount {
 public:
  ClientAccount(const ClientAccount&) = delete;
  ClientAccount& operator=(const ClientAccount&) = delete;
  // Counts the session this account was opened for (ClientAccounts::Open) closed.
  ~ClientAccount();

  // Adds `size` to what the client holds when it stays within --client-mem-limit (0 = no
  // limit); RESOURCE_EXHAUSTED naming the client, the limit, the bytes held and asked and the
  // flag otherwise, with nothing taken.
  absl::Status Take(uint64_t size);
  // Gives back bytes Take took.
  void Give(uint64_t size);

  const std::string& client() const { return client_; }
  uint64_t held() const;

 private:
  friend class ClientAccounts;
  // The client's counts, shared by the accounts of all its sessions.
  struct Shared {
    std::atomic<uint64_t> held{0};
    int sessions = 0;  // changed under ClientAccounts::mu_ only.
  };
  ClientAccount(std::string client, uint64_t mem_limit, ClientAccounts* owner,
                std::shared_ptr<Shared> shared)
      : client_(std::move(client)),
        mem_limit_(mem_limit),
        owner_(owner),
        shared_(std::move(shared)) {}

  const std::string client_;
  const uint64_t mem_limit_;
  ClientAccounts* const owner_;
  const std::shared_ptr<Shared> shared_;
};

class ClientAccounts {
 public:
  // `mem_limit`: bytes one client's sessions may hold together (0 = no limit);
  // `max_sessions`: sessions one client may have open (0 = no cap).
  ClientAccounts(uint64_t mem_limit, int max_sessions)
      : mem_limit_(mem_limit), max_sessions_(max_sessions) {}
  ClientAccounts(const ClientAccounts&) = delete;
  ClientAccounts& operator=(const ClientAccounts&) = delete;

  // An account for a new session of `client`: it shares the client's byte count with the
  // client's other sessions, and the session is counted until the account is destroyed.
  // RESOURCE_EXHAUSTED naming the client, its sessions and --client-max-sessions when it has
  // that many open. Must outlive the accounts it returns.
  absl::StatusOr<std::shared_ptr<ClientAccount>> Open(const std::string& client)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Clients with a session open (for tests and the log).
  size_t clients() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t mem_limit() const { return mem_limit_; }
  int max_sessions() const { return max_sessions_; }

 private:
  friend class ClientAccount;
  void Close(const std::string& client) ABSL_LOCKS_EXCLUDED(mu_);

  const uint64_t mem_limit_;
  const int max_sessions_;
  mutable absl::Mutex mu_;
  // A client's entry lives while it has a session open.
  absl::flat_hash_map<std::string, std::shared_ptr<ClientAccount::Shared>> open_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_CLIENT_ACCOUNTS_H_
