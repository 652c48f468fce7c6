// The IB net on a real HCA: a loopback connection on device 0 (both sides in this
// process), exact bytes for several sizes, 0-byte messages, the request pool, buffers
// outside their registration, and a message larger than its receive. Skipped where
// init() finds no usable HCA port (machines without rdma-core, or without HCAs).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "core/debug.h"
#include "socket_net_fixture.h"
#include "transport/net/ib_net.h"

namespace chorus {
namespace {

using socket_net_test::Connection;
using socket_net_test::pattern;
using socket_net_test::waitAll;
using Clock = std::chrono::steady_clock;

class IbNetHardware : public ::testing::Test {
 protected:
  void SetUp() override {
    net_ = makeIbNet();
    if (net_->init() != ncclSuccess) GTEST_SKIP() << "no usable HCA port here";
    ASSERT_NO_FATAL_FAILURE(socket_net_test::connectPair(*net_, &c_));
  }
  void TearDown() override {
    if (c_.send != nullptr) {
      EXPECT_EQ(net_->closeSend(c_.send), ncclSuccess);
    }
    if (c_.recv != nullptr) {
      EXPECT_EQ(net_->closeRecv(c_.recv), ncclSuccess);
    }
    if (c_.listen != nullptr) {
      EXPECT_EQ(net_->closeListen(c_.listen), ncclSuccess);
    }
  }
  NetMemHandle* reg(void* comm, std::vector<char>& buffer) {
    NetMemHandle* mhandle = nullptr;
    EXPECT_EQ(net_->regMr(comm, buffer.data(), buffer.size(), kNetPtrHost, &mhandle), ncclSuccess);
    return mhandle;
  }
  // Posts a receive of `capacity` at `in` and a send of `size` from `out`.
  void post(std::vector<char>& out, NetMemHandle* outMr, size_t size, std::vector<char>& in, NetMemHandle* inMr,
            size_t capacity, NetRequest** sendRequest, NetRequest** recvRequest) {
    void* data = in.data();
    int capacityInt = static_cast<int>(capacity);
    ASSERT_EQ(net_->irecv(c_.recv, 1, &data, &capacityInt, nullptr, &inMr, recvRequest), ncclSuccess);
    ASSERT_EQ(net_->isend(c_.send, out.data(), static_cast<int>(size), 0, outMr, sendRequest), ncclSuccess);
    ASSERT_NE(*sendRequest, nullptr);
    ASSERT_NE(*recvRequest, nullptr);
  }

  std::unique_ptr<Net> net_;
  Connection c_;
};

TEST_F(IbNetHardware, MessagesOfManySizesArriveExactly) {
  NetProperties props;
  ASSERT_EQ(net_->getProperties(0, &props), ncclSuccess);
  EXPECT_NE(props.name.find(':'), std::string::npos) << props.name;
  EXPECT_GT(props.speed, 0);
  const size_t capacity = (4 << 20) + 16;
  std::vector<char> in(capacity);
  NetMemHandle* inMr = reg(c_.recv, in);
  uint32_t seed = 1;
  for (size_t size : {size_t(0), size_t(1), size_t(4096), size_t(1 << 20) + 3, size_t(4) << 20}) {
    SCOPED_TRACE(size);
    std::vector<char> out = pattern(size + 1, seed++);
    NetMemHandle* outMr = reg(c_.send, out);
    std::fill(in.begin(), in.end(), 'Z');
    NetRequest* sendRequest = nullptr;
    NetRequest* recvRequest = nullptr;
    ASSERT_NO_FATAL_FAILURE(post(out, outMr, size, in, inMr, capacity, &sendRequest, &recvRequest));
    std::vector<int> sizes;
    ASSERT_NO_FATAL_FAILURE(waitAll(*net_, {sendRequest, recvRequest}, &sizes));
    EXPECT_EQ(sizes[1], static_cast<int>(size));
    EXPECT_TRUE(std::equal(out.begin(), out.begin() + size, in.begin()));
    EXPECT_TRUE(std::all_of(in.begin() + size, in.end(), [](char b) { return b == 'Z'; }));
    EXPECT_EQ(net_->deregMr(c_.send, outMr), ncclSuccess);
  }
  EXPECT_EQ(net_->deregMr(c_.recv, inMr), ncclSuccess);
}

TEST_F(IbNetHardware, PoolOfEightAndBuffersOutsideTheirRegistration) {
  std::vector<char> out(64);
  NetMemHandle* outMr = reg(c_.send, out);
  NetRequest* request = nullptr;
  EXPECT_EQ(net_->isend(c_.send, out.data() + 60, 8, 0, outMr, &request), ncclInvalidArgument);
  EXPECT_NE(std::string(lastErrorText()).find("outside its registration"), std::string::npos) << lastErrorText();
  EXPECT_EQ(net_->isend(c_.send, out.data(), 8, 0, nullptr, &request), ncclInvalidArgument);
  std::vector<NetRequest*> sends;
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(net_->isend(c_.send, out.data(), 0, 0, outMr, &request), ncclSuccess);
    ASSERT_NE(request, nullptr);
    sends.push_back(request);
  }
  ASSERT_EQ(net_->isend(c_.send, out.data(), 0, 0, outMr, &request), ncclSuccess);
  EXPECT_EQ(request, nullptr) << "the ninth request finds the pool full";
  std::vector<NetRequest*> recvs;
  for (int i = 0; i < 8; ++i) {
    void* data = nullptr;
    int size = 0;
    ASSERT_EQ(net_->irecv(c_.recv, 1, &data, &size, nullptr, nullptr, &request), ncclSuccess);
    recvs.push_back(request);
  }
  std::vector<int> sizes;
  recvs.insert(recvs.end(), sends.begin(), sends.end());
  ASSERT_NO_FATAL_FAILURE(waitAll(*net_, recvs, &sizes));
  EXPECT_EQ(net_->deregMr(c_.send, outMr), ncclSuccess);
}

TEST_F(IbNetHardware, MessageLargerThanItsReceiveFailsTheReceive) {
  std::vector<char> out(8192), in(4096);
  NetMemHandle* outMr = reg(c_.send, out);
  NetMemHandle* inMr = reg(c_.recv, in);
  NetRequest* sendRequest = nullptr;
  NetRequest* recvRequest = nullptr;
  ASSERT_NO_FATAL_FAILURE(post(out, outMr, out.size(), in, inMr, in.size(), &sendRequest, &recvRequest));
  ncclResult_t result = ncclSuccess;
  int done = 0;
  for (auto deadline = Clock::now() + std::chrono::seconds(20); result == ncclSuccess && !done;) {
    ASSERT_LT(Clock::now(), deadline) << "the receive neither failed nor completed";
    result = net_->test(recvRequest, &done, nullptr);
  }
  EXPECT_EQ(result, ncclRemoteError);
  EXPECT_NE(std::string(lastErrorText()).find("larger than the posted receive"), std::string::npos) << lastErrorText();
}

}  // namespace
}  // namespace chorus
