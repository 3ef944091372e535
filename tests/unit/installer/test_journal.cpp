// The journal reader on what a kill, a torn write, a flipped bit or a newer cudafix leaves:
// what it keeps, what it cuts, and what it refuses to act on (installer/txn/journal.hpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "installer/txn/journal.hpp"
#include "resolver/base/diagnostic.hpp"
#include "tests/support/process.hpp"

namespace cudafix::installer::txn {
namespace {

using ::testing::HasSubstr;

const std::string k_begin =
    R"({"record":"begin","id":"20261203T101559.150-1-0","time":1764756959,"command":"remove alpha","root":"/v"})";
const std::string k_op1 = R"({"record":"op","n":0,"op":"move","from":"/v/a","to":"/v/.cudafix/tx/x/old/a"})";
const std::string k_op2 = R"({"record":"op","n":1,"op":"rmdir","path":"/v/lib","mode":493})";
const std::string k_intent_end = R"({"record":"intent_end","ops":2})";
const std::string k_commit = R"({"record":"commit"})";

// A journal file made of these lines, as transaction.cpp writes them; `tail` appended raw.
JournalRead read(const std::vector<std::string>& records, const std::string& tail = "") {
  test::TempDir t;
  std::string text;
  for (const auto& r : records) text += journal_line(r);
  test::write_file(t.path() + "/journal", text + tail);
  return read_journal(t.path() + "/journal");
}

TEST(Journal, AWholeJournalGivesItsCommandOpsAndState) {
  const auto j = read({k_begin, k_op1, k_op2, k_intent_end, k_commit});
  EXPECT_EQ(j.id, "20261203T101559.150-1-0");
  EXPECT_EQ(j.command, "remove alpha");
  ASSERT_EQ(j.ops.size(), 2u);
  EXPECT_EQ(j.ops[0].kind, OpKind::move);
  EXPECT_EQ(j.ops[0].from, "/v/a");
  EXPECT_EQ(j.ops[1].kind, OpKind::rmdir);
  EXPECT_EQ(j.ops[1].mode, 493u);
  EXPECT_EQ(j.state, TxState::committed);
  EXPECT_FALSE(j.torn);
  EXPECT_TRUE(j.unreadable.empty());
}

TEST(Journal, TheStepsAndFilesOfTheIntentReadBackAndAnOlderJournalHasNeither) {
  const auto j = read({k_begin, k_op1, k_op2, R"({"record":"intent_end","ops":2,"steps":1,"files":64})", k_commit});
  EXPECT_EQ(j.steps, std::optional<std::size_t>(1));
  EXPECT_EQ(j.files, std::optional<std::size_t>(64));
  EXPECT_TRUE(j.unreadable.empty());
  // Written before the intent said them: history says the ops alone, not a count it cannot know.
  const auto old = read({k_begin, k_op1, k_op2, k_intent_end, k_commit});
  EXPECT_FALSE(old.steps);
  EXPECT_FALSE(old.files);
  EXPECT_EQ(old.state, TxState::committed);
}

TEST(Journal, ALastLineWithoutItsNewlineIsATornTailAndIsCut) {
  // The commit record was being written when the process died: the transaction is not committed.
  std::string commit = journal_line(k_commit);
  commit.pop_back();
  const auto j = read({k_begin, k_op1, k_op2, k_intent_end}, commit);
  EXPECT_TRUE(j.torn);
  EXPECT_EQ(j.state, TxState::intended) << "a commit that never reached the disk whole does not count";
  EXPECT_EQ(j.ops.size(), 2u);
}

TEST(Journal, ARecordCutShortIsATornTail) {
  // Half of an op's line, newline and all: its checksum cannot hold.
  const std::string half = journal_line(k_op2).substr(0, 40) + "\n";
  const auto j = read({k_begin, k_op1}, half);
  EXPECT_TRUE(j.torn);
  EXPECT_EQ(j.ops.size(), 1u);
  EXPECT_EQ(j.state, TxState::open);
}

TEST(Journal, ALineWhoseChecksumFailsCutsItAndEverythingAfterIt) {
  std::string flipped = journal_line(k_op2);
  flipped[flipped.find("rmdir")] = 'R';  // one byte changed on disk
  const auto j = read({k_begin, k_op1}, flipped + journal_line(k_intent_end) + journal_line(k_commit));
  EXPECT_TRUE(j.torn);
  EXPECT_EQ(j.ops.size(), 1u);
  EXPECT_EQ(j.state, TxState::open) << "a commit after a damaged line is not believed";
}

TEST(Journal, ALineThatIsNotJsonIsATornTail) {
  const auto j = read({k_begin}, journal_line("not json at all"));
  EXPECT_TRUE(j.torn);
}

TEST(Journal, ARecordOfANewerFormatStopsTheReadingAndSaysWhichLine) {
  const auto j = read({k_begin, k_op1, R"({"record":"checkpoint","at":1})", k_op2, k_intent_end});
  EXPECT_THAT(j.unreadable, HasSubstr("line 3"));
  EXPECT_THAT(j.unreadable, HasSubstr("'checkpoint'"));
  EXPECT_EQ(j.ops.size(), 1u) << "nothing after it is taken";
  EXPECT_EQ(j.state, TxState::open);
  EXPECT_FALSE(j.torn) << "its checksum holds: it was written on purpose";
}

TEST(Journal, AnOpOfAKindThisVersionDoesNotKnowIsNotTakenForAMove) {
  const auto j = read({k_begin, R"({"record":"op","n":0,"op":"symlink","from":"/etc/passwd","to":"/v/x"})"});
  EXPECT_TRUE(j.ops.empty()) << "an unknown op is never carried out or undone as a rename";
  EXPECT_THAT(j.unreadable, HasSubstr("line 2"));
  EXPECT_THAT(j.unreadable, HasSubstr("'symlink'"));
}

TEST(Journal, AFieldOfTheWrongTypeIsUnreadableNotACrash) {
  const auto j = read({k_begin, R"({"record":"op","n":0,"op":"mkdir","path":"/v/d","mode":"rwx"})"});
  EXPECT_TRUE(j.ops.empty());
  EXPECT_THAT(j.unreadable, HasSubstr("line 2: a field of the wrong type"));
}

// A number past the field's range was cast by nlohmann (undefined behaviour, UBSan's report in
// fuzz_journal): it is a field of the wrong type, as a string there is.
TEST(Journal, ANumberThatIsNotAnIntegerIsAFieldOfTheWrongType) {
  auto j = read({k_begin, R"({"record":"op","n":0,"op":"mkdir","path":"/v/d","mode":1e300})"});
  EXPECT_TRUE(j.ops.empty());
  EXPECT_THAT(j.unreadable, HasSubstr("line 2: a field of the wrong type"));
  j = read({R"({"record":"begin","id":"x","time":-1e300})"});
  EXPECT_THAT(j.unreadable, HasSubstr("line 1: a field of the wrong type"));
}

// What a commit leaves is read back as written, and a rollback's commit names what it undoes:
// the mark a rollback needs is in its own commit, with no second write to forget.
TEST(Journal, LeftRecordsAndTheUndoesOfACommitReadBackAsWritten) {
  Left file;
  file.path = "/v/lib/x.so";
  file.type = LeftType::file;
  file.dev = 2049;
  file.ino = 1ULL << 40;
  file.size = 12;
  file.mtime_ns = 1764756959123456789;
  file.ctime_ns = 1764756959123456790;
  file.sha256 = "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU";
  Left gone;
  gone.path = "/v/a";
  const auto j = read({k_begin, k_op1, k_op2, k_intent_end, left_json(file), left_json(gone),
                       R"({"record":"commit","undoes":"20261203T101500.000-1-0"})"});
  EXPECT_EQ(j.state, TxState::committed);
  ASSERT_EQ(j.left.size(), 2u);
  EXPECT_EQ(j.left[0].path, file.path);
  EXPECT_EQ(j.left[0].type, LeftType::file);
  EXPECT_EQ(j.left[0].ino, file.ino);
  EXPECT_EQ(j.left[0].mtime_ns, file.mtime_ns);
  EXPECT_EQ(j.left[0].ctime_ns, file.ctime_ns);
  EXPECT_EQ(j.left[0].sha256, file.sha256);
  EXPECT_EQ(j.left[1].type, LeftType::none);
  EXPECT_EQ(j.undoes, "20261203T101500.000-1-0");
}

TEST(Journal, ALeftRecordOfAnUnknownTypeIsUnreadable) {
  const auto j = read({k_begin, k_intent_end, R"({"record":"left","path":"/v/a","type":"fifo"})", k_commit});
  EXPECT_THAT(j.unreadable, HasSubstr("line 3"));
  EXPECT_THAT(j.unreadable, HasSubstr("fifo"));
  EXPECT_NE(j.state, TxState::committed) << "reading stops at the record it cannot take";
}

// cudafix appends nothing after a final record but a legacy rolled_back_by: an `aborted` after a
// `commit` (which would let staging cleanup remove the backups) was written by someone else.
TEST(Journal, ARecordAfterTheFinalOneIsUnreadable) {
  const auto j = read({k_begin, k_op1, k_op2, k_intent_end, k_commit, R"({"record":"aborted","why":"x"})"});
  EXPECT_THAT(j.unreadable, HasSubstr("after the transaction's final one"));
  const auto legacy =
      read({k_begin, k_intent_end, k_commit, R"({"record":"rolled_back_by","id":"20261203T101600.000-1-0"})"});
  EXPECT_EQ(legacy.unreadable, "");
  EXPECT_EQ(legacy.rolled_back_by, "20261203T101600.000-1-0");
  const auto garbage = read({k_begin, k_intent_end, k_commit, R"({"record":"rolled_back_by","id":"<b>"})"});
  EXPECT_THAT(garbage.unreadable, HasSubstr("not a transaction id"));
}

TEST(Journal, AJournalWithoutItsBeginRecordIsAnError) {
  try {
    (void)read({k_op1});
    FAIL() << "read a journal with no begin record";
  } catch (const resolver::Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("no begin record"));
  }
}

}  // namespace
}  // namespace cudafix::installer::txn
