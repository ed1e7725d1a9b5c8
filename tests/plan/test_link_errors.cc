// The shared object's link step of compile_program: each failure of the system C compiler
// gives a UserError saying what went wrong, and no temporary file stays behind.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "compiler/pipeline.h"
#include "runtime/base/error.h"

namespace fs = std::filesystem;
using namespace modelc;

namespace {

// The shared object's link step: no cc, a failing cc (its output in the message), a cc
// that writes nothing, no temporary directory; the temporary files go in every case.
class LinkErrors : public testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "modelc-link-XXXXXX").string();
    dir_ = mkdtemp(t.data());
    fs::create_directories(dir_ / "bin");
    fs::create_directories(dir_ / "tmp");
    model_ = (dir_ / "m.model").string();
    std::ofstream(model_) << "model m(B) {\n  input x: f32[B, 4]\n  loss = mean(relu(x))\n  output loss\n}\n";
    saved_path_ = getenv("PATH") ? getenv("PATH") : "";
    saved_tmp_ = getenv("TMPDIR") ? getenv("TMPDIR") : "";
    setenv("TMPDIR", (dir_ / "tmp").c_str(), 1);
  }
  void TearDown() override {
    setenv("PATH", saved_path_.c_str(), 1);
    if (saved_tmp_.empty()) unsetenv("TMPDIR");
    else setenv("TMPDIR", saved_tmp_.c_str(), 1);
    fs::remove_all(dir_);
  }
  void fake_cc(const std::string& script) const {
    const fs::path cc = dir_ / "bin" / "cc";
    std::ofstream(cc) << "#!/bin/sh\n" << script << "\n";
    fs::permissions(cc, fs::perms::owner_all);
    setenv("PATH", (dir_ / "bin").c_str(), 1);
  }
  // compile_program with a shared object fails with a UserError containing `want`, and the
  // temporary directory is empty afterwards.
  void expect_link_error(const std::string& want) const {
    Compilation c(CompileOptions{});
    ProgramOptions po;
    std::string so;
    po.shared_object = &so;
    try {
      compile_program(c, model_, po);
      ADD_FAILURE() << "linked without a working cc";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    if (fs::exists(dir_ / "tmp")) {
      EXPECT_TRUE(fs::is_empty(dir_ / "tmp")) << "temporary files left behind";
    }
  }
  fs::path dir_;
  std::string model_, saved_path_, saved_tmp_;
};

TEST_F(LinkErrors, NoCcOnPath) {
  setenv("PATH", (dir_ / "bin").c_str(), 1);
  expect_link_error("no 'cc' on PATH");
}

TEST_F(LinkErrors, CcFails) {
  fake_cc("echo 'ld: cannot find -lsomething' >&2\nexit 3");
  expect_link_error("exited with status 3:\nld: cannot find -lsomething");
}

TEST_F(LinkErrors, CcWritesNothing) {
  fake_cc("exit 0");
  expect_link_error("wrote no output");
}

TEST_F(LinkErrors, CcKilled) {
  fake_cc("kill -9 $$");
  expect_link_error("was killed by signal 9");
}

TEST_F(LinkErrors, NoTemporaryDirectory) {
  fs::remove_all(dir_ / "tmp");
  setenv("TMPDIR", (dir_ / "tmp").c_str(), 1);
  expect_link_error("cannot create a temporary directory");
}

TEST_F(LinkErrors, RealCcLeavesNothingBehind) {
  Compilation c(CompileOptions{});
  ProgramOptions po;
  std::string so;
  po.shared_object = &so;
  ASSERT_TRUE(compile_program(c, model_, po));
  EXPECT_EQ(so.substr(0, 4), "\x7f" "ELF");
  EXPECT_TRUE(fs::is_empty(dir_ / "tmp"));
}

}  // namespace
