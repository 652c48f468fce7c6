// The IB net: Net over InfiniBand or RoCE verbs, one device per usable HCA port, with
// NCCL's settings (NCCL_IB_HCA, NCCL_IB_GID_INDEX, NCCL_IB_TC, NCCL_IB_SL,
// NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT). libibverbs is dlopened by init(), so the library
// loads on machines without rdma-core; there, and where no port is usable, init() fails
// with one INFO line and the caller falls back to the socket net.
//
// Each connection is one RC queue pair set up over a TCP connection (ib_connect.h);
// messages are SEND/RECV verbs into registered host memory (ib_comm.h). The parts:
// ib_verbs_api (the dlopened table), ib_hca_list (NCCL_IB_HCA), ib_port_attrs (speed,
// MTU, GID choice), ib_device (RAII verbs objects, port discovery), ib_net_wire (the
// out-of-band messages). This file owns the ports and the maps from opaque handles to
// objects, and validates every argument.
#pragma once

#include <memory>

#include "transport/net/net.h"

namespace chorus {

// A new, uninitialized IB net (name "IB"). Built without <infiniband/verbs.h>, its init()
// fails with an INFO saying so.
std::unique_ptr<Net> makeIbNet();

}  // namespace chorus
