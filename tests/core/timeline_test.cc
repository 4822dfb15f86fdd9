// The timeline: spans from several threads, named threads, and valid trace-event JSON
// for one rank and for several.
#include "gradwire/core/timeline.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

namespace gradwire {
namespace {

class TimelineTest : public ::testing::Test {
 protected:
  void SetUp() override { Timeline::global().reset(); }
  void TearDown() override { Timeline::global().reset(); }
};

TEST_F(TimelineTest, RecordsNothingWhileOff) {
  { TimelineSpan span("forward", "compute"); }
  EXPECT_EQ(Timeline::global().event_count(), 0u);
}

TEST_F(TimelineTest, SpansOfEveryThreadBecomeTraceEvents) {
  Timeline& timeline = Timeline::global();
  timeline.enable(3);
  timeline.set_origin(Timeline::Clock::now());
  timeline.name_thread("training");
  {
    TimelineSpan span("backward", "compute");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::thread exchange([] {
    Timeline::global().name_thread("exchange");
    TimelineSpan span("communicate", "communicate");
    span.set_args(R"({"bucket":0,"fp32_bytes":1024})");
  });
  exchange.join();

  const auto trace =
      nlohmann::json::parse(Timeline::trace_json({timeline.events_json(), std::string()}));
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::map<std::string, nlohmann::json> spans, threads;
  for (const auto& e : trace["traceEvents"]) {
    EXPECT_EQ(e["pid"], 3);
    if (e["ph"] == "X") spans[e["name"]] = e;
    if (e["ph"] == "M" && e["name"] == "thread_name") threads[e["args"]["name"]] = e;
  }
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_GE(spans["backward"]["dur"].get<int64_t>(), 2000);
  EXPECT_GE(spans["backward"]["ts"].get<int64_t>(), 0);
  EXPECT_EQ(spans["communicate"]["args"]["bucket"], 0);
  EXPECT_EQ(spans["communicate"]["cat"], "communicate");
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(spans["backward"]["tid"], threads["training"]["tid"]);
  EXPECT_EQ(spans["communicate"]["tid"], threads["exchange"]["tid"]);
  EXPECT_NE(threads["training"]["tid"], threads["exchange"]["tid"]);
}

}  // namespace
}  // namespace gradwire
