// The IB net without an HCA: the out-of-band messages, settings, the dlopened verbs
// table, RAII release order, init() failing cleanly on a machine without HCAs, and
// argument validation of every Net method. Port selection and facts: ib_port_test.cc;
// connection setup and the data path need an HCA: ib_net_hardware_test.cc.
#include "transport/net/ib_net.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/debug.h"
#include "socket_net_fixture.h"
#include "transport/net/ib_comm.h"
#include "transport/net/ib_connect.h"
#include "transport/net/ib_net_wire.h"
#include "transport/net/ib_verbs_api.h"

namespace chorus {
namespace {

using socket_net_test::ScopedEnv;
namespace wire = ib_net_wire;

bool lastWarnMentions(const std::string& a, const std::string& b = "") {
  const std::string text = lastErrorText();
  return text.find(a) != std::string::npos && text.find(b) != std::string::npos;
}

// Sends INFO lines of every subsystem to a file for the life of the object.
class ScopedLogCapture {
 public:
  ScopedLogCapture() : path_(std::filesystem::temp_directory_path() / ("chorus_ib_log_" + std::to_string(getpid()))) {
    resetDebugInit();
  }
  ~ScopedLogCapture() {
    resetDebugInit();  // closes the file; the next message re-reads the restored settings
    std::filesystem::remove(path_);
  }
  // The lines written so far (stops the capture).
  std::vector<std::string> stop() {
    resetDebugInit();
    std::vector<std::string> lines;
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

 private:
  std::filesystem::path path_;
  ScopedEnv level_{"NCCL_DEBUG", "INFO"};
  ScopedEnv subsys_{"NCCL_DEBUG_SUBSYS", "ALL"};
  ScopedEnv file_{"NCCL_DEBUG_FILE", path_.c_str()};
};

// ---- out-of-band messages and settings ----

GidBytes ipv4Gid(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
}

constexpr SipKey kListenKey{0x0123456789abcdefull, 0xfedcba9876543210ull};

// A sender's QpInfo, proven for kListenKey unless said otherwise.
wire::QpInfo goodPeer(uint8_t linkLayer) {
  return wire::provenQpInfo(
      kListenKey, wire::QpInfo{wire::kQpInfoMagic, 0x1234, 0xabcdef, 7, linkLayer, 5, ipv4Gid(10, 0, 0, 2), 0},
      /*fromSender=*/true);
}

bool checkSender(const wire::QpInfo& info, uint8_t mine, int myMtu, int* mtu, std::string* problem) {
  return checkPeerQpInfo(info, kListenKey, /*peerIsSender=*/true, mine, myMtu, mtu, problem);
}

TEST(IbNetWire, PeerQpInfoGivesThePathMtu) {
  int mtu = 0;
  std::string problem;
  ASSERT_TRUE(checkSender(goodPeer(wire::kLinkLayerEthernet), wire::kLinkLayerEthernet, 3, &mtu, &problem)) << problem;
  EXPECT_EQ(mtu, 3);
  ASSERT_TRUE(checkSender(goodPeer(wire::kLinkLayerInfiniband), wire::kLinkLayerInfiniband, 5, &mtu, &problem));
  EXPECT_EQ(mtu, 5);
  wire::QpInfo roceNoLid = goodPeer(wire::kLinkLayerEthernet);
  roceNoLid.lid = 0;
  roceNoLid = wire::provenQpInfo(kListenKey, roceNoLid, true);
  EXPECT_TRUE(checkSender(roceNoLid, wire::kLinkLayerEthernet, 5, &mtu, &problem)) << "RoCE has no LIDs";
}

TEST(IbNetWire, BadPeerQpInfoIsRejectedWithTheReason) {
  // Each bad field is proven, so the field itself is what is refused.
  auto rejected = [](wire::QpInfo info, uint8_t mine, const std::string& expected) {
    int mtu = 0;
    std::string problem;
    EXPECT_FALSE(checkSender(wire::provenQpInfo(kListenKey, info, true), mine, 5, &mtu, &problem));
    EXPECT_NE(problem.find(expected), std::string::npos) << problem;
  };
  wire::QpInfo info = goodPeer(wire::kLinkLayerInfiniband);
  info.magic = wire::kHandleMagic;
  rejected(info, wire::kLinkLayerInfiniband, "magic");
  rejected(goodPeer(wire::kLinkLayerEthernet), wire::kLinkLayerInfiniband, "RoCE");
  info = goodPeer(wire::kLinkLayerInfiniband);
  info.qpn = 0;
  rejected(info, wire::kLinkLayerInfiniband, "queue pair number 0");
  info.qpn = 1u << 24;
  rejected(info, wire::kLinkLayerInfiniband, "out of range");
  info = goodPeer(wire::kLinkLayerInfiniband);
  info.lid = 0;
  rejected(info, wire::kLinkLayerInfiniband, "LID");
  info = goodPeer(wire::kLinkLayerInfiniband);
  info.mtu = 9;
  rejected(info, wire::kLinkLayerInfiniband, "MTU 9");
}

// A QpInfo must prove the listener's key, for the side that sent it: one made without the
// handle, with another listener's key, changed after it was proven, or a receiver's sent
// back to it as a sender's is refused before any queue pair is touched.
TEST(IbNetWire, QpInfoWithoutTheListenersKeyIsRefused) {
  auto refused = [](const wire::QpInfo& info, const char* what) {
    int mtu = 0;
    std::string problem;
    EXPECT_FALSE(checkSender(info, wire::kLinkLayerInfiniband, 5, &mtu, &problem)) << what;
    EXPECT_NE(problem.find("does not prove the listen handle's key"), std::string::npos) << what << ": " << problem;
  };
  wire::QpInfo unproven = goodPeer(wire::kLinkLayerInfiniband);
  unproven.proof = 0;
  refused(unproven, "no proof");
  refused(wire::provenQpInfo(SipKey{1, 2}, goodPeer(wire::kLinkLayerInfiniband), true), "another key");
  wire::QpInfo changed = goodPeer(wire::kLinkLayerInfiniband);
  changed.qpn = 0x4321;
  refused(changed, "changed after proving");
  refused(wire::provenQpInfo(kListenKey, goodPeer(wire::kLinkLayerInfiniband), /*fromSender=*/false),
          "a receiver's QpInfo reflected");
  int mtu = 0;
  std::string problem;
  EXPECT_TRUE(checkSender(goodPeer(wire::kLinkLayerInfiniband), wire::kLinkLayerInfiniband, 5, &mtu, &problem))
      << problem;
}

TEST(IbNetSettings, DefaultsMatchNccl) {
  ScopedEnv gid("NCCL_IB_GID_INDEX", nullptr), tc("NCCL_IB_TC", nullptr), sl("NCCL_IB_SL", nullptr),
      timeout("NCCL_IB_TIMEOUT", nullptr), retry("NCCL_IB_RETRY_CNT", nullptr);
  IbSettings settings = readIbSettings();
  EXPECT_EQ(settings.gidIndex, -1);
  EXPECT_EQ(settings.trafficClass, 0);
  EXPECT_EQ(settings.serviceLevel, 0);
  EXPECT_EQ(settings.timeout, 20);
  EXPECT_EQ(settings.retryCount, 7);
}

TEST(IbNetSettings, ValuesAreReadAndOutOfRangeOnesFallBackWithAWarning) {
  ScopedEnv gid("NCCL_IB_GID_INDEX", "3"), tc("NCCL_IB_TC", "106"), sl("NCCL_IB_SL", "16"),
      timeout("NCCL_IB_TIMEOUT", "22"), retry("NCCL_IB_RETRY_CNT", "5");
  clearLastError();
  IbSettings settings = readIbSettings();
  EXPECT_EQ(settings.gidIndex, 3);
  EXPECT_EQ(settings.trafficClass, 106);
  EXPECT_EQ(settings.serviceLevel, 0);
  EXPECT_TRUE(lastWarnMentions("NCCL_IB_SL=16", "[0, 15]")) << lastErrorText();
  EXPECT_EQ(settings.timeout, 22);
  EXPECT_EQ(settings.retryCount, 5);
  ScopedEnv badRetry("NCCL_IB_RETRY_CNT", "8"), badTimeout("NCCL_IB_TIMEOUT", "0");
  settings = readIbSettings();
  EXPECT_EQ(settings.retryCount, 7);
  EXPECT_EQ(settings.timeout, 20);
}

// ---- the verbs table and RAII ----

#if CHORUS_HAVE_IBVERBS

TEST(IbNetVerbsApi, MissingLibraryIsNamed) {
  IbVerbsApi api;
  std::string why;
  EXPECT_FALSE(loadIbVerbsApi("libchorus-no-such-verbs.so.1", &api, &why));
  EXPECT_NE(why.find("libchorus-no-such-verbs.so.1"), std::string::npos) << why;
  EXPECT_EQ(api.getDeviceList, nullptr);
}

TEST(IbNetVerbsApi, MissingFunctionIsNamed) {
  IbVerbsApi api;
  std::string why;
  EXPECT_FALSE(loadIbVerbsApi("libc.so.6", &api, &why));
  EXPECT_NE(why.find("ibv_get_device_list"), std::string::npos) << why;
  EXPECT_NE(why.find("libc.so.6"), std::string::npos) << why;
  EXPECT_EQ(api.library, nullptr) << "a failed load keeps nothing";
}

TEST(IbNetVerbsApi, InstalledLibraryResolvesEveryFunction) {
  IbVerbsApi api;
  std::string why;
  if (!loadIbVerbsApi(kIbVerbsLibrary, &api, &why)) GTEST_SKIP() << why;
  for (const void* fn :
       {(const void*)api.getDeviceList, (const void*)api.freeDeviceList, (const void*)api.getDeviceName,
        (const void*)api.openDevice, (const void*)api.closeDevice, (const void*)api.queryDevice,
        (const void*)api.queryPortCompat, (const void*)api.queryGid, (const void*)api.allocPd,
        (const void*)api.deallocPd, (const void*)api.regMrSymbol, (const void*)api.deregMr, (const void*)api.createCq,
        (const void*)api.destroyCq, (const void*)api.createQp, (const void*)api.destroyQp, (const void*)api.modifyQp,
        (const void*)api.wcStatusStr}) {
    EXPECT_NE(fn, nullptr);
  }
  EXPECT_STREQ(api.wcStatusStr(IBV_WC_SUCCESS), "success");
}

// A table whose release functions record what they release, to check RAII without an HCA.
std::vector<std::string> gReleased;
ibv_context gFakeContext;
ibv_pd gFakePd;

IbVerbsApi recordingApi() {
  IbVerbsApi api;
  api.getDeviceName = [](ibv_device*) -> const char* { return "fake0"; };
  api.openDevice = [](ibv_device*) { return &gFakeContext; };
  api.queryDevice = [](ibv_context*, ibv_device_attr* attr) {
    *attr = {};
    attr->phys_port_cnt = 2;
    return 0;
  };
  api.allocPd = [](ibv_context*) { return &gFakePd; };
  api.deallocPd = [](ibv_pd*) { return gReleased.push_back("pd"), 0; };
  api.closeDevice = [](ibv_context*) { return gReleased.push_back("context"), 0; };
  api.destroyCq = [](ibv_cq*) { return gReleased.push_back("cq"), 0; };
  api.destroyQp = [](ibv_qp*) { return gReleased.push_back("qp"), EBUSY; };
  return api;
}

TEST(IbNetRaii, OwnedObjectsAreReleasedOnceAndMovesTransferOwnership) {
  gReleased.clear();
  IbVerbsApi api = recordingApi();
  alignas(8) static std::array<char, 256> cqStorage{};
  {
    IbCq a(&api, reinterpret_cast<ibv_cq*>(cqStorage.data()));
    IbCq b(std::move(a));
    EXPECT_FALSE(a);
    IbCq c;
    c = std::move(b);
    EXPECT_TRUE(gReleased.empty());
  }
  EXPECT_EQ(gReleased, std::vector<std::string>{"cq"});
}

TEST(IbNetRaii, FailedReleaseIsWarnedAbout) {
  gReleased.clear();
  IbVerbsApi api = recordingApi();
  alignas(8) static std::array<char, 256> qpStorage{};
  clearLastError();
  { IbQp qp(&api, reinterpret_cast<ibv_qp*>(qpStorage.data())); }
  EXPECT_TRUE(lastWarnMentions("ibv_destroy_qp", strerror(EBUSY))) << lastErrorText();
}

TEST(IbNetRaii, DeviceReleasesItsProtectionDomainBeforeItsContext) {
  gReleased.clear();
  IbVerbsApi api = recordingApi();
  std::shared_ptr<IbDevice> device;
  ASSERT_EQ(IbDevice::open(&api, nullptr, &device), ncclSuccess);
  EXPECT_EQ(device->name(), "fake0");
  EXPECT_EQ(device->attr().phys_port_cnt, 2);
  std::shared_ptr<IbDevice> sharedByAComm = device;
  device.reset();
  EXPECT_TRUE(gReleased.empty()) << "still shared";
  sharedByAComm.reset();
  EXPECT_EQ(gReleased, (std::vector<std::string>{"pd", "context"}));
}

TEST(IbNetRaii, RegistrationRangeCheck) {
  std::array<char, 64> buffer{};
  IbMemory memory;
  memory.begin = reinterpret_cast<uintptr_t>(buffer.data() + 16);
  memory.length = 32;
  EXPECT_TRUE(memory.contains(buffer.data() + 16, 32));
  EXPECT_TRUE(memory.contains(buffer.data() + 20, 4));
  EXPECT_TRUE(memory.contains(buffer.data() + 48, 0));
  EXPECT_FALSE(memory.contains(buffer.data() + 15, 4));
  EXPECT_FALSE(memory.contains(buffer.data() + 17, 32));
  EXPECT_FALSE(memory.contains(buffer.data() + 16, 33));
  EXPECT_FALSE(memory.contains(buffer.data() + 20, SIZE_MAX));
  EXPECT_EQ(memory.lkey(), 0u);
}

#endif  // CHORUS_HAVE_IBVERBS

// ---- the Net ----

bool machineHasHcas() {
  std::error_code error;
  return std::filesystem::exists("/sys/class/infiniband", error) &&
         !std::filesystem::is_empty("/sys/class/infiniband", error);
}

TEST(IbNetInit, WithoutHcasInitFailsWithOneInfoLine) {
  if (machineHasHcas()) GTEST_SKIP() << "this machine has HCAs";
  ScopedEnv hca("NCCL_IB_HCA", nullptr);
  auto net = makeIbNet();
  EXPECT_STREQ(net->name(), "IB");
  std::vector<std::string> lines;
  {
    ScopedLogCapture capture;
    EXPECT_EQ(net->init(), ncclSystemError);
    lines = capture.stop();
  }
  std::vector<std::string> ib;
  for (const std::string& line : lines) {
    if (line.find("NET/IB") != std::string::npos) ib.push_back(line);
  }
  ASSERT_EQ(ib.size(), 1u) << "log:\n" << ::testing::PrintToString(lines);
  EXPECT_NE(ib[0].find("NCCL INFO"), std::string::npos) << ib[0];
  EXPECT_NE(ib[0].find("socket net will be used"), std::string::npos) << ib[0];
#if !CHORUS_HAVE_IBVERBS
  EXPECT_NE(ib[0].find("built without libibverbs"), std::string::npos) << ib[0];
#endif
  int count = -1;
  EXPECT_EQ(net->devices(&count), ncclSuccess);
  EXPECT_EQ(count, 0);
  NetProperties props;
  EXPECT_EQ(net->getProperties(0, &props), ncclInvalidArgument);
  EXPECT_EQ(net->init(), ncclSystemError) << "init may be retried and fails the same way";
}

// Every method, before and after a failed init: bad arguments give ncclInvalidArgument
// with a WARN naming them, and outputs are cleared.
class IbNetArguments : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    net_ = makeIbNet();
    if (GetParam() && !machineHasHcas()) net_->init();
  }
  void expectInvalid(ncclResult_t result, const std::string& mention) {
    EXPECT_EQ(result, ncclInvalidArgument);
    EXPECT_TRUE(lastWarnMentions("NET/IB", mention)) << lastErrorText();
    clearLastError();
  }
  std::unique_ptr<Net> net_;
  alignas(16) std::array<char, 512> garbage_{};  // zeroes: no magic of any object
  std::array<char, kNetHandleSize> handle_{};
};

TEST_P(IbNetArguments, DeviceQueries) {
  expectInvalid(net_->devices(nullptr), "null count");
  NetProperties props;
  expectInvalid(net_->getProperties(0, nullptr), "null properties");
  expectInvalid(net_->getProperties(-1, &props), "device -1");
  expectInvalid(net_->getProperties(99, &props), "device 99");
}

TEST_P(IbNetArguments, ListenConnectAccept) {
  NetListenComm* listen = reinterpret_cast<NetListenComm*>(1);
  expectInvalid(net_->listen(0, nullptr, &listen), "null handle");
  expectInvalid(net_->listen(0, handle_.data(), nullptr), "listenComm");
  expectInvalid(net_->listen(-1, handle_.data(), &listen), "device -1");
  EXPECT_EQ(listen, nullptr);

  NetSendComm* send = reinterpret_cast<NetSendComm*>(1);
  expectInvalid(net_->connect(0, nullptr, &send), "null handle");
  expectInvalid(net_->connect(0, handle_.data(), nullptr), "sendComm");
  send = reinterpret_cast<NetSendComm*>(1);
  expectInvalid(net_->connect(0, handle_.data(), &send), "");
  EXPECT_EQ(send, nullptr);
#if CHORUS_HAVE_IBVERBS
  expectInvalid(net_->connect(0, handle_.data(), &send), "not an IB net handle");
  // A socket net handle is not an IB net handle either.
  socket_net_wire::Handle socketHandle{socket_net_wire::kHandleMagic, 1, 16, {}, {0, 0}, 0};
  memcpy(handle_.data(), &socketHandle, sizeof(socketHandle));
  expectInvalid(net_->connect(0, handle_.data(), &send), "not an IB net handle");
  // A well-formed handle still needs a device.
  SocketAddress loopback;
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(1);
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_TRUE(loopback.assign(reinterpret_cast<sockaddr*>(&in), sizeof(in)));
  wire::Handle ibHandle{wire::kHandleMagic, loopback.length(), {}, 0, {0, 0}};
  memcpy(ibHandle.address, &in, sizeof(in));
  memcpy(handle_.data(), &ibHandle, sizeof(ibHandle));
  expectInvalid(net_->connect(3, handle_.data(), &send), "device 3");
  ibHandle.addressLength = 200;
  memcpy(handle_.data(), &ibHandle, sizeof(ibHandle));
  expectInvalid(net_->connect(0, handle_.data(), &send), "address length 200");
#endif

  NetRecvComm* recv = reinterpret_cast<NetRecvComm*>(1);
  expectInvalid(net_->accept(nullptr, &recv), "accept");
  recv = reinterpret_cast<NetRecvComm*>(1);
  expectInvalid(net_->accept(reinterpret_cast<NetListenComm*>(garbage_.data()), &recv), "not a listen comm");
  EXPECT_EQ(recv, nullptr);
  expectInvalid(net_->closeListen(nullptr), "closeListen");
  expectInvalid(net_->closeListen(reinterpret_cast<NetListenComm*>(garbage_.data())), "not a listen comm");
}

TEST_P(IbNetArguments, MemoryRegistration) {
  std::array<char, 64> buffer{};
  NetMemHandle* mhandle = reinterpret_cast<NetMemHandle*>(1);
  expectInvalid(net_->regMr(nullptr, buffer.data(), buffer.size(), kNetPtrHost, &mhandle), "regMr");
  EXPECT_EQ(net_->regMr(garbage_.data(), buffer.data(), buffer.size(), kNetPtrHost, nullptr), ncclInvalidArgument);
  clearLastError();
  expectInvalid(net_->regMr(garbage_.data(), buffer.data(), buffer.size(), kNetPtrHost, &mhandle), "not a");
  EXPECT_EQ(mhandle, nullptr);
#if CHORUS_HAVE_IBVERBS
  expectInvalid(net_->regMr(garbage_.data(), nullptr, 64, kNetPtrHost, &mhandle), "null data");
  // GPU memory is registered too (through nvidia-peermem, or a dma-buf): the comm is what is wrong.
  expectInvalid(net_->regMr(garbage_.data(), buffer.data(), buffer.size(), kNetPtrCuda, &mhandle), "not a");
  expectInvalid(net_->regMr(garbage_.data(), buffer.data(), buffer.size(), 8, &mhandle), "memory type 8");
  expectInvalid(net_->regMrDmaBuf(garbage_.data(), buffer.data(), buffer.size(), kNetPtrHost, 0, 3, &mhandle),
                "memory type 1");
  expectInvalid(net_->regMrDmaBuf(garbage_.data(), buffer.data(), buffer.size(), kNetPtrCuda, 0, -1, &mhandle),
                "no dma-buf descriptor");
  expectInvalid(net_->regMrDmaBuf(garbage_.data(), buffer.data(), buffer.size(), kNetPtrCuda, 0, 3, &mhandle), "not a");
  expectInvalid(net_->deregMr(garbage_.data(), nullptr), "null comm or mhandle");
#endif
  expectInvalid(net_->deregMr(nullptr, reinterpret_cast<NetMemHandle*>(garbage_.data())), "deregMr");
  expectInvalid(net_->deregMr(garbage_.data(), reinterpret_cast<NetMemHandle*>(garbage_.data())), "not a");
}

TEST_P(IbNetArguments, DataPath) {
  std::array<char, 64> buffer{};
  auto* send = reinterpret_cast<NetSendComm*>(garbage_.data());
  auto* recv = reinterpret_cast<NetRecvComm*>(garbage_.data());
  NetRequest* request = reinterpret_cast<NetRequest*>(1);
  expectInvalid(net_->isend(nullptr, buffer.data(), 8, 0, nullptr, &request), "isend");
  EXPECT_EQ(request, nullptr);
  expectInvalid(net_->isend(send, buffer.data(), 8, 0, nullptr, nullptr), "isend");
#if CHORUS_HAVE_IBVERBS
  expectInvalid(net_->isend(send, buffer.data(), -1, 0, nullptr, &request), "-1 bytes");
  expectInvalid(net_->isend(send, nullptr, 8, 0, nullptr, &request), "bad buffer");
#endif
  expectInvalid(net_->isend(send, buffer.data(), 8, 0, nullptr, &request), "not a send comm");

  void* data = buffer.data();
  int size = 8;
  int tag = 0;
  expectInvalid(net_->irecv(nullptr, 1, &data, &size, &tag, nullptr, &request), "irecv");
#if CHORUS_HAVE_IBVERBS
  expectInvalid(net_->irecv(recv, 1, nullptr, &size, &tag, nullptr, &request), "null comm, data");
  expectInvalid(net_->irecv(recv, 2, &data, &size, &tag, nullptr, &request), "2 receives");
  expectInvalid(net_->irecv(recv, 0, &data, &size, &tag, nullptr, &request), "0 receives");
  int negative = -5;
  expectInvalid(net_->irecv(recv, 1, &data, &negative, &tag, nullptr, &request), "-5 bytes");
#endif
  expectInvalid(net_->irecv(recv, 1, &data, &size, &tag, nullptr, &request), "not a receive comm");
  EXPECT_EQ(request, nullptr);

  expectInvalid(net_->iflush(nullptr, 1, &data, &size, nullptr, &request), "iflush");
  expectInvalid(net_->iflush(recv, 1, &data, &size, nullptr, &request), "not a receive comm");
#if CHORUS_HAVE_IBVERBS
  expectInvalid(net_->iflush(recv, 0, &data, &size, nullptr, &request), "n < 1");
#endif

  int done = 1;
  expectInvalid(net_->test(nullptr, &done, nullptr), "test");
  expectInvalid(net_->test(reinterpret_cast<NetRequest*>(garbage_.data()), nullptr, nullptr), "test");
  expectInvalid(net_->test(reinterpret_cast<NetRequest*>(garbage_.data()), &done, nullptr), "not a request");

  expectInvalid(net_->closeSend(nullptr), "closeSend");
  expectInvalid(net_->closeSend(send), "not a send comm");
  expectInvalid(net_->closeRecv(nullptr), "closeRecv");
  expectInvalid(net_->closeRecv(recv), "not a receive comm");
}

INSTANTIATE_TEST_SUITE_P(IbNet, IbNetArguments, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "AfterFailedInit" : "BeforeInit"; });

}  // namespace
}  // namespace chorus
