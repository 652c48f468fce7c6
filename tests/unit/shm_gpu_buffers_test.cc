// The SHM transport's GPU buffers across processes (shm_gpu_buffers.h), driven at the
// transport seam with two PeerInfos of different processes and host memory standing in for
// GPU memory: the control block in /dev/shm, the buffers in the receiver's GPU memory,
// mapped by the sender through CUDA IPC (by file descriptor or legacy handle), under P2P
// read the Simple slots in the sender's, mapped by the receiver; and every allocation and
// mapping let go of in either order, on failure too.
#include "transport/shm_gpu_buffers.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/path_type.h"
#include "nccl.h"
#include "stand_in_gpu_memory.h"
#include "transport/transport.h"

namespace chorus {
namespace {

using fixtures::StandInGpuMemory;

// Across processes (the SHM transport, driven here at the transport seam with two
// PeerInfos of different processes): the control block in /dev/shm, the buffers in the
// receiver's GPU memory, mapped by the sender through a CUDA IPC handle.
class ShmGpuBuffersBase : public ::testing::Test {
 protected:
  virtual bool byFd() const = 0;
  void SetUp() override {
    memory_.byFd = byFd();
    for (int r = 0; r < 2; ++r) {
      PeerInfo& p = peers_[r];
      p = PeerInfo{};
      p.rank = r;
      p.cudaDev = r;
      p.pid = static_cast<int>(getpid());
      p.hostHash = 7;
      p.shmDevId = 9;
      p.processId = 0x5eed0000u + static_cast<uint64_t>(r);  // no liveness file: watched by timeout only
      p.gpuComm = 1;
      p.topoGpu = r;
      p.gpuReach = 3;
    }
    layout_.nSlots = 2;
    layout_.slotBytes[static_cast<int>(Protocol::Simple)] = 4096;
    layout_.slotBytes[static_cast<int>(Protocol::LL)] = 1024;
    layout_.slotBytes[static_cast<int>(Protocol::LL128)] = 1024;
    link_.gpuMemory = &memory_;
    link_.gpuPath = static_cast<int>(PathType::NVL);
    link_.peerWritesMine = true;
  }
  void TearDown() override { unsetenv("NCCL_P2P_READ_ENABLE"); }
  // Rank 1 receives from rank 0: rank 1 creates, rank 0 attaches.
  ncclResult_t createReceiver() {
    return shmTransport().createReceiver(layout_, peers_[1], peers_[0], link_, &handle_, &recvEnd_, &recv_);
  }
  ncclResult_t attachSender() {
    return shmTransport().attachSender(handle_, peers_[0], peers_[1], link_, &sendEnd_, &send_);
  }
  ncclResult_t connect() {
    const ncclResult_t made = createReceiver();
    return made != ncclSuccess ? made : attachSender();
  }
  // A collective channel's connection under NCCL's P2P read: both ends set up together,
  // the receiver's GPU able to read the sender's.
  void askForP2pRead() {
    setenv("NCCL_P2P_READ_ENABLE", "1", 1);
    link_.setUpTogether = true;
    link_.mineReadsPeer = true;
  }
  size_t simpleBytes() const { return layout_.totalBytes() - layout_.bufferOffset(kSimple); }
  static constexpr int kSimple = static_cast<int>(Protocol::Simple);

  StandInGpuMemory memory_;
  PeerInfo peers_[2];
  FifoLayout layout_;
  LinkContext link_;
  ConnectHandle handle_{};
  FifoEnd recvEnd_, sendEnd_;
  std::unique_ptr<ConnectionResource> recv_, send_;
};

// Both ways of sharing (the parameter: by file descriptor, else by legacy handle).
class ShmGpuBuffersTest : public ShmGpuBuffersBase, public ::testing::WithParamInterface<bool> {
 protected:
  bool byFd() const override { return GetParam(); }
};
class ShmGpuBuffersByFdTest : public ShmGpuBuffersBase {
 protected:
  bool byFd() const override { return true; }
};
class ShmGpuBuffersByHandleTest : public ShmGpuBuffersBase {
 protected:
  bool byFd() const override { return false; }
};

TEST_P(ShmGpuBuffersTest, TheSenderMapsTheReceiversGpuMemoryThroughIpc) {
  ASSERT_EQ(connect(), ncclSuccess);
  EXPECT_EQ(handle_.gpuBuffers, GetParam() ? kGpuBuffersByFd : kGpuBuffersByHandle);
  EXPECT_LT(handle_.bytes, layout_.totalBytes()) << "only the control block is in /dev/shm";
  for (int p = 0; p < kNumProtocols; ++p) {
    EXPECT_EQ(memory_.deviceOf(recvEnd_.buffs[p]), 1) << "the receiver's GPU";
    EXPECT_EQ(sendEnd_.buffs[p], recvEnd_.buffs[p]) << "the stand-in maps at the same address";
  }
  EXPECT_TRUE(recvEnd_.gpuBuffers && sendEnd_.gpuBuffers);
  EXPECT_NE(recvEnd_.ctrl, sendEnd_.ctrl) << "each process maps the control block itself";
  sendEnd_.ctrl->tail = 5;
  EXPECT_EQ(recvEnd_.ctrl->tail, 5u) << "one control block in /dev/shm";
  EXPECT_EQ(memory_.imported(), 1u);
  send_.reset();
  EXPECT_EQ(memory_.imported(), 0u) << "the sender unmaps on destroy";
  recv_.reset();
  EXPECT_EQ(memory_.live(), 0u);
}

// A receiver destroyed while its sender still has the buffers mapped: legacy memory is kept
// until the sender lets go (freeing it under the sender's kernels would fault its GPU
// context); memory shared by descriptor is released at once and lives on in the mapping.
TEST_P(ShmGpuBuffersTest, TheReceiverFreesItsGpuMemoryOnlyAfterTheSenderUnmappedIt) {
  ASSERT_EQ(connect(), ncclSuccess);
  recv_.reset();
  EXPECT_EQ(memory_.live(), 1u) << "still mapped by the sender";
  EXPECT_EQ(memory_.badReleases(), 0) << "legacy memory was released under the sender's mapping";
  send_.reset();
  EXPECT_EQ(memory_.imported(), 0u);
  EXPECT_EQ(memory_.live(), 0u) << "freed once the sender unmapped it";
  EXPECT_EQ(memory_.badReleases(), 0);
}

TEST_P(ShmGpuBuffersTest, AnImportThatFailsIsAClearErrorWithoutLeaks) {
  memory_.failImports = true;
  EXPECT_EQ(connect(), ncclUnhandledCudaError);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("cannot map rank 1's FIFO"), std::string::npos)
      << ncclGetLastError(nullptr);
  recv_.reset();
  EXPECT_EQ(memory_.live(), 0u);
  EXPECT_EQ(memory_.imported(), 0u);
}

// A path beyond NCCL_P2P_LEVEL, or NCCL_P2P_DISABLE, keeps the whole FIFO in /dev/shm.
TEST_P(ShmGpuBuffersTest, OutsideTheP2pLevelTheFifoIsAllInSharedMemory) {
  link_.gpuPath = static_cast<int>(PathType::SYS);
  ASSERT_EQ(connect(), ncclSuccess);
  EXPECT_EQ(handle_.gpuBuffers, 0u);
  EXPECT_FALSE(recvEnd_.gpuBuffers || sendEnd_.gpuBuffers);
  EXPECT_EQ(memory_.allocations(), 0);
  send_.reset();
  recv_.reset();

  link_.gpuPath = static_cast<int>(PathType::NVL);
  setenv("NCCL_P2P_DISABLE", "1", 1);
  const ncclResult_t made = connect();
  unsetenv("NCCL_P2P_DISABLE");
  ASSERT_EQ(made, ncclSuccess);
  EXPECT_EQ(handle_.gpuBuffers, 0u);
  EXPECT_EQ(memory_.allocations(), 0);
}

// A ticket redeemed once cannot be redeemed again: a second sender gets a clear error.
TEST_F(ShmGpuBuffersByFdTest, ADescriptorIsHandedOutOnce) {
  ASSERT_EQ(connect(), ncclSuccess);
  std::vector<char> segment(gpuFifoSegmentBytes());
  GpuBuffers again;
  EXPECT_EQ(mapSenderBuffers(handle_, segment.data(), peers_[0], peers_[1], link_, &again), ncclRemoteError);
  EXPECT_EQ(again.address, nullptr);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("does not offer"), std::string::npos)
      << ncclGetLastError(nullptr);
}

// NCCL's P2P read across processes: the sender allocates the Simple slots on its own GPU
// and shares them through the segment; the receiver maps them when the connection is
// awaited, and keeps its LL and LL128 buffers on its own GPU.
// A receiver that announces less GPU memory than its FIFO needs: the sender maps none of it
// (mapped, its kernels would fault past the end), and says why.
TEST_F(ShmGpuBuffersByFdTest, AnAllocationSmallerThanTheFifoIsRefused) {
  ASSERT_EQ(createReceiver(), ncclSuccess);
  handle_.gpuBytes = layout_.buffersBytes() / 2;
  EXPECT_EQ(attachSender(), ncclRemoteError);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("where its FIFO needs"), std::string::npos)
      << ncclGetLastError(nullptr);
  EXPECT_EQ(memory_.imported(), 0u);
  send_.reset();
  recv_.reset();
  EXPECT_EQ(memory_.live(), 0u);
}

// Legacy handles: the receiver lets go of its buffers (its communicator ends) while its
// sender is in the middle of mapping them. They are not freed under that mapping; they go
// once the sender has unmapped them.
TEST_F(ShmGpuBuffersByHandleTest, BuffersAreNotFreedUnderAMappingInProgress) {
  ASSERT_EQ(createReceiver(), ncclSuccess);
  memory_.beforeImport = [this] { recv_.reset(); };
  ASSERT_EQ(attachSender(), ncclSuccess) << ncclGetLastError(nullptr);
  memory_.beforeImport = nullptr;
  EXPECT_EQ(memory_.live(), 1u) << "kept for the sender's mapping";
  send_.reset();
  EXPECT_EQ(memory_.live(), 0u) << "freed once the sender unmapped it";
  EXPECT_EQ(memory_.badReleases(), 0);
}

TEST_P(ShmGpuBuffersTest, P2pReadPutsTheSimpleSlotsOnTheSendersGpu) {
  askForP2pRead();
  ASSERT_EQ(connect(), ncclSuccess);
  EXPECT_EQ(handle_.slotsOnSender, 1);
  EXPECT_EQ(recvEnd_.buffs[kSimple], nullptr) << "not mapped before the connection is awaited";
  EXPECT_EQ(memory_.deviceOf(sendEnd_.buffs[kSimple]), 0) << "the sender writes its own GPU's memory";
  ASSERT_EQ(recv_->awaitReady(&recvEnd_, nullptr, nullptr), ncclSuccess);
  EXPECT_EQ(recvEnd_.buffs[kSimple], sendEnd_.buffs[kSimple]) << "the stand-in maps at the same address";
  for (int p = 0; p < kNumProtocols; ++p) {
    if (p == kSimple) continue;
    EXPECT_EQ(memory_.deviceOf(recvEnd_.buffs[p]), 1) << "protocol " << p << ": the receiver's GPU";
    EXPECT_EQ(sendEnd_.buffs[p], recvEnd_.buffs[p]);
  }
  EXPECT_EQ(memory_.imported(), 2u) << "each side maps the other's memory";
  EXPECT_EQ(recv_->gpuBytes(), layout_.buffersBytes() - simpleBytes()) << "the receiver's GPU holds LL and LL128";
  EXPECT_EQ(send_->gpuBytes(), simpleBytes()) << "the sender's GPU holds the Simple slots";
  EXPECT_NE(recv_->describe().find("Simple slots on the sender's GPU (P2P read)"), std::string::npos)
      << recv_->describe();
  EXPECT_EQ(recv_->awaitReady(&recvEnd_, nullptr, nullptr), ncclSuccess) << "awaiting again maps nothing more";
  EXPECT_EQ(memory_.imported(), 2u);
  send_.reset();
  recv_.reset();
  EXPECT_EQ(memory_.imported(), 0u);
  EXPECT_EQ(memory_.live(), 0u);
  EXPECT_EQ(memory_.badReleases(), 0);
}

// The sender goes first: legacy slots stay allocated until the receiver unmapped them.
TEST_P(ShmGpuBuffersTest, UnderP2pReadTheSenderFreesItsSlotsOnlyAfterTheReceiverUnmappedThem) {
  askForP2pRead();
  ASSERT_EQ(connect(), ncclSuccess);
  ASSERT_EQ(recv_->awaitReady(&recvEnd_, nullptr, nullptr), ncclSuccess);
  send_.reset();
  EXPECT_EQ(memory_.badReleases(), 0) << "legacy slots were released under the receiver's mapping";
  EXPECT_EQ(memory_.imported(), 1u) << "the receiver still maps the slots";
  recv_.reset();
  EXPECT_EQ(memory_.imported(), 0u);
  EXPECT_EQ(memory_.live(), 0u) << "freed once the receiver unmapped them";
  EXPECT_EQ(memory_.badReleases(), 0);
}

// A Send/Recv connection's sender attaches at its first Send, which may come at any later
// call, so its receiver cannot wait for slots: they stay on the receiver's GPU.
TEST_P(ShmGpuBuffersTest, ASendRecvConnectionKeepsItsSlotsOnTheReceiversGpu) {
  askForP2pRead();
  link_.setUpTogether = false;
  ASSERT_EQ(connect(), ncclSuccess);
  EXPECT_EQ(handle_.slotsOnSender, 0);
  EXPECT_EQ(memory_.deviceOf(recvEnd_.buffs[kSimple]), 1);
  EXPECT_EQ(sendEnd_.buffs[kSimple], recvEnd_.buffs[kSimple]);
  EXPECT_EQ(recv_->gpuBytes(), layout_.buffersBytes());
  EXPECT_EQ(send_->gpuBytes(), 0u);
}

// The receiver waits for a sender that has not attached yet, and is released when it does.
TEST_P(ShmGpuBuffersTest, UnderP2pReadTheReceiverWaitsForItsSendersSlots) {
  askForP2pRead();
  ASSERT_EQ(createReceiver(), ncclSuccess);
  std::atomic<int> awaited{-1};
  std::thread receiver([&] { awaited = recv_->awaitReady(&recvEnd_, nullptr, nullptr); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(awaited.load(), -1) << "returned before the sender shared its slots";
  ASSERT_EQ(attachSender(), ncclSuccess);
  receiver.join();
  EXPECT_EQ(awaited.load(), ncclSuccess);
  EXPECT_EQ(recvEnd_.buffs[kSimple], sendEnd_.buffs[kSimple]);
}

// An abort ends the receiver's wait; a sender that cannot allocate its slots fails, says
// so, and ends its receiver's wait at once; nothing is left allocated or mapped.
TEST_P(ShmGpuBuffersTest, UnderP2pReadAFailedSenderOrAnAbortEndsTheReceiversWait) {
  askForP2pRead();
  ASSERT_EQ(createReceiver(), ncclSuccess);
  const std::atomic<uint32_t> aborted{1};
  EXPECT_EQ(recv_->awaitReady(&recvEnd_, &aborted, nullptr), ncclSystemError);

  memory_.failAllocations = true;
  EXPECT_EQ(attachSender(), ncclUnhandledCudaError);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("Simple slots for data to rank 1"), std::string::npos)
      << ncclGetLastError(nullptr);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(recv_->awaitReady(&recvEnd_, nullptr, nullptr), ncclRemoteError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "waited for a sender that failed";
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("could not share its Simple slots"), std::string::npos)
      << ncclGetLastError(nullptr);
  send_.reset();
  recv_.reset();
  EXPECT_EQ(memory_.live(), 0u);
  EXPECT_EQ(memory_.imported(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Sharing, ShmGpuBuffersTest, ::testing::Bool(), [](const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "ByFileDescriptor" : "ByLegacyHandle";
});

}  // namespace
}  // namespace chorus
