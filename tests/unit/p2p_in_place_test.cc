// Send/Recv in place (device/common/simple_primitives.h, beginP2p): between ranks of one
// process, a receive into a registered buffer larger than the FIFO's slots hold is written
// by the sender straight into that buffer, nothing copied through the slots, and each step's
// stamp says so. Unregistered or small receives go through the slots as before. And a
// sender whose count differs from its receiver's fails instead of writing past the buffer.
// CPU communicators do this with CHORUS_P2P_IN_PLACE=1 (GPU ones by default; the device
// code is one), which the tests set, and not without it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "nccl.h"
#include "src/comm/comm.h"

namespace chorus {
namespace {

class P2pInPlaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("CHORUS_EXECUTOR", "cpu", 1);  // on a GPU machine too: host buffers
    if (inPlaceSetting() != nullptr) setenv("CHORUS_P2P_IN_PLACE", inPlaceSetting(), 1);
    ASSERT_EQ(ncclCommInitAll(comms_, 2, nullptr), ncclSuccess);
    const FifoLayout& layout = comms_[1]->p2pLayout;
    slotsHold_ = layout.slotBytes[static_cast<int>(Protocol::Simple)] * static_cast<size_t>(layout.nSlots);
  }
  // CPU communicators move in place when asked (GPU ones only, by default).
  virtual const char* inPlaceSetting() const { return "1"; }
  void TearDown() override {
    for (ncclComm_t c : comms_) ncclCommAbort(c);
    unsetenv("CHORUS_EXECUTOR");
    unsetenv("CHORUS_P2P_IN_PLACE");
  }

  // Rank 0 sends `sendCount` floats from `send`, rank 1 receives `recvCount` into `recv`:
  // one group on this thread, as ncclCommInitAll's ranks are driven.
  ncclResult_t exchange(const float* send, size_t sendCount, float* recv, size_t recvCount) {
    EXPECT_EQ(ncclGroupStart(), ncclSuccess);
    EXPECT_EQ(ncclSend(send, sendCount, ncclFloat32, 1, comms_[0], nullptr), ncclSuccess);
    EXPECT_EQ(ncclRecv(recv, recvCount, ncclFloat32, 0, comms_[1], nullptr), ncclSuccess);
    return ncclGroupEnd();
  }

  // Whether rank 1's last step received from rank 0 came in place (its stamp's mark).
  bool lastStepInPlace() const {
    const FifoEnd& e = comms_[1]->p2pRecv[0].end;
    return e.ctrl->stamps[(e.step - 1) & static_cast<uint64_t>(e.nSlots - 1)].stamp.bytes < 0;
  }

  // Rank 0 sends `count` floats into a buffer of rank 1 of which the first `registered` are
  // registered; the data must arrive exactly. Whether they came in place.
  bool registeredExchange(size_t count, size_t registered) {
    const std::vector<float> send = numbered(count);
    std::vector<float> recv(count, -1.0f);
    void* handle = nullptr;
    EXPECT_EQ(ncclCommRegister(comms_[1], recv.data(), registered * sizeof(float), &handle), ncclSuccess);
    EXPECT_EQ(exchange(send.data(), count, recv.data(), count), ncclSuccess);
    EXPECT_EQ(recv, send);
    EXPECT_EQ(ncclCommDeregister(comms_[1], handle), ncclSuccess);
    return lastStepInPlace();
  }

  static std::vector<float> numbered(size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1000003) + 0.25f;
    return v;
  }

  ncclComm_t comms_[2] = {};
  size_t slotsHold_ = 0;
};

TEST_F(P2pInPlaceTest, ARegisteredReceiveLargerThanTheSlotsIsWrittenInPlace) {
  const size_t count = 2 * slotsHold_ / sizeof(float) + 3;  // past the slots, not a whole step
  const std::vector<float> send = numbered(count);
  std::vector<float> recv(count, -1.0f);
  void* handle = nullptr;
  ASSERT_EQ(ncclCommRegister(comms_[1], recv.data(), count * sizeof(float), &handle), ncclSuccess);
  for (int round = 0; round < 3; ++round) {  // the offer is per call
    std::fill(recv.begin(), recv.end(), -1.0f);
    ASSERT_EQ(exchange(send.data(), count, recv.data(), count), ncclSuccess);
    ASSERT_EQ(recv, send) << "round " << round;
    EXPECT_TRUE(lastStepInPlace()) << "round " << round;
  }
  EXPECT_EQ(ncclCommDeregister(comms_[1], handle), ncclSuccess);

  // Deregistered: through the slots again.
  std::fill(recv.begin(), recv.end(), -1.0f);
  ASSERT_EQ(exchange(send.data(), count, recv.data(), count), ncclSuccess);
  ASSERT_EQ(recv, send);
  EXPECT_FALSE(lastStepInPlace());
}

TEST_F(P2pInPlaceTest, SmallOrUnregisteredReceivesGoThroughTheSlots) {
  const size_t small = slotsHold_ / sizeof(float);  // exactly what the slots hold
  EXPECT_FALSE(registeredExchange(small, small)) << "a sender this small does not wait for its receiver";
  const size_t large = 2 * small + 1;
  EXPECT_TRUE(registeredExchange(large, large)) << "the control";
  EXPECT_FALSE(registeredExchange(large, large - 1)) << "the receive reaches past the registration";
}

// The sender learns the receiver's count before writing: a mismatch fails the call on both
// ranks and leaves every byte past the receiver's buffer as it was.
TEST_F(P2pInPlaceTest, ACountMismatchFailsWithoutWritingPastTheReceiversBuffer) {
  const size_t recvCount = 2 * slotsHold_ / sizeof(float);
  const size_t guard = 4096;
  const std::vector<float> send = numbered(recvCount + guard);
  std::vector<float> recv(recvCount + guard, -1.0f);
  void* handle = nullptr;
  ASSERT_EQ(ncclCommRegister(comms_[1], recv.data(), recv.size() * sizeof(float), &handle), ncclSuccess);
  EXPECT_NE(exchange(send.data(), recvCount + guard, recv.data(), recvCount), ncclSuccess);
  for (size_t i = recvCount; i < recv.size(); ++i) ASSERT_EQ(recv[i], -1.0f) << "written past the receive at " << i;
  ncclResult_t state = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(comms_[0], &state), ncclSuccess);
  EXPECT_NE(state, ncclSuccess) << "the sender failed too";
}

class P2pInPlaceByDefaultTest : public P2pInPlaceTest {
 protected:
  const char* inPlaceSetting() const override { return nullptr; }
};

// Unasked, CPU communicators keep the slots: two cores copying in turn beat one core
// copying alone there (BENCHMARKS.md).
TEST_F(P2pInPlaceByDefaultTest, CpuCommunicatorsGoThroughTheSlots) {
  const size_t count = 2 * slotsHold_ / sizeof(float) + 3;
  EXPECT_FALSE(registeredExchange(count, count));
  EXPECT_FALSE(comms_[1]->p2pRecv[0].end.direct);
}

}  // namespace
}  // namespace chorus
