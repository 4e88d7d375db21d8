#!/usr/bin/env bash
# Data parallel training across two machines, tested, not assumed (issue 21
# item 9): two network namespaces joined by a veth pair, each its own
# "machine" (its own network stack and host name), one MPI rank in each,
# Open MPI between them over TCP only. mpirun runs in the first namespace and
# starts the second machine's daemon through a launch agent that enters the
# second namespace (where a real cluster would use ssh). Three runs of
# tests/dist_test.c's netns modes:
#   train  two epochs match one process with the whole batch; a checkpoint
#          written by rank 0 resumes on both machines exactly;
#   kill   rank 1 kills itself (SIGKILL) in the middle of an epoch;
#   link   both ranks stop in the middle of an epoch, the link goes down
#          (ip link set down), they go on;
# after a fault the survivor(s) must end with KILN_ERROR_COMMUNICATION within
# the communicator's timeout (plus slack for a loaded machine), and the
# checkpoint written before the fault must load and hold what was saved.
# The namespaces, and every process left in them, are removed on exit,
# whatever happens. Where namespaces cannot be made (not root, no iproute2,
# a container without CAP_SYS_ADMIN) it prints "skipped: why" and exits 77.
#
#   tests/dist_netns_test.sh DIST_TEST MPIRUN
set -u

dist_test="$1"
mpirun="$2"
timeout_s=5        # each collective's limit in the fault runs (KILN_DIST_TIMEOUT's role)
run_limit=120      # seconds one mpirun may take before it is killed

skip() {
  echo "skipped: $*"
  exit 77
}

[[ $(id -u) -eq 0 ]] || skip "creating network namespaces needs root (ip netns add)"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
command -v hostname >/dev/null || skip "hostname is not installed"

work="$(mktemp -d /tmp/kiln-netns.XXXXXX)"
ns_a="kiln-a-$$"
ns_b="kiln-b-$$"
made=()

cleanup() {
  local ns pid
  for ns in "${made[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  done
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

for ns in "$ns_a" "$ns_b"; do
  if ! err="$(ip netns add "$ns" 2>&1)"; then skip "ip netns add failed: $err"; fi
  made+=("$ns")
done
# 10.77.0.1 is machine A, 10.77.0.2 machine B; the names live inside the
# namespaces, so concurrent runs of this test do not collide.
ip link add kiln-veth-a netns "$ns_a" type veth peer name kiln-veth-b netns "$ns_b" ||
  skip "cannot create a veth pair between the namespaces"
ip -n "$ns_a" addr add 10.77.0.1/24 dev kiln-veth-a
ip -n "$ns_b" addr add 10.77.0.2/24 dev kiln-veth-b
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns_a" link set kiln-veth-a up
ip -n "$ns_b" link set kiln-veth-b up

# Open MPI's launch agent for "ssh host command": machine B's daemon starts in
# namespace B under a host name of its own (a UTS namespace), so the ranks
# see two hosts (each is local rank 0).
agent="$work/netns-agent"
cat >"$agent" <<EOF
#!/bin/sh
host="\$1"
shift
case "\$host" in
  10.77.0.2) exec ip netns exec "$ns_b" unshare --uts sh -c "hostname kiln-machine-b && \$*" ;;
  *) echo "netns-agent: unknown host \$host" >&2; exit 1 ;;
esac
EOF
chmod +x "$agent"

failed=0

# One run of MODE; prints the ranks' verdicts, and fails unless the ranks
# listed in $2 wrote PASS. $3 (optional): a function run once both ranks are
# mid-epoch.
run() {
  local mode="$1" ranks="$2" fault="${3:-}" dir="$work/$1" start rc r
  mkdir -p "$dir"
  echo "== $mode"
  start=$(date +%s)
  # --enable-recovery: a rank's death does not make mpirun kill the other, so
  # the survivor's own collectives are what fails. TCP only, on the veth.
  # The agent passes the environment on (ssh would not: then -x NAME).
  ip netns exec "$ns_a" timeout -k 5 "$run_limit" "$mpirun" --allow-run-as-root --oversubscribe --enable-recovery \
    -np 2 --host 10.77.0.1:1,10.77.0.2:1 --mca plm_rsh_agent "$agent" \
    --mca oob_tcp_if_include 10.77.0.0/24 --mca btl_tcp_if_include 10.77.0.0/24 --mca btl tcp,self \
    "$dist_test" "netns-$mode" "$dir" "$timeout_s" >"$dir/mpirun.log" 2>&1 &
  local job=$!
  if [[ -n "$fault" ]]; then
    # Both ranks wait at batch 3 of their second epoch; the fault comes then.
    for _ in $(seq 1 600); do
      [[ -e "$dir/at-batch-0" && -e "$dir/at-batch-1" ]] && break
      sleep 0.1
    done
    "$fault" "$dir"
  fi
  # A dead link leaves mpirun waiting for machine B's daemon: the verdicts
  # decide, and mpirun and what it left in the namespaces are killed after.
  for _ in $(seq 1 $((run_limit * 10))); do
    local have=1
    for r in $ranks; do [[ -e "$dir/verdict-$r" ]] || have=0; done
    [[ $have -eq 1 ]] && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  sleep 1
  kill "$job" 2>/dev/null
  wait "$job" 2>/dev/null
  rc=0
  for r in $ranks; do
    if [[ -e "$dir/verdict-$r" ]]; then
      cat "$dir/verdict-$r"
      grep -q '^PASS' "$dir/verdict-$r" || rc=1
    else
      echo "FAIL netns-$mode rank $r: no verdict"
      rc=1
    fi
  done
  echo "$mode: $(($(date +%s) - start)) s"
  if [[ $rc -ne 0 ]]; then
    echo "--- mpirun's output"
    tail -n 30 "$dir/mpirun.log"
    failed=1
  fi
  # Nothing of this run may live on into the next.
  for ns in "$ns_a" "$ns_b"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  done
}

take_link_down() {
  ip -n "$ns_a" link set kiln-veth-a down
  touch "$1/link-down"
}

run train "0 1"
run kill "0"
run link "0 1" take_link_down

[[ $failed -eq 0 ]] && echo "PASS dist_netns_test" || echo "FAIL dist_netns_test"
exit $failed
