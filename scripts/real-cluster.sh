#!/usr/bin/env bash
# A one-node Kubernetes cluster of real components, in network and mount
# namespaces of its own, for the tests that need pods run by a real kubelet
# (tests/real_cluster.rs). Everything is built from the Go module proxy by
# scripts/go-tools.sh (kube-1.35: kube-apiserver, kubectl; node-1.35: kubelet,
# kube-controller-manager, kube-scheduler, kube-proxy; containerd-2.4;
# etcd-3.6; coredns) or comes from Debian (runc, containernetworking-plugins, iptables).
#
#   scripts/real-cluster.sh up DIR      start, wait until the node is Ready and
#                                       print "ready"; stop when stdin closes
#                                       (or on SIGTERM/SIGINT) and undo it all
#   scripts/real-cluster.sh down DIR    undo what an instance in DIR changed on the
#                                       host (`up` does it for killed instances)
#   scripts/real-cluster.sh exec DIR CMD...   run CMD inside the cluster's network
#                                       namespace with kubectl on PATH and
#                                       KUBECONFIG set (admin)
#
# What this machine needs, and why (docs/real-cluster.md has the evidence):
#   * the kubelet refuses cgroup v1 unless failCgroupV1: false;
#   * no CAP_SYS_RESOURCE: containerd's restrict_oom_score_adj;
#   * a nearly full disk must not evict the pods: eviction thresholds 0 %;
#   * the kubelet sets vm.overcommit_memory, kernel.panic, kernel.panic_on_oops
#     at start: saved here and restored at the end;
#   * no host iptables chains (makeIPTablesUtilChains: false); kube-proxy's
#     rules live in the cluster's own network namespace.
# Isolation: every component runs in the network namespace hcp-<name> (node
# IP 10.250.0.1 on a veth link, pods on the bridge cni0, 10.244.0.0/24,
# Services 10.96.0.0/24; nothing is reachable from outside) and in one
# private mount namespace in which /var/lib/kubelet, /var/log/pods,
# /var/log/containers, /var/lib/cni, /run/containerd, /run/runc and
# /run/netns are the cluster's own directories: nothing the kubelet or
# containerd mounts is seen outside, and it all goes with the last process.
# Every process (components and containers) is in the cgroup /hcp-<name>
# (pids hierarchy: the teardown kills what is in it; kubelet's cgroupRoot is
# beneath it); the cgroups are removed at the end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:?usage: real-cluster.sh up|down|exec DIR ...}
dir=${2:?usage: real-cluster.sh up|down|exec DIR ...}
shift 2
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
name=$(basename "$dir" | tr -c 'a-zA-Z0-9\n' '-' | cut -c1-40)
ns=hcp-$name
cg=hcp-$name
# Exactly these builds (kubectl and kube-apiserver 1.35, etcd 3.6), first on PATH.
tools=$("$root/scripts/go-tools.sh" --print | grep -E '^(kube-1.35|node-1.35|containerd-2.4|etcd-3.6|coredns)=' | sed 's/^[^=]*=//' | tr '\n' ':')
export PATH="$tools$PATH:/usr/sbin:/sbin"
node_ip=10.250.0.1

# kubectl's discovery and HTTP caches per cluster (every cluster is 10.250.0.1:6443).
export KUBECACHEDIR=$dir/kube-cache
if [ "$cmd" = exec ]; then
  exec ip netns exec "$ns" env KUBECONFIG="$dir/pki/admin.kubeconfig" KUBECACHEDIR="$KUBECACHEDIR" "$@"
fi

log() { printf '%s real-cluster %s: %s\n' "$(date +%T.%3N)" "$name" "$*" >&2; }

# ---------------------------------------------------------------- teardown
# What an instance changed on the host is written to DIR/.state before it is
# changed, so `down DIR` undoes it: from the EXIT trap, or for an instance
# whose script was killed outright (`up` sweeps those first).
down() {
  local d=$1 cg="" ns="" saved="" created="" pids
  [ -f "$d/.state" ] || return 0
  # Undo as much as can be undone: no step's failure stops the rest.
  set +e
  # shellcheck disable=SC1091
  . "$d/.state"
  # Everything in the cluster's cgroup: components, shims, containers.
  for _ in $(seq 1 100); do
    pids=$(find "/sys/fs/cgroup/pids/$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  local left=0
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h$cg" ] && { find "$h$cg" -depth -type d -exec rmdir {} + 2>/dev/null || left=1; }
  done
  for kv in $saved; do sysctl -q -w "$kv" >/dev/null 2>&1 || left=1; done
  ip netns del "$ns" 2>/dev/null || true
  # The mount points made on the host for the private mounts (empty ones only).
  for m in $created; do rmdir "$m" 2>/dev/null || true; done
  rm -f "$d/.state"
  return "$left"
}

if [ "$cmd" = down ]; then
  down "$dir"
  exit
fi
[ "$cmd" = up ] || { echo "unknown command $cmd" >&2; exit 2; }
for t in kube-apiserver kubectl kubelet kube-controller-manager kube-scheduler kube-proxy containerd ctr containerd-shim-runc-v2 etcd coredns runc iptables sysctl; do
  command -v "$t" >/dev/null || { echo "real-cluster: $t not found (scripts/go-tools.sh; apt-get install runc iptables containernetworking-plugins procps)" >&2; exit 3; }
done
[ -x /usr/lib/cni/bridge ] || { echo "real-cluster: /usr/lib/cni/bridge missing (apt-get install containernetworking-plugins)" >&2; exit 3; }
for h in pids memory cpu cpuset; do
  [ -d "/sys/fs/cgroup/$h" ] || { echo "real-cluster: needs the cgroup v1 hierarchy /sys/fs/cgroup/$h (this harness is written for the cgroup v1 hosts CI runs on; a cgroup v2-only host is not supported)" >&2; exit 3; }
done

# One cluster at a time on a machine: the kubelet's sysctls and the mount
# points are the host's. The lock is the script's own (closed for the
# components), so a killed script frees it; its leftovers are swept next.
cache=${HCP_CACHE:-$HOME/.cache/hcp-etcd-admission}/real-cluster
mkdir -p "$cache/instances"
exec 8>"$cache/lock"
flock -w 900 8 || { echo "real-cluster: another cluster has run on this machine for 15 minutes; not starting" >&2; exit 3; }
for f in "$cache"/instances/*; do
  [ -f "$f" ] || continue
  owner=$(sed -n 1p "$f"); stale=$(sed -n 2p "$f")
  # Alive: a running process (a zombie left unreaped by the machine's init is dead).
  if ! { [ -r "/proc/$owner/stat" ] && [ "$(sed 's/.*) //' "/proc/$owner/stat" | cut -d' ' -f1)" != Z ]; }; then
    log "sweeping what a killed instance left ($stale)"
    down "$stale" || log "could not undo all of $stale"
    rm -f "$f"
  fi
done
printf '%s\n%s\n' "$$" "$dir" > "$cache/instances/$name"

sysctls="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes"
saved=$(for s in $sysctls; do printf '%s=%s ' "$s" "$(sysctl -n "$s")"; done)
created=""
for m in /var/lib/kubelet /var/log/pods /var/log/containers /var/lib/cni /run/containerd /run/runc /run/netns; do
  [ -d "$m" ] || { mkdir -p "$m"; created="$created $m"; }
done
printf 'cg=%q\nns=%q\nsaved=%q\ncreated=%q\n' "$cg" "$ns" "$saved" "$created" > "$dir/.state"
inner_pid=""
waiter=""
teardown() {
  set +e
  # A second signal must not cut the undoing short.
  trap '' INT TERM
  trap - EXIT
  log "stopping"
  [ -z "$waiter" ] || kill "$waiter" 2>/dev/null || true
  local rc=0
  down "$dir" || rc=1
  rm -f "$cache/instances/$name"
  if [ "$rc" = 0 ]; then log "stopped"; else log "stopped, but some of it could not be undone (cgroups or sysctls)"; fi
}
trap teardown EXIT
trap 'exit 1' INT TERM

# ---------------------------------------------------------------- PKI
pki=$dir/pki
mkdir -p "$pki"
cert() { # name CN O sans(comma list or "") usage
  local n=$1 cn=$2 o=$3 sans=$4 usage=$5
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$pki/$n.key" \
    -subj "/CN=$cn${o:+/O=$o}" -out "$pki/$n.csr" 2>/dev/null
  {
    echo "extendedKeyUsage=$usage"
    [ -n "$sans" ] && echo "subjectAltName=$sans"
  } > "$pki/$n.ext"
  openssl x509 -req -in "$pki/$n.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 2 -extfile "$pki/$n.ext" -out "$pki/$n.crt" 2>/dev/null
}
kubeconfig() { # name (cert) -> name.kubeconfig
  cat > "$pki/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://$node_ip:6443", certificate-authority: "$pki/ca.crt"}}]
users: [{name: u, user: {client-certificate: "$pki/$1.crt", client-key: "$pki/$1.key"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
EOF
}
openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$pki/ca.key" \
  -subj "/CN=real-cluster $name CA" -days 2 -out "$pki/ca.crt" 2>/dev/null
cert apiserver kube-apiserver "" "IP:$node_ip,IP:127.0.0.1,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost" serverAuth
cert kubelet-serving node0 "" "IP:$node_ip,DNS:node0" serverAuth
cert admin admin system:masters "" clientAuth
cert apiserver-kubelet kube-apiserver-kubelet-client system:masters "" clientAuth
cert kubelet system:node:node0 system:nodes "" clientAuth
cert kcm system:kube-controller-manager "" "" clientAuth
cert scheduler system:kube-scheduler "" "" clientAuth
cert proxy system:kube-proxy "" "" clientAuth
for n in admin kubelet kcm scheduler proxy; do kubeconfig "$n"; done
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null

# ---------------------------------------------------------------- configuration
mkdir -p "$dir"/{etcd,logs,cni,kubelet,kubelet-plugins,containerd/root,containerd/state,var-lib-kubelet,pods-log,containers-log,var-lib-cni,run-containerd,run-runc,run-netns}
cat > "$dir/cni/10-bridge.conflist" <<'EOF'
{"cniVersion": "1.0.0", "name": "hcp", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
cat > "$dir/containerd.toml" <<EOF
version = 3
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$dir/containerd.sock"
# Nothing outside the cluster's directory: no NRI socket (/run/nri), plugins' /opt/containerd.
[plugins."io.containerd.nri.v1.nri"]
  disable = true
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[plugins."io.containerd.cri.v1.runtime"]
  # No CAP_SYS_RESOURCE here: never below containerd's own score.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$dir/cni"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "registry.k8s.io/pause:3.10.1"
EOF
cat > "$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$cg/pods
containerRuntimeEndpoint: unix://$dir/containerd.sock
address: $node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $pki/kubelet-serving.crt
tlsPrivateKeyFile: $pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: AlwaysAllow}
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
resolvConf: $dir/resolv.conf
evictionHard: {memory.available: "0%", nodefs.available: "0%", nodefs.inodesFree: "0%", imagefs.available: "0%", imagefs.inodesFree: "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
makeIPTablesUtilChains: false
failSwapOn: false
volumePluginDir: $dir/kubelet-plugins
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 0s
EOF
printf 'nameserver 127.0.0.1\n' > "$dir/resolv.conf"
# Cluster DNS: CoreDNS (kubernetes plugin) on the node's address, behind the
# Service kube-dns (10.96.0.10, the kubelet's clusterDNS) that kube-proxy
# forwards; it reads the apiserver with the admin's credentials.
cat > "$dir/Corefile" <<EOF
.:53 {
    bind $node_ip
    errors
    health 127.0.0.1:18080
    ready 127.0.0.1:18181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $pki/admin.kubeconfig c
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
EOF
cat > "$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: 10.244.0.0/24
hostnameOverride: node0
bindAddress: $node_ip
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
clientConnection: {kubeconfig: $pki/proxy.kubeconfig}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
EOF

# ---------------------------------------------------------------- images
# The sandbox ("pause") image, built offline: a static C program that waits
# for a signal and reaps children, FROM scratch (buildah, vfs storage in the
# cache). Other images (the webhook's) are put into DIR/images by the caller.
mkdir -p "$dir/images"
if [ ! -s "$cache/pause.tar" ]; then
  tmp=$(mktemp -d)
  cat > "$tmp/pause.c" <<'CEOF'
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void stop(int s) { (void)s; _exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
  signal(SIGINT, stop); signal(SIGTERM, stop); signal(SIGCHLD, reap);
  for (;;) pause();
}
CEOF
  gcc -static -Os -o "$tmp/pause" "$tmp/pause.c"
  b() { buildah --root "$cache/buildah/root" --runroot "$cache/buildah/run" --storage-driver vfs "$@"; }
  c=$(b from --quiet scratch)
  b copy --quiet "$c" "$tmp/pause" /pause >/dev/null
  b config --entrypoint '["/pause"]' --user 65535:65535 "$c"
  b commit --quiet "$c" registry.k8s.io/pause:3.10.1 >/dev/null
  b rm "$c" >/dev/null
  b push --quiet registry.k8s.io/pause:3.10.1 "docker-archive:$cache/pause.tar.tmp:registry.k8s.io/pause:3.10.1"
  mv "$cache/pause.tar.tmp" "$cache/pause.tar"
  rm -rf "$tmp"
fi
cp "$cache/pause.tar" "$dir/images/pause.tar"

# ---------------------------------------------------------------- network namespace
ip netns del "$ns" 2>/dev/null || true
ip netns add "$ns"
nsx() { ip netns exec "$ns" "$@"; }
nsx ip link set lo up
# The node's address on a veth pair (no dummy driver in every kernel here).
nsx ip link add node0 type veth peer name node0-peer
nsx ip link set node0-peer up
nsx ip addr add "$node_ip/24" dev node0
nsx ip link set node0 up
nsx ip route add default dev node0
nsx sysctl -q -w net.ipv4.ip_forward=1
nsx sysctl -q -w net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true

# ---------------------------------------------------------------- the node, inside both namespaces
cat > "$dir/inner.sh" <<'EOF'
#!/bin/sh
# Runs in the cluster's network namespace and a private mount namespace.
set -eu
dir=$1
for m in var-lib-kubelet:/var/lib/kubelet pods-log:/var/log/pods containers-log:/var/log/containers \
         var-lib-cni:/var/lib/cni run-containerd:/run/containerd run-runc:/run/runc run-netns:/run/netns; do
  src=$dir/${m%%:*}; dst=${m#*:}
  mkdir -p "$dst"
  mount --bind "$src" "$dst"
done
mount --make-shared /run/netns
L=$dir/logs
start() { n=$1; shift; "$@" >"$L/$n.log" 2>&1 & echo $! > "$dir/$n.pid"; }
start etcd etcd --data-dir "$dir/etcd" --listen-client-urls http://127.0.0.1:2379 \
  --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
  --listen-metrics-urls http://127.0.0.1:2381 --unsafe-no-fsync --log-level warn
P=$dir/pki
start kube-apiserver kube-apiserver --etcd-servers http://127.0.0.1:2379 --bind-address 0.0.0.0 \
  --advertise-address 10.250.0.1 --secure-port 6443 --tls-cert-file "$P/apiserver.crt" \
  --tls-private-key-file "$P/apiserver.key" --client-ca-file "$P/ca.crt" \
  --kubelet-client-certificate "$P/apiserver-kubelet.crt" --kubelet-client-key "$P/apiserver-kubelet.key" \
  --kubelet-certificate-authority "$P/ca.crt" --kubelet-preferred-address-types InternalIP \
  --authorization-mode Node,RBAC --service-cluster-ip-range 10.96.0.0/24 \
  --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$P/sa.pub" \
  --service-account-signing-key-file "$P/sa.key" --enable-aggregator-routing=true \
  --allow-privileged=true --cert-dir "$dir/apiserver-certs"
start containerd containerd --config "$dir/containerd.toml"
until [ -S "$dir/containerd.sock" ]; do sleep 0.1; done
for img in "$dir"/images/*.tar; do
  [ -e "$img" ] || continue
  ctr --address "$dir/containerd.sock" -n k8s.io images import "$img" >>"$L/images.log" 2>&1
done
until curl -fsS --cacert "$P/ca.crt" --cert "$P/admin.crt" --key "$P/admin.key" https://10.250.0.1:6443/readyz >/dev/null 2>&1; do sleep 0.2; done
start kube-controller-manager kube-controller-manager --kubeconfig "$P/kcm.kubeconfig" \
  --authentication-kubeconfig "$P/kcm.kubeconfig" --authorization-kubeconfig "$P/kcm.kubeconfig" \
  --service-account-private-key-file "$P/sa.key" --root-ca-file "$P/ca.crt" \
  --use-service-account-credentials --leader-elect=false --bind-address 127.0.0.1 \
  --flex-volume-plugin-dir "$dir/kubelet-plugins" --cluster-signing-cert-file "$P/ca.crt" \
  --cluster-signing-key-file "$P/ca.key" --controllers '*,-nodeipam'
start kube-scheduler kube-scheduler --kubeconfig "$P/scheduler.kubeconfig" \
  --authentication-kubeconfig "$P/scheduler.kubeconfig" --authorization-kubeconfig "$P/scheduler.kubeconfig" \
  --leader-elect=false --bind-address 127.0.0.1
start kube-proxy kube-proxy --config "$dir/kube-proxy.yaml"
start coredns coredns -conf "$dir/Corefile"
start kubelet kubelet --config "$dir/kubelet.yaml" --kubeconfig "$P/kubelet.kubeconfig" \
  --root-dir /var/lib/kubelet --node-ip 10.250.0.1 --hostname-override node0 --v 1
wait
EOF
# The kubelet wants its cgroupRoot to exist in every v1 hierarchy; cpuset
# cgroups start empty and get their parent's CPUs and memory nodes.
for h in /sys/fs/cgroup/*/; do
  case $h in */unified/) continue ;; esac
  mkdir -p "$h$cg/pods"
  if [ -f "${h}cpuset.cpus" ]; then
    for d in "$h$cg" "$h$cg/pods"; do
      cat "${h}cpuset.cpus" > "$d/cpuset.cpus"
      cat "${h}cpuset.mems" > "$d/cpuset.mems"
    done
  fi
done
# nsenter, not `ip netns exec`: that one remounts /sys for the namespace, which
# hides the cgroup mounts the kubelet needs.
# The inner script and all it starts are in the cluster's cgroup from the start.
sh -c 'echo $$ > "/sys/fs/cgroup/pids/$1/cgroup.procs"; exec nsenter --net="/run/netns/$2" unshare -m --propagation private sh "$3/inner.sh" "$3"' \
  sh "$cg" "$ns" "$dir" >"$dir/logs/inner.log" 2>&1 </dev/null 8>&- &
inner_pid=$!
# The teardown kills it through the cgroup; no job notice ("Killed") for it.
disown "$inner_pid"

kc() { ip netns exec "$ns" kubectl --kubeconfig "$pki/admin.kubeconfig" "$@"; }
t0=$SECONDS
until kc get node node0 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -q True; do
  if ! kill -0 "$inner_pid" 2>/dev/null || [ $((SECONDS - t0)) -gt 240 ]; then
    log "the node did not become Ready in $((SECONDS - t0)) s"; tail -n 20 "$dir"/logs/*.log >&2; exit 1
  fi
  sleep 0.5
done
until kc -n default get serviceaccount default >/dev/null 2>&1; do
  if [ $((SECONDS - t0)) -gt 240 ]; then log "no default ServiceAccount"; tail -n 20 "$dir/logs/kube-controller-manager.log" >&2; exit 1; fi
  sleep 0.5
done
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: 10.96.0.10
  ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: kube-dns-node, namespace: kube-system, labels: {kubernetes.io/service-name: kube-dns}}
addressType: IPv4
endpoints: [{addresses: ["$node_ip"], conditions: {ready: true}}]
ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]
EOF
until ip netns exec "$ns" curl -fsS http://127.0.0.1:18181/ready >/dev/null 2>&1; do
  if [ $((SECONDS - t0)) -gt 240 ]; then log "CoreDNS not ready"; tail -n 20 "$dir/logs/coredns.log" >&2; exit 1; fi
  sleep 0.5
done
log "node Ready in $((SECONDS - t0)) s"
echo ready
# Until the caller closes stdin (or a signal: `wait` is interrupted by the
# traps, a foreground `cat` would hold them back). The explicit <&0 keeps
# stdin, which a background command would otherwise get as /dev/null.
cat <&0 >/dev/null 8>&- &
waiter=$!
wait "$waiter" || true
