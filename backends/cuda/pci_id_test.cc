#include "backends/cuda/pci_id.h"

#include "gtest/gtest.h"

namespace tg::cuda {
namespace {

TEST(PciIdTest, CudaBusIdsBecomeLowerCasePciIds) {
  EXPECT_EQ(*PciDeviceId("0000:3B:00.0"), "pci:0000:3b:00.0");
  EXPECT_EQ(*PciDeviceId("00000000:C1:1f.7"), "pci:0000:c1:1f.7");  // nvidia-smi's 8 digits.
  EXPECT_EQ(*PciDeviceId("0001:01:00.1\n"), "pci:0001:01:00.1");
  EXPECT_EQ(*PciDeviceId("1:2:3.4"), "pci:0001:02:03.4");
}

TEST(PciIdTest, MalformedIdsAreRefusedNamingTheText) {
  for (const char* bad : {"", "0000:3B:00", "0000:3B:00.8", "0000:3B:20.0", "0000:1FF:00.0",
                          "zz:00:00.0", "0000:3b:00.0:1", "0000 :3b:00.0"}) {
    absl::StatusOr<std::string> id = PciDeviceId(bad);
    EXPECT_FALSE(id.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(id.status()));
    EXPECT_NE(id.status().message().find(bad), std::string::npos) << id.status();
  }
}

}  // namespace
}  // namespace tg::cuda
