// The --model-dir index on real files: lookups by identity and name, pieces read back equal
// to the file's bytes (read independently), names outside the directory refused, a symlink
// out of it never indexed, a changed or shrunk file never served, and piece hashes kept in
// the cache directory across restarts (IndexedModelFile).
#include "server/model_index.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/model_hashes.h"
#include "server/indexed_model_file.h"
#include "server/model_testing.h"

namespace tg::server {
namespace {

namespace fs = std::filesystem;
using testing::FactsOf;
using testing::FileBytes;
using testing::WriteTestModel;

// A tensor of more than one piece, so that pieces are tested inside tensors too.
constexpr int64_t kBigFloats = (rpc::kPieceBytes + 4096) / sizeof(float);

class ModelIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::FreshDir("model_index");
    dir_ = root_ + "/models";
    fs::create_directories(dir_);
    model_ = dir_ + "/m.gguf";
    ASSERT_TRUE(WriteTestModel(model_, {64, kBigFloats, 1000}, 5));
    ASSERT_TRUE(WriteTestModel(root_ + "/outside.gguf", {64, 100}, 6));
    fs::create_symlink(root_ + "/outside.gguf", dir_ + "/link.gguf");
  }

  std::unique_ptr<ModelIndex> Index(const std::string& cache = "") {
    absl::StatusOr<ModelDir> d = OpenModelDir(dir_);
    EXPECT_TRUE(d.ok()) << d.status();
    auto index = std::make_unique<ModelIndex>(ModelIndexOptions{{*d}, cache, 2, nullptr});
    index->WaitUntilIndexed();
    return index;
  }

  std::string root_, dir_, model_;
};

TEST_F(ModelIndexTest, EveryPieceReadsBackAsTheFileHasIt) {
  std::unique_ptr<ModelIndex> index = Index();
  const testing::TestModelFacts facts = FactsOf(model_);
  absl::StatusOr<ModelIndex::Match> m = index->Find("", facts.identity);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->name, "m.gguf");
  const std::vector<rpc::FileRange> pieces = rpc::SplitIntoPieces(facts.tensors);
  EXPECT_EQ(m->pieces, pieces.size());
  EXPECT_EQ(pieces.size(), 4u);  // 64 floats, two pieces of the big one, 1000 floats.
  const std::string bytes = FileBytes(model_);
  for (const rpc::FileRange& p : pieces) {
    const rpc::Sha256Digest digest = rpc::Sha256(bytes.data() + p.offset, p.size);
    for (uint64_t file : {m->file, uint64_t{0}}) {  // by file and offset, or by digest alone.
      std::string got(p.size, '\0');
      absl::StatusOr<bool> read =
          index->ReadPiece(file, p.offset, p.size, digest, reinterpret_cast<uint8_t*>(got.data()));
      ASSERT_TRUE(read.ok() && *read) << p.offset;
      EXPECT_EQ(got, bytes.substr(p.offset, p.size)) << p.offset;
    }
    std::string got(p.size, '\0');
    rpc::Sha256Digest wrong = digest;
    wrong[5] ^= 1;
    EXPECT_FALSE(*index->ReadPiece(m->file, p.offset, p.size, wrong,
                                   reinterpret_cast<uint8_t*>(got.data())));
    EXPECT_FALSE(*index->ReadPiece(m->file, p.offset, p.size - 1, digest,
                                   reinterpret_cast<uint8_t*>(got.data())));
  }
}

TEST_F(ModelIndexTest, NamesOutsideTheDirectoryAndSymlinksOutOfItAreRefused) {
  std::unique_ptr<ModelIndex> index = Index();
  const rpc::ModelIdentity identity = FactsOf(model_).identity;
  EXPECT_TRUE(index->Find("m.gguf", identity).ok());
  EXPECT_TRUE(index->Find(dir_ + "/m.gguf", identity).ok());
  EXPECT_TRUE(absl::IsPermissionDenied(index->Find("/etc/passwd", identity).status()));
  EXPECT_TRUE(absl::IsPermissionDenied(index->Find("../outside.gguf", identity).status()));
  EXPECT_TRUE(absl::IsPermissionDenied(index->Find(root_ + "/outside.gguf", identity).status()));
  // The symlink out of the directory was never indexed: its own identity is not found.
  const rpc::ModelIdentity outside = FactsOf(root_ + "/outside.gguf").identity;
  EXPECT_TRUE(absl::IsNotFound(index->Find("link.gguf", outside).status()));
  EXPECT_TRUE(absl::IsNotFound(index->Find("", outside).status()));
  absl::Status other = index->Find("m.gguf", outside).status();
  EXPECT_TRUE(absl::IsNotFound(other));
  EXPECT_NE(other.message().find("another version"), std::string::npos) << other;
  EXPECT_EQ(index->file_count(), 1u);
}

TEST_F(ModelIndexTest, AChangedFileIsNotServedAndIsIndexedAgain) {
  std::unique_ptr<ModelIndex> index = Index();
  testing::TestModelFacts facts = FactsOf(model_);
  const std::vector<rpc::FileRange> pieces = rpc::SplitIntoPieces(facts.tensors);
  const rpc::FileRange p = pieces.back();
  std::string bytes = FileBytes(model_);
  const rpc::Sha256Digest old_digest = rpc::Sha256(bytes.data() + p.offset, p.size);
  const uint64_t file = index->Find("", facts.identity)->file;
  // One byte of the last tensor changes in place and the mtime is put back: only the hash of
  // the bytes read can tell.
  const int64_t mtime = testing::MtimeNs(model_);
  bytes[p.offset + 3] ^= 0x55;
  std::ofstream(model_, std::ios::binary | std::ios::in).write(bytes.data(), bytes.size());
  testing::SetMtimeNs(model_, mtime);
  std::string got(p.size, '\0');
  absl::StatusOr<bool> read =
      index->ReadPiece(file, p.offset, p.size, old_digest, reinterpret_cast<uint8_t*>(got.data()));
  ASSERT_TRUE(read.ok());
  EXPECT_FALSE(*read);
  // Retired at once: even the unchanged pieces are not served from it any more.
  const rpc::FileRange first = pieces.front();
  EXPECT_FALSE(*index->ReadPiece(file, first.offset, first.size,
                                 rpc::Sha256(bytes.data() + first.offset, first.size),
                                 reinterpret_cast<uint8_t*>(got.data())));
  // Indexed again in the background, under a new id, with the new bytes.
  const rpc::Sha256Digest new_digest = rpc::Sha256(bytes.data() + p.offset, p.size);
  absl::StatusOr<ModelIndex::Match> again;
  for (int i = 0; i < 200 && !again.ok(); ++i) {
    again = index->Find("", facts.identity);
    if (!again.ok()) absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->file, file);
  read = index->ReadPiece(again->file, p.offset, p.size, new_digest,
                          reinterpret_cast<uint8_t*>(got.data()));
  ASSERT_TRUE(read.ok() && *read);
  EXPECT_EQ(got, bytes.substr(p.offset, p.size));
}

TEST_F(ModelIndexTest, AFileThatShrankIsNotServed) {
  std::unique_ptr<ModelIndex> index = Index();
  const testing::TestModelFacts facts = FactsOf(model_);
  const rpc::FileRange p = rpc::SplitIntoPieces(facts.tensors).back();
  const std::string bytes = FileBytes(model_);
  const uint64_t file = index->Find("", facts.identity)->file;
  fs::resize_file(model_, p.offset + 10);
  std::string got(p.size, '\0');
  absl::StatusOr<bool> read =
      index->ReadPiece(file, p.offset, p.size, rpc::Sha256(bytes.data() + p.offset, p.size),
                       reinterpret_cast<uint8_t*>(got.data()));
  ASSERT_TRUE(read.ok());
  EXPECT_FALSE(*read);
}

TEST_F(ModelIndexTest, HashesAreKeptInTheCacheDirectoryUntilTheFileChanges) {
  const std::string cache = root_ + "/cache";
  const ModelDirFile f{fs::canonical(model_).string(), "m.gguf"};
  IndexedModelFile::BuildOptions options{cache, 2, nullptr};
  absl::StatusOr<std::unique_ptr<IndexedModelFile>> first = IndexedModelFile::Build(f, options);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE((*first)->from_cache());
  absl::StatusOr<std::unique_ptr<IndexedModelFile>> second = IndexedModelFile::Build(f, options);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE((*second)->from_cache());
  for (size_t i = 0; i < (*first)->hashes().pieces.size(); ++i) {
    EXPECT_EQ((*second)->hashes().pieces[i].digest, (*first)->hashes().pieces[i].digest);
  }
  // A damaged entry is not trusted: the file is hashed again (and the entry rewritten).
  const std::string entry = ModelIndexEntryPath(cache, f.path);
  fs::resize_file(entry, fs::file_size(entry) - 7);
  absl::StatusOr<std::unique_ptr<IndexedModelFile>> third = IndexedModelFile::Build(f, options);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_FALSE((*third)->from_cache());
  EXPECT_TRUE(rpc::ReadModelHashes(entry).ok());
  // A touched file (new mtime) is hashed again.
  testing::SetMtimeNs(model_, testing::MtimeNs(model_) + 1000);
  absl::StatusOr<std::unique_ptr<IndexedModelFile>> fourth = IndexedModelFile::Build(f, options);
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  EXPECT_FALSE((*fourth)->from_cache());
}

// Hashes taken from the cache entry of an earlier run are not trusted blindly: the file may
// have been changed while no server held it open, with its size and mtime put back. Such a
// piece is hashed when first served and refused; the piece this process read and hashed is
// then served without hashing again, and its bytes are the file's.
TEST_F(ModelIndexTest, APieceChangedWhileNoServerRanIsRefusedDespiteTheCacheEntry) {
  const std::string cache = root_ + "/cache";
  const ModelDirFile f{fs::canonical(model_).string(), "m.gguf"};
  IndexedModelFile::BuildOptions options{cache, 2, nullptr};
  ASSERT_TRUE(IndexedModelFile::Build(f, options).ok());  // the earlier run.
  std::string bytes = FileBytes(model_);
  const std::vector<rpc::FileRange> pieces = rpc::SplitIntoPieces(FactsOf(model_).tensors);
  const rpc::FileRange changed = pieces.back(), kept = pieces.front();
  const int64_t mtime = testing::MtimeNs(model_);
  bytes[changed.offset + 1] ^= 0x21;
  std::ofstream(model_, std::ios::binary | std::ios::in).write(bytes.data(), bytes.size());
  testing::SetMtimeNs(model_, mtime);

  absl::StatusOr<std::unique_ptr<IndexedModelFile>> file = IndexedModelFile::Build(f, options);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->from_cache());
  std::string got(kept.size, '\0');
  absl::StatusOr<bool> read = (*file)->ReadPiece(0, reinterpret_cast<uint8_t*>(got.data()));
  ASSERT_TRUE(read.ok() && *read);
  EXPECT_EQ(got, bytes.substr(kept.offset, kept.size));
  read = (*file)->ReadPiece(0, reinterpret_cast<uint8_t*>(got.data()));  // without hashing.
  ASSERT_TRUE(read.ok() && *read);
  EXPECT_EQ(got, bytes.substr(kept.offset, kept.size));
  got.assign(changed.size, '\0');
  read = (*file)->ReadPiece(pieces.size() - 1, reinterpret_cast<uint8_t*>(got.data()));
  ASSERT_TRUE(read.ok());
  EXPECT_FALSE(*read);
  EXPECT_TRUE((*file)->stale());
}

TEST_F(ModelIndexTest, HashingStopsWhenTheServerShutsDown) {
  const ModelDirFile f{fs::canonical(model_).string(), "m.gguf"};
  int polls = 0;
  IndexedModelFile::BuildOptions options{"", 1, nullptr, [&polls] { return ++polls > 1; }};
  absl::StatusOr<std::unique_ptr<IndexedModelFile>> built = IndexedModelFile::Build(f, options);
  EXPECT_TRUE(absl::IsCancelled(built.status())) << built.status();
  EXPECT_EQ(polls, 2);  // one piece hashed, then it stopped.
}

}  // namespace
}  // namespace tg::server
