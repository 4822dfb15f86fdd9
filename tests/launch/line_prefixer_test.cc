#include "gradwire/launch/line_prefixer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gradwire::launch {
namespace {

// Feeds `chunks` one after the other and returns every record's bytes, progress records
// marked with a leading '~'.
std::vector<std::string> split(const std::vector<std::string>& chunks, bool terminal) {
  LinePrefixer prefixer("[3] ", terminal);
  std::vector<OutputRecord> records;
  for (const std::string& chunk : chunks) prefixer.feed(chunk, records);
  prefixer.finish(records);
  std::vector<std::string> out;
  for (const OutputRecord& record : records)
    out.push_back((record.is_progress ? "~" : "") + record.bytes);
  return out;
}

using Lines = std::vector<std::string>;

TEST(LinePrefixer, PrefixesEveryWholeLine) {
  EXPECT_EQ(split({"a\nbb\n\n"}, false), (Lines{"[3] a\n", "[3] bb\n", "[3] \n"}));
}

TEST(LinePrefixer, HoldsPartialLinesUntilTheirEnd) {
  EXPECT_EQ(split({"hel", "lo wo", "rld\nne", "xt\n"}, false),
            (Lines{"[3] hello world\n", "[3] next\n"}));
}

TEST(LinePrefixer, FlushesAnUnterminatedLastLine) {
  EXPECT_EQ(split({"done\nno newline"}, false), (Lines{"[3] done\n", "[3] no newline\n"}));
  EXPECT_EQ(split({}, false), Lines{});
}

TEST(LinePrefixer, KeepsCrLfEvenWhenSplitBetweenReads) {
  EXPECT_EQ(split({"a\r\nb\r", "\nc\r\n"}, false), (Lines{"[3] a\r\n", "[3] b\r\n", "[3] c\r\n"}));
}

TEST(LinePrefixer, DrawsProgressInPlaceOnATerminal) {
  EXPECT_EQ(split({"\r 10%\r 5", "0%\r100%\n"}, true),
            (Lines{"~\r\033[K[3]  10%", "~\r\033[K[3]  50%", "[3] 100%\n"}));
}

TEST(LinePrefixer, WritesProgressAsLinesElsewhere) {
  EXPECT_EQ(split({"\r 10%\r 50%\r100%\n"}, false),
            (Lines{"[3]  10%\n", "[3]  50%\n", "[3] 100%\n"}));
}

TEST(LinePrefixer, TrailingCarriageReturnAtEndOfStreamIsALine) {
  EXPECT_EQ(split({"50%\r"}, true), (Lines{"[3] 50%\n"}));
}

TEST(LinePrefixer, CutsOverlongLines) {
  std::string huge(LinePrefixer::kMaxLineBytes + 10, 'x');
  Lines lines = split({huge.substr(0, 1000), huge.substr(1000), "\n"}, false);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].size(), 4 + huge.size() + 1);
  EXPECT_EQ(lines[1], "[3] \n");
}

}  // namespace
}  // namespace gradwire::launch
