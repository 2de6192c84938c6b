#include "client/client_metrics.h"

namespace tg::rpc {

ClientMetrics& ClientMetrics::Get() {
  static ClientMetrics* metrics = new ClientMetrics();  // never destroyed: read at exit.
  return *metrics;
}

}  // namespace tg::rpc
