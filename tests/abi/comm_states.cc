// A program built against NVIDIA's nccl.h (2.28) and run on Chorus, the way users run
// things: one thread drives every rank of ncclCommInitAll on host memory, and every
// answer is checked against what NVIDIA's NCCL answers (error codes measured on NCCL
// 2.29-2.31): splits and their bad configs, use before a non-blocking set-up has
// finished, NULL handles, PreMulSum's refusals, count-0 calls, shrink and its
// refusals, ncclCommInitRankScalable over two roots, windows, revoke (a collective
// stuck on an absent peer is released) and finalize. Exit status 1 on any mismatch.
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

static int g_bad = 0;
static void expect(bool ok, const char* what) {
  if (!ok) ++g_bad;
  std::printf("%-60s %s\n", what, ok ? "ok" : "BAD");
}
static void expect_rc(ncclResult_t got, ncclResult_t want, const char* what) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s -> %d (want %d)", what, (int)got, (int)want);
  expect(got == want, buf);
}
static int n = 4;
static ncclResult_t settle(ncclComm_t c) {
  ncclResult_t e = ncclInProgress;
  while (e == ncclInProgress)
    if (ncclCommGetAsyncError(c, &e) != ncclSuccess) return ncclInternalError;
  return e;
}
static bool order(const std::vector<ncclComm_t>& comms, const std::vector<int>& members, const std::vector<int>& want) {
  int m = members.size();
  std::vector<std::vector<int>> in(m), out(m);
  ncclGroupStart();
  for (int i = 0; i < m; ++i) {
    in[i] = {members[i]};
    out[i].assign(m, -1);
    ncclAllGather(in[i].data(), out[i].data(), 1, ncclInt32, comms[members[i]], nullptr);
  }
  ncclResult_t r = ncclGroupEnd();
  if (r == ncclInProgress)
    for (int i = 0; i < m; ++i) settle(comms[members[i]]);
  bool ok = r == ncclSuccess || r == ncclInProgress;
  for (int i = 0; i < m; ++i) ok = ok && out[i] == want;
  return ok;
}
static void destroy_all(std::vector<ncclComm_t>& c) {
  for (auto& x : c)
    if (x) {
      ncclCommDestroy(x);
      x = nullptr;
    }
}
static bool new_child(const std::vector<ncclComm_t>& p, std::vector<ncclComm_t>& ch) {
  ch.assign(n, nullptr);
  ncclGroupStart();
  for (int i = 0; i < n; ++i)
    if (ncclCommSplit(p[i], 0, i, &ch[i], nullptr) != ncclSuccess) {
      ncclGroupEnd();
      return false;
    }
  return ncclGroupEnd() == ncclSuccess;
}
static bool fresh(std::vector<ncclComm_t>& c) {
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  c.assign(n, nullptr);
  ncclGroupStart();
  for (int i = 0; i < n; ++i) ncclCommInitRank(&c[i], n, id, i);
  return ncclGroupEnd() == ncclSuccess;
}
int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  std::vector<ncclComm_t> world(n);
  if (ncclCommInitAll(world.data(), n, nullptr) != ncclSuccess) {
    std::printf("init failed\n");
    return 1;
  }
  std::vector<int> everyone(n);
  for (int i = 0; i < n; ++i) everyone[i] = i;
  // split basics
  {
    std::vector<ncclComm_t> child(n, nullptr);
    ncclGroupStart();
    for (int i = 0; i < n; ++i) ncclCommSplit(world[i], 7, -i, &child[i], nullptr);
    ncclGroupEnd();
    bool ok = true;
    for (int i = 0; i < n; ++i) {
      int c = -1, r = -1;
      ncclCommCount(child[i], &c);
      ncclCommUserRank(child[i], &r);
      ok = ok && c == n && r == n - 1 - i;
    }
    expect(ok, "split: reversed keys");
    std::vector<int> rev(n);
    for (int i = 0; i < n; ++i) rev[i] = n - 1 - i;
    expect(order(child, everyone, rev), "split: allgather follows keys");
    destroy_all(child);
    ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
    bad.magic = 0;
    ncclGroupStart();
    ok = true;
    for (int i = 0; i < n; ++i) {
      child[i] = (ncclComm_t)0x1;
      ok = ok && ncclCommSplit(world[i], 0, i, &child[i], &bad) == ncclInvalidArgument && child[i] == nullptr;
    }
    expect(ok, "split: bad config InvalidArgument, newcomm NULL");
    expect_rc(ncclGroupEnd(), ncclInvalidArgument, "split: and GroupEnd");
  }
  // nonblocking early use
  {
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t early = nullptr;
    ncclCommInitRankConfig(&early, n, id, 0, &cfg);
    int c = -1;
    expect_rc(ncclCommCount(early, &c), ncclInvalidArgument, "nb: count before init completes");
    float s[4] = {0};
    expect_rc(ncclAllReduce(s, s, 4, ncclFloat, ncclSum, early, nullptr), ncclInvalidArgument,
              "nb: allreduce before init completes");
    ncclResult_t e = ncclSuccess;
    ncclCommGetAsyncError(early, &e);
    expect_rc(e, ncclInvalidArgument, "nb: keeps the error");
    ncclCommAbort(early);
    ncclConfig_t b5 = NCCL_CONFIG_INITIALIZER;
    b5.blocking = 5;
    ncclComm_t x = (ncclComm_t)0x1;
    expect_rc(ncclCommInitRankConfig(&x, 1, id, 0, &b5), ncclInvalidArgument, "nb: blocking=5");
    expect(x == nullptr, "nb: x NULL");
    x = (ncclComm_t)0x1;
    expect_rc(ncclCommInitRankConfig(&x, 1, id, 3, &cfg), ncclInvalidArgument, "nb: rank 3 of 1");
  }
  {
    ncclResult_t e = ncclInternalError;
    ncclCommGetAsyncError(world[0], &e);
    expect_rc(e, ncclSuccess, "asyncerror world");
    expect_rc(ncclCommGetAsyncError(nullptr, &e), ncclInvalidArgument, "asyncerror NULL");
    expect_rc(ncclCommDestroy(nullptr), ncclSuccess, "destroy NULL");
    expect_rc(ncclCommAbort(nullptr), ncclSuccess, "abort NULL");
    expect_rc(ncclCommFinalize(nullptr), ncclSuccess, "finalize NULL");
  }
  // premulsum errors
  {
    float sc = 2;
    ncclRedOp_t op;
    expect_rc(ncclRedOpCreatePreMulSum(&op, &sc, ncclFloat, ncclScalarHostImmediate, world[0]), ncclSuccess,
              "pms create");
    int32_t iv[4] = {0};
    expect_rc(ncclAllReduce(iv, iv, 4, ncclInt32, op, world[0], nullptr), ncclInvalidArgument,
              "pms: float op on int32");
    expect_rc(ncclRedOpDestroy(ncclSum, world[0]), ncclInvalidArgument, "pms: destroy ncclSum");
    expect_rc(ncclRedOpDestroy(op, nullptr), ncclInvalidArgument, "pms: destroy NULL comm");
    expect_rc(ncclRedOpDestroy(op, world[1]), ncclInvalidArgument, "pms: destroy other comm");
    expect_rc(ncclRedOpDestroy(op, world[0]), ncclSuccess, "pms: destroy");
    expect_rc(ncclRedOpDestroy(op, world[0]), ncclInvalidArgument, "pms: destroy twice");
    float fv[4] = {0};
    expect_rc(ncclAllReduce(fv, fv, 4, ncclFloat, op, world[0], nullptr), ncclInvalidArgument, "pms: use destroyed");
    expect_rc(ncclRedOpCreatePreMulSum(&op, &sc, ncclFloat, ncclScalarHostImmediate, nullptr), ncclInvalidArgument,
              "pms: NULL comm");
    expect_rc(ncclRedOpCreatePreMulSum(&op, &sc, (ncclDataType_t)99, ncclScalarHostImmediate, world[0]),
              ncclInternalError, "pms: datatype 99 (card: internal)");
  }
  // count 0 mix + alltoall errors
  {
    std::vector<std::vector<float>> b(n, std::vector<float>(8, 1));
    std::vector<ncclRedOp_t> ops(n);
    float one = 1;
    for (int i = 0; i < n; ++i) ncclRedOpCreatePreMulSum(&ops[i], &one, ncclFloat, ncclScalarHostImmediate, world[i]);
    ncclGroupStart();
    for (int i = 0; i < n; ++i) {
      ncclAllGather(b[i].data(), b[i].data(), 0, ncclFloat, world[i], nullptr);
      ncclAllReduce(b[i].data(), b[i].data(), 0, ncclFloat, ops[i], world[i], nullptr);
      ncclGather(b[i].data(), b[i].data(), 0, ncclFloat, 0, world[i], nullptr);
      ncclSend(b[i].data(), 0, ncclFloat, (i + 1) % n, world[i], nullptr);
      ncclRecv(b[i].data(), 0, ncclFloat, (i + n - 1) % n, world[i], nullptr);
    }
    expect_rc(ncclGroupEnd(), ncclSuccess, "count 0 mix");
    for (int i = 0; i < n; ++i) ncclRedOpDestroy(ops[i], world[i]);
    expect_rc(ncclAlltoAll(b[0].data(), b[0].data(), 1, (ncclDataType_t)99, world[0], nullptr), ncclInvalidArgument,
              "alltoall dt 99");
    expect_rc(ncclAlltoAll(b[0].data(), b[0].data(), 1, ncclFloat, nullptr, nullptr), ncclInvalidArgument,
              "alltoall NULL comm");
  }
  // shrink
  {
    std::vector<ncclComm_t> s(n, nullptr);
    int ex = n - 1;
    ncclGroupStart();
    for (int i = 0; i < n - 1; ++i) ncclCommShrink(world[i], &ex, 1, &s[i], nullptr, NCCL_SHRINK_DEFAULT);
    expect_rc(ncclGroupEnd(), ncclSuccess, "shrink last");
    std::vector<int> m(n - 1);
    for (int i = 0; i < n - 1; ++i) m[i] = i;
    expect(order(s, m, m), "shrink: order");
    destroy_all(s);
    ncclComm_t x = (ncclComm_t)0x1;
    int self = 0;
    expect_rc(ncclCommShrink(world[0], &self, 1, &x, nullptr, 0), ncclInvalidArgument, "shrink: exclude self");
    expect_rc(ncclCommShrink(world[0], &ex, 0, &x, nullptr, 0), ncclInvalidArgument, "shrink: count 0");
    expect_rc(ncclCommShrink(world[0], nullptr, 1, &x, nullptr, 0), ncclInvalidArgument, "shrink: NULL list");
    expect_rc(ncclCommShrink(world[0], &ex, 1, nullptr, nullptr, 0), ncclInvalidArgument, "shrink: NULL newcomm");
  }
  // scalable
  {
    ncclUniqueId ids[2];
    ncclGetUniqueId(&ids[0]);
    ncclGetUniqueId(&ids[1]);
    std::vector<ncclComm_t> c(n, nullptr);
    ncclGroupStart();
    for (int i = 0; i < n; ++i) ncclCommInitRankScalable(&c[i], n, i, 2, ids, nullptr);
    expect_rc(ncclGroupEnd(), ncclSuccess, "scalable 2 ids");
    expect(order(c, everyone, everyone), "scalable: order");
    destroy_all(c);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclUniqueId one;
    ncclGetUniqueId(&one);
    bool ok = true;
    for (int i = 0; i < n; ++i) ok = ok && ncclCommInitRankScalable(&c[i], n, i, 1, &one, &cfg) == ncclInProgress;
    expect(ok, "scalable nb: InProgress");
    ok = true;
    for (int i = 0; i < n; ++i) ok = ok && settle(c[i]) == ncclSuccess;
    expect(ok, "scalable nb: settles");
    destroy_all(c);
    ncclComm_t x = (ncclComm_t)0x1;
    expect_rc(ncclCommInitRankScalable(&x, 1, 3, 1, ids, nullptr), ncclInvalidArgument, "scalable: rank 3 of 1");
    expect(x == nullptr, "scalable: x NULL");
  }
  // windows
  {
    std::vector<void*> mem(n);
    std::vector<ncclWindow_t> win(n, nullptr);
    bool ok = true;
    for (int i = 0; i < n; ++i) ok = ok && ncclMemAlloc(&mem[i], 1 << 20) == ncclSuccess;
    expect(ok, "win: memalloc");
    ncclGroupStart();
    ok = true;
    for (int i = 0; i < n; ++i)
      ok = ok && ncclCommWindowRegister(world[i], mem[i], 1 << 20, &win[i], NCCL_WIN_COLL_SYMMETRIC) == ncclSuccess;
    ok = ncclGroupEnd() == ncclSuccess && ok;
    expect(ok, "win: register");
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < 4; ++k) ((float*)mem[i])[k] = 1 + i;
    ncclGroupStart();
    for (int i = 0; i < n; ++i) ncclAllReduce(mem[i], (char*)mem[i] + 4096, 4, ncclFloat, ncclSum, world[i], nullptr);
    ncclGroupEnd();
    ok = true;
    for (int i = 0; i < n; ++i) ok = ok && ((float*)((char*)mem[i] + 4096))[3] == n * (n + 1) / 2.0f;
    expect(ok, "win: allreduce on window");
    ncclWindow_t w = (ncclWindow_t)0x1;
    expect_rc(ncclCommWindowRegister(world[0], mem[0], 4096, nullptr, 0), ncclInvalidArgument, "win: NULL out");
    expect_rc(ncclCommWindowRegister(nullptr, mem[0], 4096, &w, 0), ncclInvalidArgument, "win: NULL comm");
    expect_rc(ncclCommWindowDeregister(world[0], nullptr), ncclSuccess, "win: deregister NULL");
    ncclGroupStart();
    for (int i = 0; i < n; ++i) ncclCommWindowDeregister(world[i], win[i]);
    expect_rc(ncclGroupEnd(), ncclSuccess, "win: deregister");
    for (int i = 0; i < n; ++i) ncclMemFree(mem[i]);
  }
  // revoke
  {
    std::vector<ncclComm_t> ch;
    new_child(world, ch);
    expect_rc(ncclCommRevoke(nullptr, 0), ncclSuccess, "revoke NULL");
    expect_rc(ncclCommRevoke(ch[0], 1), ncclInvalidArgument, "revoke flag 1");
    bool ok = true;
    for (int i = 0; i < n; ++i) ok = ok && ncclCommRevoke(ch[i], 0) == ncclSuccess;
    expect(ok, "revoke each");
    ok = true;
    for (int i = 0; i < n; ++i) {
      ncclResult_t e = ncclInProgress;
      ncclCommGetAsyncError(ch[i], &e);
      ok = ok && e == ncclSuccess;
    }
    expect(ok, "revoke: async error success");
    float f[4] = {0};
    expect_rc(ncclAllReduce(f, f, 4, ncclFloat, ncclSum, ch[0], nullptr), ncclInvalidUsage, "revoke: allreduce");
    expect_rc(ncclSend(f, 4, ncclFloat, 1, ch[0], nullptr), ncclInvalidUsage, "revoke: send");
    expect_rc(ncclCommRevoke(ch[0], 0), ncclInvalidArgument, "revoke twice");
    expect_rc(ncclCommFinalize(ch[0]), ncclInvalidArgument, "revoke: finalize");
    std::vector<ncclComm_t> gc;
    expect(new_child(ch, gc), "revoke: split of revoked");
    expect(order(gc, everyone, everyone), "revoke: split works");
    destroy_all(gc);
    destroy_all(ch);
    std::vector<ncclComm_t> fc;
    fresh(fc);
    order(fc, everyone, everyone);
    auto stuck = std::async(std::launch::async, [&] {
      std::vector<float> d(1024, 1);
      return ncclAllReduce(d.data(), d.data(), 1024, ncclFloat, ncclSum, fc[0], nullptr);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    expect_rc(ncclCommRevoke(fc[0], 0), ncclSuccess, "revoke: stuck");
    if (stuck.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      std::printf("FAIL stuck\n");
      _Exit(1);
    }
    std::printf("  stuck returned %d\n", (int)stuck.get());
    for (int i = 1; i < n; ++i) ncclCommRevoke(fc[i], 0);
    destroy_all(fc);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    std::vector<ncclComm_t> nb(n, nullptr);
    ncclGroupStart();
    for (int i = 0; i < n; ++i) ncclCommSplit(world[i], 0, i, &nb[i], &cfg);
    ncclGroupEnd();
    for (int i = 0; i < n; ++i) settle(nb[i]);
    ok = true;
    for (int i = 0; i < n; ++i) ok = ok && ncclCommRevoke(nb[i], 0) == ncclInProgress;
    expect(ok, "revoke nb: InProgress");
    ok = true;
    for (int i = 0; i < n; ++i) ok = ok && settle(nb[i]) == ncclSuccess;
    expect(ok, "revoke nb: settles");
    destroy_all(nb);
  }
  ncclGroupStart();
  for (int i = 0; i < n; ++i) ncclCommFinalize(world[i]);
  ncclGroupEnd();
  expect_rc(ncclCommFinalize(world[0]), ncclInvalidArgument, "second finalize");
  destroy_all(world);
  std::printf("%s (%d bad)\n", g_bad ? "RESULT: FAIL" : "RESULT: ok", g_bad);
  return g_bad ? 1 : 0;
}
