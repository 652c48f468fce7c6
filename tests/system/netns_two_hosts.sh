#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair with
# link-local addresses (169.254.0.0/16), each running one rank of the collective matrix
# with NCCL_SOCKET_IFNAME naming its end of the pair and its own NCCL_HOSTID, so the
# ranks see different hosts and the transport chosen is NET (nothing forced). Checks
# that both ranks match the reference and that the INFO lines name NET/Socket.
# Skipped (77) where namespaces or veth links cannot be made (not root, no CAP_NET_ADMIN).
set -u
tool=$1
suffix=$$
nsA=chorus-a-$suffix nsB=chorus-b-$suffix vethA=chv-a-$suffix vethB=chv-b-$suffix
vethA=${vethA:0:15} vethB=${vethB:0:15}
addrA=169.254.77.1 addrB=169.254.77.2
cleanup() {
  ip netns del "$nsA" 2>/dev/null
  ip netns del "$nsB" 2>/dev/null
  rm -f "${logA:-}" "${logB:-}"
}
trap cleanup EXIT
if ! ip netns add "$nsA" 2>/dev/null || ! ip netns add "$nsB" 2>/dev/null ||
  ! ip link add "$vethA" netns "$nsA" type veth peer name "$vethB" netns "$nsB" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces and a veth pair here (needs root / CAP_NET_ADMIN)"
  exit 77
fi
ip -n "$nsA" addr add "$addrA/16" dev "$vethA" && ip -n "$nsB" addr add "$addrB/16" dev "$vethB" &&
  ip -n "$nsA" link set "$vethA" up && ip -n "$nsB" link set "$vethB" up &&
  ip -n "$nsA" link set lo up && ip -n "$nsB" link set lo up || { echo "FAIL: configuring the veth pair"; exit 1; }

logA=$(mktemp) logB=$(mktemp)
common=(NCCL_COMM_ID="$addrA:29517" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET)
[ -n "${CHORUS_TEST_MAX_COUNT:-}" ] && common+=(CHORUS_TEST_MAX_COUNT="$CHORUS_TEST_MAX_COUNT")
ip netns exec "$nsA" env "${common[@]}" NCCL_SOCKET_IFNAME="=$vethA" NCCL_HOSTID=host-a timeout 300 "$tool" 0 2 >"$logA" 2>&1 &
pidA=$!
ip netns exec "$nsB" env "${common[@]}" NCCL_SOCKET_IFNAME="=$vethB" NCCL_HOSTID=host-b timeout 300 "$tool" 1 2 >"$logB" 2>&1 &
pidB=$!
wait $pidA; statusA=$?
wait $pidB; statusB=$?
grep -v "NCCL INFO" "$logA" "$logB"
fail=0
[ "$statusA" -eq 0 ] || { echo "FAIL: rank 0 (namespace A) exited with $statusA"; fail=1; }
[ "$statusB" -eq 0 ] || { echo "FAIL: rank 1 (namespace B) exited with $statusB"; fail=1; }
for log in "$logA" "$logB"; do
  grep -q "via NET/Socket" "$log" || { echo "FAIL: no connection 'via NET/Socket' in $log"; fail=1; }
  grep -q "$vethA\|$vethB" "$log" || { echo "FAIL: the socket net did not use the veth interface"; fail=1; }
done
if [ "$fail" -ne 0 ]; then
  cat "$logA" "$logB" | tail -60
  exit 1
fi
echo "PASS: both ranks matched every case across two namespaces over NET/Socket"
