// --model-dir scanning and the names a client may give: symlinks out of the directory are
// not indexed, names that leave it are PERMISSION_DENIED without touching the file system.
#include "server/model_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/model_testing.h"

namespace tg::server {
namespace {

namespace fs = std::filesystem;

void Touch(const std::string& path) { std::ofstream(path) << "x"; }

TEST(ModelDirTest, ScanFindsGgufFilesInsideAndSkipsWhatLeadsOutside) {
  const std::string root = testing::FreshDir("model_dir_scan");
  const std::string dir = root + "/models", outside = root + "/outside";
  fs::create_directories(dir + "/sub");
  fs::create_directories(outside + "/deep");
  Touch(dir + "/a.gguf");
  Touch(dir + "/sub/b.gguf");
  Touch(dir + "/notes.txt");
  Touch(outside + "/secret.gguf");
  Touch(outside + "/deep/x.gguf");
  fs::create_symlink(dir + "/a.gguf", dir + "/alias.gguf");          // inside: the same file.
  fs::create_symlink(outside + "/secret.gguf", dir + "/link.gguf");  // points out.
  fs::create_directory_symlink(outside + "/deep", dir + "/deep");    // not followed.
  absl::StatusOr<ModelDir> d = OpenModelDir(dir);
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<std::string> names;
  for (const ModelDirFile& f : ScanModelDirs({*d})) {
    names.push_back(f.name);
    EXPECT_TRUE(IsInside(f.path, d->real)) << f.path;
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a.gguf", "sub/b.gguf"}));
}

TEST(ModelDirTest, OpenModelDirNamesWhatIsWrong) {
  const std::string root = testing::FreshDir("model_dir_open");
  absl::StatusOr<ModelDir> missing = OpenModelDir(root + "/nope");
  EXPECT_TRUE(absl::IsInvalidArgument(missing.status()));
  EXPECT_NE(missing.status().message().find(root + "/nope"), std::string::npos) << missing.status();
  Touch(root + "/file");
  absl::StatusOr<ModelDir> file = OpenModelDir(root + "/file");
  EXPECT_NE(file.status().message().find("is not a directory"), std::string::npos) << file.status();
  if (geteuid() != 0) {  // root reads any directory.
    fs::create_directory(root + "/locked");
    chmod((root + "/locked").c_str(), 0);
    absl::StatusOr<ModelDir> locked = OpenModelDir(root + "/locked");
    EXPECT_NE(locked.status().message().find("cannot list it"), std::string::npos)
        << locked.status();
    chmod((root + "/locked").c_str(), 0755);
  }
}

TEST(ModelDirTest, ClientNamesStayInsideTheDirectory) {
  const std::string root = testing::FreshDir("model_dir_names");
  fs::create_directories(root + "/m");
  absl::StatusOr<ModelDir> d = OpenModelDir(root + "/m/");
  ASSERT_TRUE(d.ok()) << d.status();
  const std::vector<ModelDir> dirs = {*d};
  auto ok = [&](const std::string& name, const std::string& want) {
    absl::StatusOr<std::string> got = CheckClientName(name, dirs);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status();
    EXPECT_EQ(*got, want) << name;
  };
  ok("x.gguf", "x.gguf");
  ok("sub/x.gguf", "sub/x.gguf");
  ok("sub/../x.gguf", "x.gguf");
  ok(d->real + "/x.gguf", "x.gguf");
  ok(root + "/m/sub/x.gguf", "sub/x.gguf");
  for (const std::string& bad : std::vector<std::string>{
           "../x.gguf", "sub/../../x.gguf", "/etc/passwd", ".", "..", root + "/x.gguf",
           root + "/m/../x.gguf", d->real + "/../m2/x.gguf"}) {
    absl::StatusOr<std::string> got = CheckClientName(bad, dirs);
    EXPECT_TRUE(absl::IsPermissionDenied(got.status())) << bad << ": " << got.status();
  }
}

}  // namespace
}  // namespace tg::server
