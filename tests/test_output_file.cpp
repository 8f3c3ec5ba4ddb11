// The one writer of every output (campaign/output_file.h) and the campaign directory lock
// (campaign/dir_lock.h), issue 26 items 1-3 and 6: a write never replaces a device node, FIFO,
// directory or symbolic link, never follows a name planted for its temporary file, reports each
// failed write of a batch and still writes the rest; a directory another process's campaign
// holds is refused, and one this process holds is shared. Device nodes are made with mknod in
// a private directory (skipped, visibly, without the privilege), never taken from /dev.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "campaign/dir_lock.h"
#include "campaign/output_file.h"
#include "harness/errors.h"
#include "harness/json_input.h"

namespace attnfuzz {
namespace {
namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void spit(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

// Temporary files a write left behind in `dir`.
int leftovers(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().find(".tmp.") != std::string::npos;
  return n;
}

class Scratch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("attnfuzz-output-" + std::to_string(::getpid()) + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // The message of the OutputError the write throws, or "" when it does not throw.
  static std::string refusal(const fs::path& p) {
    try {
      write_file_atomic(p.string(), "new\n");
    } catch (const OutputError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(Scratch, WritesANewNameAndReplacesARegularFileWhole) {
  write_file_atomic((dir_ / "a.json").string(), "one\n");
  EXPECT_EQ(slurp(dir_ / "a.json"), "one\n");
  write_file_atomic((dir_ / "a.json").string(), "two\n");
  EXPECT_EQ(slurp(dir_ / "a.json"), "two\n");
  EXPECT_EQ(leftovers(dir_), 0);
  EXPECT_FALSE(unwritable_output((dir_ / "a.json").string()));
  EXPECT_FALSE(unwritable_output((dir_ / "new.json").string()));
}

TEST_F(Scratch, RefusesADeviceNode) {
  const fs::path node = dir_ / "node";
  // A private character device with the numbers of /dev/null: nothing is ever written to it.
  if (::mknod(node.c_str(), S_IFCHR | 0600, makedev(1, 3)) != 0) GTEST_SKIP() << "mknod needs root here: " << std::strerror(errno);
  const std::string why = refusal(node);
  EXPECT_NE(why.find("device node"), std::string::npos) << why;
  EXPECT_NE(why.find(node.string()), std::string::npos) << why;
  struct stat st {};
  ASSERT_EQ(::lstat(node.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device node was replaced";
  ASSERT_TRUE(unwritable_output(node.string()));
  EXPECT_NE(unwritable_output(node.string())->find("device node"), std::string::npos);
  EXPECT_EQ(leftovers(dir_), 0);
}

TEST_F(Scratch, RefusesAFifoAndADirectory) {
  const fs::path fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(refusal(fifo).find("FIFO"), std::string::npos);
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));
  fs::create_directory(dir_ / "sub");
  EXPECT_NE(refusal(dir_ / "sub").find("is a directory"), std::string::npos);
  EXPECT_TRUE(fs::is_directory(dir_ / "sub"));
  EXPECT_EQ(leftovers(dir_), 0);
}

TEST_F(Scratch, RefusesASymbolicLinkAndLeavesWhatItNamesAlone) {
  fs::create_directory(dir_ / "outside");
  spit(dir_ / "outside" / "precious", "keep\n");
  fs::create_directory(dir_ / "out");
  fs::create_symlink(dir_ / "outside" / "precious", dir_ / "out" / "junit.xml");
  EXPECT_NE(refusal(dir_ / "out" / "junit.xml").find("symbolic link"), std::string::npos);
  EXPECT_EQ(slurp(dir_ / "outside" / "precious"), "keep\n");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir_ / "out" / "junit.xml")));
  EXPECT_TRUE(unwritable_output((dir_ / "out" / "junit.xml").string()));
}

// A symbolic link planted at PATH.tmp.<pid> (a temporary name an attacker can predict) or at
// the next names after it must not redirect the write to a file outside the directory.
TEST_F(Scratch, APlantedTemporaryNameIsNeverFollowed) {
  fs::create_directory(dir_ / "outside");
  spit(dir_ / "outside" / "precious", "keep\n");
  fs::create_directory(dir_ / "rec");
  const fs::path target = dir_ / "rec" / "finding.json";
  fs::create_symlink(dir_ / "outside" / "precious", target.string() + ".tmp." + std::to_string(::getpid()));
  fs::create_symlink(dir_ / "outside" / "precious", target.string() + ".tmp." + std::to_string(::getpid()) + ".0");
  write_file_atomic(target.string(), "{\"reproducer\": 1}\n");
  EXPECT_EQ(slurp(dir_ / "outside" / "precious"), "keep\n");
  EXPECT_EQ(slurp(target), "{\"reproducer\": 1}\n");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(target)));
}

TEST_F(Scratch, TheTemporaryFileIsCreatedInTheTargetsOwnDirectory) {
  // A directory that cannot be written: the temporary file cannot be made there, and none is
  // made anywhere else (the current directory, say) instead. Root ignores the mode bits.
  if (::geteuid() == 0) {
    fs::create_directory(dir_ / "gone");
    fs::remove(dir_ / "gone");
    EXPECT_NE(refusal(dir_ / "gone" / "x.json").find("temporary file"), std::string::npos);
  } else {
    fs::create_directory(dir_ / "ro");
    fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_NE(refusal(dir_ / "ro" / "x.json").find("temporary file"), std::string::npos);
    fs::permissions(dir_ / "ro", fs::perms::owner_all);
  }
  EXPECT_EQ(leftovers(dir_), 0);
  EXPECT_EQ(leftovers(fs::current_path()), 0);
}

TEST_F(Scratch, ABatchReportsEveryFailedWriteAndWritesTheRest) {
  fs::create_directory(dir_ / "b.json");  // the second name is taken by a directory
  const OutputResult r = write_files_atomic({{(dir_ / "a.json").string(), "a\n"},
                                             {(dir_ / "b.json").string(), "b\n"},
                                             {(dir_ / "missing" / "c.json").string(), "c\n"},
                                             {(dir_ / "d.json").string(), "d\n"}});
  ASSERT_EQ(r.written.size(), 2u);
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_NE(r.errors[0].find("b.json"), std::string::npos);
  EXPECT_NE(r.errors[1].find("c.json"), std::string::npos);
  EXPECT_EQ(slurp(dir_ / "a.json"), "a\n");
  EXPECT_EQ(slurp(dir_ / "d.json"), "d\n");
}

TEST_F(Scratch, TheLockIsSharedWithinTheProcessAndRefusedToAnother) {
  auto child_can_lock = [&] {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        const DirLock l(dir_.string());
        ::_exit(0);
      } catch (const DirLockError& e) {
        ::_exit(std::string(e.what()).find("in use") != std::string::npos ? 1 : 2);
      }
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  {
    const DirLock first(dir_.string());
    {
      const DirLock again(dir_.string());  // this process's own campaign inside its check
    }
    EXPECT_EQ(child_can_lock(), 1) << "another process took a lock this process holds";
  }
  EXPECT_EQ(child_can_lock(), 0) << "the lock outlived its last holder";
}

TEST_F(Scratch, ALockFilePlantedAsASymbolicLinkIsNotFollowed) {
  fs::create_directory(dir_ / "camp");
  fs::create_symlink(dir_ / "elsewhere", dir_ / "camp" / "lock");
  EXPECT_THROW(DirLock((dir_ / "camp").string()), DirLockError);
  EXPECT_FALSE(fs::exists(dir_ / "elsewhere")) << "the link was followed and its target created";
}

TEST_F(Scratch, AFileInsideACampaignDirectoryNamesTheCampaign) {
  fs::create_directories(dir_ / "camp" / "findings");
  spit(dir_ / "camp" / "state.json", "{}");
  EXPECT_EQ(campaign_directory_of((dir_ / "camp" / "findings" / "x.min.json").string()), (dir_ / "camp").string());
  EXPECT_EQ(campaign_directory_of((dir_ / "camp" / "x.json").string()), (dir_ / "camp").string());
  EXPECT_FALSE(campaign_directory_of((dir_ / "elsewhere.json").string()));
}

TEST(MessageSafe, EscapesControlCharactersAndInvalidUtf8AndCuts) {
  EXPECT_EQ(message_safe("a\x1b[31mb\nc"), "a\\x1b[31mb\\x0ac");
  EXPECT_EQ(message_safe("caf\xc3\xa9"), "caf\xc3\xa9");       // valid UTF-8 is kept
  EXPECT_EQ(message_safe("x\xff\xc3(y"), "x\\xff\\xc3(y");     // a stray byte, a cut sequence
  EXPECT_EQ(message_safe("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a UTF-16 surrogate
  const std::string cut = message_safe(std::string(6000, 'p'));
  EXPECT_LT(cut.size(), 260u);
  EXPECT_NE(cut.find("(6000 bytes)"), std::string::npos);
}

TEST(CountsReadBack, NegativeFractionalAndOverflowingCountsAreRefused) {
  const auto j = nlohmann::json::parse(R"({"next_k": -5, "a": 1.5, "b": "7", "ok": 18446744073709551615})");
  EXPECT_THROW(count_at(j, "next_k", ""), std::invalid_argument);
  EXPECT_THROW(count_at(j, "a", "coverage"), std::invalid_argument);
  EXPECT_THROW(count_at(j, "b", "coverage"), std::invalid_argument);
  EXPECT_EQ(count_at(j, "ok", ""), UINT64_MAX);
  EXPECT_EQ(count_at(j, "absent", "", 3), 3u);
  try {
    count_at(j, "next_k", "");
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("next_k"), std::string::npos);
  }
  EXPECT_THROW(checked_sum(UINT64_MAX, 30, "cases"), std::overflow_error);
  EXPECT_EQ(checked_sum(UINT64_MAX - 30, 30, "cases"), UINT64_MAX);
}

TEST(StrictJson, ANulByteIsRefusedNotTheEndOfTheText) {
  const std::string text = std::string("{\"seed\": 1}") + '\0' + "{\"seed\": 2, \"junk\": [";
  EXPECT_THROW(parse_strict_json(text), CaseError);
}

}  // namespace
}  // namespace attnfuzz
