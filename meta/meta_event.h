// MetaEvent: an event of a meta device, one event per device. Recorded on a MetaStream it
// marks every device's stream at that point; it has happened when all of them have.
// Not thread-safe: recorded and waited for by the thread that owns the stream.
#ifndef TENSORGRID_META_META_EVENT_H_
#define TENSORGRID_META_META_EVENT_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/backend.h"

namespace tg::meta {

class MetaEvent : public Event {
 public:
  explicit MetaEvent(std::vector<std::unique_ptr<Event>> events) : events_(std::move(events)) {}

  absl::Status Synchronize() override {
    absl::Status status;
    for (const std::unique_ptr<Event>& e : events_) status.Update(e->Synchronize());
    return status;
  }
  Event* device_event(int d) const { return events_[d].get(); }

 private:
  std::vector<std::unique_ptr<Event>> events_;  // one per device, in device order.
};

}  // namespace tg::meta

#endif  // TENSORGRID_META_META_EVENT_H_
