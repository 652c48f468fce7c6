// External net plugins: NCCL_NET_PLUGIN lookup (none, missing, no table) and the
// NetPluginAdapter driving a real dlopen'ed plugin (SocketNet behind ncclNet_v8, ncclNet_v10
// and ncclNet_v11) over loopback with exact bytes, with each connection's traffic class.
#include "transport/net/net_plugin.h"

#include <gtest/gtest.h>

#include <string>

#include "core/debug.h"
#include "socket_net_fixture.h"

namespace chorus {
namespace {

using namespace socket_net_test;

constexpr const char* kPluginDir = CHORUS_TEST_NET_PLUGIN_DIR;
constexpr const char* kMarker = "net_plugin_test: no WARN since this";

// Loads the plugin NCCL_NET_PLUGIN (as set by the test) selects.
ncclResult_t loadFromEnv(std::unique_ptr<Net>* out) { return loadNetPlugin(getenv("NCCL_NET_PLUGIN"), out); }

// Makes lastErrorText() a known marker, so a later WARN shows as a change.
void markLastError() { WARN("%s", kMarker); }

class NetPluginTest : public SocketNetTest {};

TEST_F(NetPluginTest, NoneLoadsNothingAndWarnsNothing) {
  ScopedEnv plugin("NCCL_NET_PLUGIN", "none");
  markLastError();
  std::unique_ptr<Net> net;
  ASSERT_EQ(loadFromEnv(&net), ncclSuccess);
  EXPECT_EQ(net, nullptr);
  EXPECT_STREQ(lastErrorText(), kMarker);
}

TEST_F(NetPluginTest, UnsetTriesTheDefaultLibraryWithoutWarning) {
  ScopedEnv plugin("NCCL_NET_PLUGIN", nullptr);
  markLastError();
  std::unique_ptr<Net> net;
  ASSERT_EQ(loadFromEnv(&net), ncclSuccess);
  if (net != nullptr) GTEST_SKIP() << "a libnccl-net.so is installed on this machine";
  EXPECT_STREQ(lastErrorText(), kMarker) << "a missing default plugin is not worth a WARN";
}

TEST_F(NetPluginTest, MissingNamedPluginWarnsWithThePathAndLoadsNothing) {
  ScopedEnv plugin("NCCL_NET_PLUGIN", "no_such_plugin_zz");
  markLastError();
  std::unique_ptr<Net> net;
  ASSERT_EQ(loadFromEnv(&net), ncclSuccess);
  EXPECT_EQ(net, nullptr);
  std::string warning = lastErrorText();
  EXPECT_NE(warning.find("libnccl-net-no_such_plugin_zz.so"), std::string::npos) << warning;
  EXPECT_NE(warning.find("cannot open shared object file"), std::string::npos) << "dlerror() missing: " << warning;
}

TEST_F(NetPluginTest, LibraryWithoutAPluginTableIsRefused) {
  ScopedEnv plugin("NCCL_NET_PLUGIN", "libm.so.6");  // loads fine, exports no ncclNetPlugin_v*
  markLastError();
  std::unique_ptr<Net> net;
  ASSERT_EQ(loadFromEnv(&net), ncclSuccess);
  EXPECT_EQ(net, nullptr);
  std::string warning = lastErrorText();
  EXPECT_NE(warning.find("libm.so.6"), std::string::npos) << warning;
  EXPECT_NE(warning.find("ncclNetPlugin_v8"), std::string::npos) << warning;
}

TEST_F(NetPluginTest, NullOutIsRejected) { EXPECT_EQ(loadNetPlugin("none", nullptr), ncclInvalidArgument); }

struct PluginCase {
  const char* setting;  // NCCL_NET_PLUGIN: a name, or "" for the full path of the library
  const char* file;
  const char* tableName;
  int version;
};

class NetPluginAbiTest : public NetPluginTest, public ::testing::WithParamInterface<PluginCase> {
 protected:
  // Loads the case's plugin and checks what the loader reports about it.
  void load(std::unique_ptr<Net>* net) {
    const PluginCase& c = GetParam();
    std::string fullPath = std::string(kPluginDir) + "/" + c.file;
    ScopedEnv plugin("NCCL_NET_PLUGIN", c.setting[0] != '\0' ? c.setting : fullPath.c_str());
    ASSERT_EQ(loadFromEnv(net), ncclSuccess);
    ASSERT_NE(*net, nullptr) << lastErrorText();
    auto* adapter = dynamic_cast<NetPluginAdapter*>(net->get());
    ASSERT_NE(adapter, nullptr);
    EXPECT_STREQ(adapter->name(), c.tableName);
    EXPECT_EQ(adapter->version(), c.version);
    EXPECT_NE(adapter->path().find(c.file), std::string::npos) << adapter->path();
  }
};

TEST_P(NetPluginAbiTest, LoadsAndReportsLoopbackDevice) {
  std::unique_ptr<Net> net;
  ASSERT_NO_FATAL_FAILURE(load(&net));
  int count = -1;
  EXPECT_EQ(net->devices(&count), ncclInternalError) << "devices before init";
  ASSERT_EQ(net->init(), ncclSuccess);
  ASSERT_EQ(net->devices(&count), ncclSuccess);
  ASSERT_EQ(count, 1);
  NetProperties props;
  ASSERT_EQ(net->getProperties(0, &props), ncclSuccess);
  EXPECT_EQ(props.name, "lo");
  EXPECT_EQ(props.ptrSupport, kNetPtrHost);
  EXPECT_EQ(props.maxRecvs, 1);
  EXPECT_GT(props.speed, 0);
  EXPECT_GT(props.maxComms, 0);
  EXPECT_EQ(net->getProperties(1, &props), ncclInvalidArgument);
  EXPECT_EQ(net->getProperties(-1, &props), ncclInvalidArgument);
  EXPECT_EQ(net->getProperties(0, nullptr), ncclInvalidArgument);
}

TEST_P(NetPluginAbiTest, MovesExactBytesOverLoopback) {
  std::unique_ptr<Net> net;
  ASSERT_NO_FATAL_FAILURE(load(&net));
  ASSERT_EQ(net->init(), ncclSuccess);
  Connection c;
  ASSERT_NO_FATAL_FAILURE(connectPair(*net, &c));
  uint32_t seed = 1;
  for (size_t size : {size_t{0}, size_t{1}, size_t{(1 << 20) + 3}}) {
    SCOPED_TRACE("size " + std::to_string(size));
    ASSERT_NO_FATAL_FAILURE(transfer(*net, c, size, size + 16, seed++));
  }
  // Memory registration goes through the table too (the socket net accepts host memory).
  std::vector<char> buffer(64);
  NetMemHandle* mhandle = nullptr;
  ASSERT_EQ(net->regMr(c.send, buffer.data(), buffer.size(), kNetPtrHost, &mhandle), ncclSuccess);
  EXPECT_EQ(net->deregMr(c.send, mhandle), ncclSuccess);
  EXPECT_EQ(net->closeSend(c.send), ncclSuccess);
  EXPECT_EQ(net->closeRecv(c.recv), ncclSuccess);
  EXPECT_EQ(net->closeListen(c.listen), ncclSuccess);
  EXPECT_EQ(net->closeSend(c.send), ncclInvalidArgument) << "a closed comm is not passed to the plugin again";
}

TEST_P(NetPluginAbiTest, RejectsBadArgumentsWithoutCallingThePlugin) {
  std::unique_ptr<Net> net;
  ASSERT_NO_FATAL_FAILURE(load(&net));
  ASSERT_EQ(net->init(), ncclSuccess);
  Handle handle{};
  NetListenComm* listen = nullptr;
  EXPECT_EQ(net->listen(1, handle.data(), &listen), ncclInvalidArgument);
  EXPECT_EQ(net->listen(0, nullptr, &listen), ncclInvalidArgument);
  NetSendComm* send = nullptr;
  EXPECT_EQ(net->connect(0, handle.data(), nullptr), ncclInvalidArgument);
  EXPECT_EQ(net->connect(-1, handle.data(), &send), ncclInvalidArgument);
  NetRecvComm* recv = nullptr;
  int bogus = 0;
  EXPECT_EQ(net->accept(reinterpret_cast<NetListenComm*>(&bogus), &recv), ncclInvalidArgument);
  EXPECT_EQ(net->closeRecv(reinterpret_cast<NetRecvComm*>(&bogus)), ncclInvalidArgument);
  NetRequest* request = nullptr;
  char byte = 0;
  EXPECT_EQ(net->isend(reinterpret_cast<NetSendComm*>(&bogus), &byte, -1, 0, nullptr, &request), ncclInvalidArgument);
  void* data = &byte;
  int size = 1;
  int tag = 0;
  EXPECT_EQ(net->irecv(reinterpret_cast<NetRecvComm*>(&bogus), 0, &data, &size, &tag, nullptr, &request),
            ncclInvalidArgument);
  EXPECT_EQ(net->test(nullptr, &bogus, nullptr), ncclInvalidArgument);
  std::string warning = lastErrorText();
  EXPECT_NE(warning.find(GetParam().tableName), std::string::npos) << "WARN names the plugin: " << warning;
}

TEST_P(NetPluginAbiTest, DestroyingTheAdapterClosesCommsLeftOpen) {
  int fdsBefore = openFdCount();
  {
    std::unique_ptr<Net> net;
    ASSERT_NO_FATAL_FAILURE(load(&net));
    ASSERT_EQ(net->init(), ncclSuccess);
    Connection c;
    ASSERT_NO_FATAL_FAILURE(connectPair(*net, &c));
    ASSERT_NO_FATAL_FAILURE(transfer(*net, c, 100, 100, 7));
    EXPECT_GT(openFdCount(), fdsBefore);
  }
  EXPECT_EQ(openFdCount(), fdsBefore) << "sockets of comms left open outlived the adapter";
}

// v10 carries the class in connect's config; v11 in the config of the context init makes,
// so the adapter needs one context per class (each finalized when it goes: the test plugin's
// contexts hold a descriptor, and finalizing one it did not make is a WARN).
TEST_P(NetPluginAbiTest, EachConnectionGetsItsTrafficClass) {
  if (GetParam().version < 10) GTEST_SKIP() << "ncclNet_v" << GetParam().version << " cannot carry a traffic class";
  constexpr int kClasses[] = {0x28, 0x48};  // DSCP AF11 and AF21
  for (int trafficClass : kClasses) ASSERT_EQ(socketsWithTrafficClass(trafficClass), 0);
  const int fdsBefore = openFdCount();
  markLastError();
  {
    std::unique_ptr<Net> net;
    ASSERT_NO_FATAL_FAILURE(load(&net));
    ASSERT_EQ(net->init(), ncclSuccess);
    Connection plain;
    Connection first;
    Connection second;
    ASSERT_NO_FATAL_FAILURE(connectPair(*net, &plain));
    ASSERT_NO_FATAL_FAILURE(connectPair(*net, &first, NetCommConfig{kClasses[0]}));
    ASSERT_NO_FATAL_FAILURE(connectPair(*net, &second, NetCommConfig{kClasses[1]}));
    uint32_t seed = 11;
    for (const Connection* c : {&plain, &first, &second}) {
      ASSERT_NO_FATAL_FAILURE(transfer(*net, *c, 4099, 4099, seed++));
    }
    const int firstSockets = socketsWithTrafficClass(kClasses[0]);
    EXPECT_GE(firstSockets, 1) << "the first class never reached the plugin's sockets";
    EXPECT_EQ(socketsWithTrafficClass(kClasses[1]), firstSockets) << "one connection's sockets for each class";
  }
  EXPECT_EQ(openFdCount(), fdsBefore) << "a comm or a context outlived the adapter";
  EXPECT_STREQ(lastErrorText(), kMarker);
}

INSTANTIATE_TEST_SUITE_P(
    NetPlugin, NetPluginAbiTest,
    ::testing::Values(PluginCase{"chorustest", "libnccl-net-chorustest.so", "chorustest-v8", 8},
                      PluginCase{"chorustest10", "libnccl-net-chorustest10.so", "chorustest-v10", 10},
                      PluginCase{"chorustest11", "libnccl-net-chorustest11.so", "chorustest-v11", 11},
                      PluginCase{"", "libnccl-net-chorustest.so", "chorustest-v8", 8},
                      PluginCase{"", "libnccl-net-chorustest10.so", "chorustest-v10", 10},
                      PluginCase{"", "libnccl-net-chorustest11.so", "chorustest-v11", 11}),
    [](const ::testing::TestParamInfo<PluginCase>& info) {
      return std::string(info.param.setting[0] != '\0' ? "ByName" : "ByPath") + "V" +
             std::to_string(info.param.version);
    });

}  // namespace
}  // namespace chorus
