#include "transport/net/ib_connect.h"

#include "core/debug.h"
#include "core/env.h"

namespace chorus {

IbSettings readIbSettings() {
  IbSettings settings;
  settings.gidIndex = static_cast<int>(envIntInRange("NCCL_IB_GID_INDEX", -1, -1, 65535));
  settings.trafficClass = static_cast<int>(envIntInRange("NCCL_IB_TC", 0, 0, 255));
  settings.serviceLevel = static_cast<int>(envIntInRange("NCCL_IB_SL", 0, 0, 15));
  settings.timeout = static_cast<int>(envIntInRange("NCCL_IB_TIMEOUT", 20, 1, 31));
  settings.retryCount = static_cast<int>(envIntInRange("NCCL_IB_RETRY_CNT", 7, 0, 7));
  return settings;
}

}  // namespace chorus

#if CHORUS_HAVE_IBVERBS

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

namespace chorus {

using namespace ib_net_wire;

namespace {

constexpr auto kHandshakeTimeout = std::chrono::seconds(30);
constexpr size_t kMaxPending = 256;
constexpr int kCqEntries = 2 * IbComm::kMaxRequests;

uint32_t randomPsn() {
  static thread_local std::mt19937 generator{std::random_device{}()};
  return generator() & 0xffffff;
}

}  // namespace

IbHandshake::IbHandshake(bool sending, const IbPort& port, const IbSettings& settings, const SipKey& key,
                         TcpStream stream)
    : sending_(sending), port_(port), settings_(settings), key_(key), stream_(std::move(stream)), psn_(randomPsn()) {
  static constexpr Step kSender[] = {Step::Connect,   Step::CreateQp,  Step::SendInfo, Step::RecvInfo,
                                     Step::ConnectQp, Step::SendReady, Step::Done};
  static constexpr Step kReceiver[] = {Step::RecvInfo, Step::CreateQp,  Step::ConnectQp,
                                       Step::SendInfo, Step::RecvReady, Step::Done};
  step_ = sending ? kSender : kReceiver;
}

ncclResult_t IbHandshake::progress(bool* done) {
  for (;;) {
    if (*step_ == Step::Done) break;
    bool finished = false;
    CHORUS_CHECK(runStep(*step_, &finished));
    if (!finished) break;
    ++step_;
    moved_ = 0;
  }
  *done = *step_ == Step::Done;
  return ncclSuccess;
}

ncclResult_t IbHandshake::runStep(Step step, bool* finished) {
  *finished = true;
  switch (step) {
    case Step::Connect:
      return stream_.pollConnected(finished);
    case Step::CreateQp:
      return createQp();
    case Step::SendInfo:
      return sendPart(&mine_, sizeof(mine_), finished);
    case Step::RecvInfo:
      CHORUS_CHECK(recvPart(&peer_, sizeof(peer_), "its queue pair description", finished));
      // The proof first: a receiver creates no queue pair for a peer without the handle.
      if (*finished && (peer_.magic != kQpInfoMagic || peer_.proof != qpInfoProof(key_, peer_, !sending_))) {
        WARN(
            "NET/IB : %s sent a queue pair description that does not prove the listen handle's key "
            "(not a rank of this communicator)",
            peerName().c_str());
        return ncclRemoteError;
      }
      return ncclSuccess;
    case Step::ConnectQp:
      return connectQp();
    case Step::SendReady:
      return sendPart(&ready_, sizeof(ready_), finished);
    case Step::RecvReady:
      CHORUS_CHECK(recvPart(&ready_, sizeof(ready_), "the ready byte", finished));
      if (*finished && ready_ != kReadyByte) {
        WARN("NET/IB : %s sent %#x instead of the ready byte", peerName().c_str(), ready_);
        return ncclRemoteError;
      }
      return ncclSuccess;
    case Step::Done:
      return ncclSuccess;
  }
  return ncclInternalError;
}

ncclResult_t IbHandshake::sendPart(const void* data, size_t size, bool* finished) {
  size_t sent = 0;
  CHORUS_CHECK(stream_.sendSome(static_cast<const char*>(data) + moved_, size - moved_, &sent));
  moved_ += sent;
  *finished = moved_ == size;
  return ncclSuccess;
}

ncclResult_t IbHandshake::recvPart(void* data, size_t size, const char* what, bool* finished) {
  size_t received = 0;
  bool closed = false;
  CHORUS_CHECK(stream_.recvSome(static_cast<char*>(data) + moved_, size - moved_, &received, &closed));
  moved_ += received;
  *finished = moved_ == size;
  if (!*finished && closed) {
    WARN("NET/IB : %s closed the connection before sending %s (%zu of %zu bytes)", peerName().c_str(), what, moved_,
         size);
    return ncclRemoteError;
  }
  return ncclSuccess;
}

ncclResult_t IbHandshake::modifyQp(ibv_qp_attr* attr, int mask, const char* state) {
  int error = port_.device->api().modifyQp(qp_.get(), attr, mask);
  if (error != 0) {
    WARN("NET/IB : moving the queue pair on %s (peer %s) to %s failed: %s", port_.name.c_str(), peerName().c_str(),
         state, strerror(error));
    failedLocally_ = true;
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t IbHandshake::createQp() {
  const IbVerbsApi& api = port_.device->api();
  cq_ = IbCq(&api, api.createCq(port_.device->context(), kCqEntries, nullptr, nullptr, 0));
  if (!cq_) {
    WARN("NET/IB : ibv_create_cq(%d entries) on %s failed: %s", kCqEntries, port_.name.c_str(), strerror(errno));
    failedLocally_ = true;
    return ncclSystemError;
  }
  ibv_qp_init_attr init{};
  init.send_cq = cq_.get();
  init.recv_cq = cq_.get();
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = IbComm::kMaxRequests;
  init.cap.max_recv_wr = IbComm::kMaxRequests;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  qp_ = IbQp(&api, api.createQp(port_.device->pd(), &init));
  if (!qp_) {
    WARN("NET/IB : ibv_create_qp (RC) on %s failed: %s", port_.name.c_str(), strerror(errno));
    failedLocally_ = true;
    return ncclSystemError;
  }
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = static_cast<uint8_t>(port_.port);
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  CHORUS_CHECK(modifyQp(&attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT"));
  mine_ = provenQpInfo(key_,
                       QpInfo{kQpInfoMagic, qp_.get()->qp_num, psn_, port_.lid, port_.linkLayer,
                              static_cast<uint8_t>(port_.activeMtu), port_.gid, 0},
                       sending_);
  return ncclSuccess;
}

ncclResult_t IbHandshake::connectQp() {
  int pathMtu = 0;
  std::string problem;
  if (!checkPeerQpInfo(peer_, key_, !sending_, port_.linkLayer, port_.activeMtu, &pathMtu, &problem)) {
    WARN("NET/IB : cannot connect %s to %s: %s", port_.name.c_str(), peerName().c_str(), problem.c_str());
    return ncclRemoteError;
  }
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = static_cast<ibv_mtu>(pathMtu);
  attr.dest_qp_num = peer_.qpn;
  attr.rq_psn = peer_.psn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;  // 0.64 ms before the sender retries a SEND that found no receive
  attr.ah_attr.port_num = static_cast<uint8_t>(port_.port);
  attr.ah_attr.sl = static_cast<uint8_t>(settings_.serviceLevel);
  if (port_.linkLayer == kLinkLayerEthernet) {
    attr.ah_attr.is_global = 1;
    memcpy(attr.ah_attr.grh.dgid.raw, peer_.gid.data(), sizeof(attr.ah_attr.grh.dgid.raw));
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(port_.gidIndex);
    attr.ah_attr.grh.hop_limit = 255;
    attr.ah_attr.grh.traffic_class = static_cast<uint8_t>(settings_.trafficClass);
  } else {
    attr.ah_attr.dlid = peer_.lid;
  }
  CHORUS_CHECK(modifyQp(&attr,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                        "RTR"));
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = static_cast<uint8_t>(settings_.timeout);
  attr.retry_cnt = static_cast<uint8_t>(settings_.retryCount);
  attr.rnr_retry = 7;  // retry forever: a SEND may arrive before its receive is posted
  attr.sq_psn = psn_;
  attr.max_rd_atomic = 1;
  CHORUS_CHECK(modifyQp(
      &attr,
      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
      "RTS"));
  INFO(kSubsysNet, "NET/IB : %s qp %u connected to %s qp %u (%s, path MTU %d)", port_.name.c_str(), mine_.qpn,
       peerName().c_str(), peer_.qpn, linkLayerName(port_.linkLayer), ibMtuBytes(pathMtu));
  return ncclSuccess;
}

std::unique_ptr<IbComm> IbHandshake::takeComm() {
  return std::make_unique<IbComm>(sending_, port_, std::move(cq_), std::move(qp_), std::move(stream_));
}

ncclResult_t IbListener::progress(std::unique_ptr<IbComm>* comm) {
  while (pending_.size() < kMaxPending) {
    TcpStream stream;
    bool exhausted = false;
    CHORUS_CHECK(TcpStream::tryAccept(socket_, &stream, &exhausted));
    if (exhausted) {  // the oldest handshake not yet done goes, to make room
      const size_t shed = pending_.empty() ? 0 : 1;
      if (shed) pending_.erase(pending_.begin());
      warnOutOfDescriptors("NET/IB listener", shed);
      break;
    }
    if (!stream.valid()) break;
    pending_.push_back(std::make_unique<IbHandshake>(/*sending=*/false, port_, settings_, key_, std::move(stream)));
  }
  for (size_t i = 0; i < pending_.size();) {
    IbHandshake& handshake = *pending_[i];
    bool done = false;
    ncclResult_t result = handshake.progress(&done);
    if (result == ncclSuccess && done) {
      *comm = handshake.takeComm();
      pending_.erase(pending_.begin() + i);
      return ncclSuccess;
    }
    bool late = result == ncclSuccess && IbHandshake::Clock::now() - handshake.since() > kHandshakeTimeout;
    if (result == ncclSuccess && !late) {
      ++i;
      continue;
    }
    if (result != ncclSuccess && handshake.failedLocally()) {
      pending_.erase(pending_.begin() + i);
      return result;
    }
    if (late) {
      WARN("NET/IB : dropping the connection from %s on %s: its setup took more than %lld s",
           handshake.peerName().c_str(), address().c_str(), static_cast<long long>(kHandshakeTimeout.count()));
    } else {
      WARN("NET/IB : dropping the connection from %s on %s (see above)", handshake.peerName().c_str(),
           address().c_str());
    }
    pending_.erase(pending_.begin() + i);
  }
  return ncclSuccess;
}

}  // namespace chorus

#endif  // CHORUS_HAVE_IBVERBS
