#!/bin/bash
# kos-bootstrap: turns a fresh Ubuntu/Debian server into a Kubernetes node without anyone logging in.
# Rendered once per cluster by kos; per-node values come from /etc/kos/bootstrap.env.
# Usage: kos-bootstrap run | metadata-block | cleanup | resume
# Progress goes to the serial console as "kos-bootstrap: <step> ok", "kos-bootstrap: <step> failed: <reason>",
# or, for a step the node tries again by itself, "kos-bootstrap: <step> retrying: <reason>".
# Keep this file free of Jinja delimiters: cloud-init renders the whole user-data as a template.
set -Eeuo pipefail
umask 022

# The KOS_* overrides exist for tests; cloud-init runs this with none of them set.
readonly ENV_FILE=${KOS_ENV_FILE:-/etc/kos/bootstrap.env}
readonly LOG=${KOS_LOG:-/var/log/kos-bootstrap.log}
readonly CONSOLE=${KOS_CONSOLE:-/dev/console}
readonly KUBEADM_CONFIG=/etc/kos/kubeadm.yaml
readonly PKI_DIR=/etc/kubernetes/pki
readonly PKI_BACKUP=/etc/kos/pki
readonly ADDONS_DIR=/etc/kos/addons
readonly CNI_FILE=${KOS_CNI_FILE:-/etc/kos/cni.yaml}
# Present once the node closed the metadata service for good.
readonly METADATA_CLOSED=/etc/kos/metadata-closed
readonly KUBEADM_LOG=${KOS_KUBEADM_LOG:-/var/log/kos-kubeadm.log}
# A step's "<name>.done" here: it passed, and a later run of this script (the resume unit's) skips it.
readonly STATE_DIR=${KOS_STATE_DIR:-/var/lib/kos-bootstrap}
readonly APISERVER_MANIFEST=${KOS_APISERVER_MANIFEST:-/etc/kubernetes/manifests/kube-apiserver.yaml}
# Set by main once the cluster exists: a step failing from then on is tried again (resume_later).
RESUMABLE=false
# Set by the `resume` entry point, which the kos-bootstrap-resume unit runs.
RESUMING=false
export KUBECONFIG=/etc/kubernetes/admin.conf
SELF=$(readlink -f "$0")
readonly SELF

# shellcheck source=/dev/null
. "$ENV_FILE"

# The cluster's proxy (spec.proxy), for apt, curl and kubectl here; containerd and the kubelet have
# theirs in systemd drop-ins. KOS_NO_PROXY holds the cluster's own ranges.
if [ -n "${KOS_HTTP_PROXY:-}${KOS_HTTPS_PROXY:-}" ]; then
  export http_proxy=$KOS_HTTP_PROXY HTTP_PROXY=$KOS_HTTP_PROXY
  export https_proxy=$KOS_HTTPS_PROXY HTTPS_PROXY=$KOS_HTTPS_PROXY
  export no_proxy=$KOS_NO_PROXY NO_PROXY=$KOS_NO_PROXY
fi
# The mirrors' CA bundle (spec.mirrors.caBundle), when given.
readonly MIRROR_CA=/usr/local/share/ca-certificates/kos-mirror.crt

marker() {
  local line="kos-bootstrap: $*"
  printf '%s\n' "$line" >>"$LOG"
  if ! { [ -w "$CONSOLE" ] && printf '%s\n' "$line" >"$CONSOLE"; } 2>/dev/null; then
    printf '%s\n' "$line"
  fi
}

# Runs one step in a child process (so errexit holds inside it), logs its output and writes its marker.
# The failure reason is the step's last output line. A step that passed in an earlier run is skipped.
step() {
  local name=$1 reason
  shift
  if [ -e "$STATE_DIR/$name.done" ]; then return 0; fi
  printf '==> %s\n' "$name" >>"$LOG"
  if "$SELF" __step "$@" >>"$LOG" 2>&1; then
    install -d -m 0700 "$STATE_DIR"
    : >"$STATE_DIR/$name.done"
    marker "$name ok"
    return 0
  fi
  reason=$(tail -n 1 "$LOG" | tr -cd '[:print:]' | cut -c 1-300)
  if [ "$RESUMABLE" = true ]; then
    marker "$name retrying: ${reason:-no output}"
    resume_later
  else
    marker "$name failed: ${reason:-no output}"
  fi
  exit 1
}

# Once kubeadm init made the cluster, what is left of the first control plane's bootstrap (the CNI,
# the addons, closing the metadata service) only this node does, and no node made again would: a
# failure there (a download, an API server restarting) must not end its efforts. A systemd unit runs
# this script again a minute later, and every minute while it fails (Restart=on-failure; the steps
# that passed are skipped), until the bootstrap is done; each attempt writes its marker.
resume_later() {
  # Inside the unit: its exit status makes systemd run it again.
  if [ "$RESUMING" = true ]; then return 0; fi
  systemd-run --unit=kos-bootstrap-resume --on-active=60 --property=Restart=on-failure \
    --property=RestartSec=60 "$SELF" resume >>"$LOG" 2>&1
}

retry() {
  local attempts=$1 i=1
  shift
  until "$@"; do
    if [ "$i" -ge "$attempts" ]; then
      echo "gave up after $i attempts: $*"
      return 1
    fi
    sleep $((i * 5))
    i=$((i + 1))
  done
}

preflight() {
  [ "$(id -u)" -eq 0 ] || { echo "must run as root"; return 1; }
  [ -f "$KUBEADM_CONFIG" ] || { echo "missing $KUBEADM_CONFIG"; return 1; }
  if [ -f "$PKI_DIR/ca.key" ] && [ ! -d "$PKI_BACKUP" ]; then
    # kubeadm reset empties the certificates directory: keep the pre-generated PKI for retries.
    install -d -m 0700 "$PKI_BACKUP"
    cp -a "$PKI_DIR/." "$PKI_BACKUP/"
  fi
  echo "role $KOS_ROLE, kubernetes $KOS_K8S_VERSION"
}

# apt and curl trust the mirrors' CA once it is in the system's bundle.
trust_mirror_ca() {
  if [ -s "$MIRROR_CA" ] && command -v update-ca-certificates >/dev/null 2>&1; then
    update-ca-certificates >/dev/null
  fi
}

restore_pki() {
  if [ -d "$PKI_BACKUP" ]; then
    install -d -m 0700 "$PKI_DIR"
    cp -a "$PKI_BACKUP/." "$PKI_DIR/"
  fi
}

# After the OS install failed: the archive apt could not fetch, when that was why (apt-get update only
# warns about it, so the install is what fails, finding no package).
apt_unreachable() {
  local fetch
  fetch=$(grep -E '^[WE]: Failed to fetch ' "$1" | head -n 1 || true)
  rm -f "$1"
  if [ -n "$fetch" ]; then
    echo "the OS packages' archive is unreachable (${fetch#?: }): set mirrors.packages.os, or fix the image's apt sources"
  fi
}

packages() {
  local want="v$KOS_K8S_VERSION" have="" repo
  if command -v kubeadm >/dev/null 2>&1; then
    have=$(kubeadm version -o short 2>/dev/null || true)
  fi
  if [ "$have" = "$want" ] && command -v kubelet >/dev/null 2>&1 && command -v containerd >/dev/null 2>&1; then
    echo "kubeadm $have already installed (prebuilt image): skipping packages"
    return 0
  fi
  local id="" id_like=""
  if [ -r /etc/os-release ]; then
    # shellcheck source=/dev/null
    id=$(. /etc/os-release && echo "${ID:-}")
    # shellcheck source=/dev/null
    id_like=$(. /etc/os-release && echo "${ID_LIKE:-}")
  fi
  case " $id $id_like " in
    *" debian "* | *" ubuntu "*) ;;
    *)
      echo "cannot install on ${id:-unknown OS}: use an image with kubeadm $want"
      return 1
      ;;
  esac
  export DEBIAN_FRONTEND=noninteractive
  repo="$KOS_K8S_PACKAGES/core:/stable:/$KOS_K8S_CHANNEL/deb/"
  trust_mirror_ca
  local updates
  updates=$(mktemp)
  retry 5 apt-get update -q 2>&1 | tee "$updates"
  if ! retry 5 apt-get install -y -q apt-transport-https ca-certificates curl gpg containerd conntrack socat ethtool iptables; then
    apt_unreachable "$updates"
    return 1
  fi
  rm -f "$updates"
  trust_mirror_ca
  install -d -m 0755 /etc/apt/keyrings
  # To a file first: a download that fails is the step's reason, not gpg's complaint about no input.
  curl -fsSL --retry 5 -o /etc/apt/keyrings/kubernetes-apt-keyring.asc "${repo}Release.key"
  gpg --dearmor --yes -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg /etc/apt/keyrings/kubernetes-apt-keyring.asc
  chmod 0644 /etc/apt/keyrings/kubernetes-apt-keyring.gpg
  echo "deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] $repo /" >/etc/apt/sources.list.d/kubernetes.list
  retry 5 apt-get update -q
  retry 5 apt-get install -y -q --allow-downgrades --allow-change-held-packages \
    "kubelet=$KOS_K8S_VERSION-*" "kubeadm=$KOS_K8S_VERSION-*" "kubectl=$KOS_K8S_VERSION-*"
  apt-mark hold kubelet kubeadm kubectl
  have=$(kubeadm version -o short)
  [ "$have" = "$want" ] || { echo "installed kubeadm $have, wanted $want"; return 1; }
}

kernel() {
  modprobe overlay
  modprobe br_netfilter
  sysctl --system >/dev/null
  [ "$(sysctl -n net.ipv4.ip_forward)" = 1 ] || { echo "net.ipv4.ip_forward is not 1"; return 1; }
}

containerd_config() {
  local conf=/etc/containerd/config.toml
  if ! grep -q 'SystemdCgroup = true' "$conf" 2>/dev/null; then
    install -d -m 0755 /etc/containerd
    containerd config default >"$conf"
    sed -i 's/SystemdCgroup = false/SystemdCgroup = true/' "$conf"
    grep -q 'SystemdCgroup = true' "$conf" || { echo "could not enable SystemdCgroup in $conf"; return 1; }
  fi
  # Pods run in sandboxes of containerd's own image (1.7's default is pause:3.8): make it kubeadm's,
  # so a mirror needs one pause and kubeadm's preflight does not warn. `sandbox_image` in containerd
  # 1.x's configuration, `sandbox` in 2.x's.
  sed -Ei "s#^([[:space:]]*sandbox_image[[:space:]]*=[[:space:]]*).*#\1\"$KOS_PAUSE_IMAGE\"#; s#^([[:space:]]*sandbox[[:space:]]*=[[:space:]]*).*#\1'$KOS_PAUSE_IMAGE'#" "$conf"
  grep -Fq "$KOS_PAUSE_IMAGE" "$conf" ||
    { echo "could not set containerd's sandbox image to $KOS_PAUSE_IMAGE in $conf"; return 1; }
  # Registry mirrors are hosts.toml files under certs.d: containerd 1.x reads them only when told to
  # (its default config_path is empty); 2.x does by default.
  if [ -n "$(ls -A /etc/containerd/certs.d 2>/dev/null)" ]; then
    sed -i 's#config_path = ""#config_path = "/etc/containerd/certs.d"#' "$conf"
    grep -Eq "config_path = [\"'][^\"']*/etc/containerd/certs\.d" "$conf" ||
      { echo "containerd's $conf does not read the registry mirrors in /etc/containerd/certs.d"; return 1; }
  fi
  # The proxy drop-ins were written before the packages came: load them.
  systemctl daemon-reload
  systemctl enable containerd
  systemctl restart containerd
  systemctl enable kubelet
}

# Pods must not read user-data (tokens, keys) from the metadata service: drop pod-CIDR traffic to it
# before any CNI or kube-proxy chain sees it (raw PREROUTING), and again on the forward path.
metadata_block() {
  local rule=(-s "$KOS_POD_CIDR" -d "$KOS_METADATA_ADDR" -m comment --comment kos-metadata-block -j DROP)
  "$KOS_IPTABLES" -w -t raw -C PREROUTING "${rule[@]}" 2>/dev/null ||
    "$KOS_IPTABLES" -w -t raw -I PREROUTING 1 "${rule[@]}"
  "$KOS_IPTABLES" -w -t filter -C FORWARD "${rule[@]}" 2>/dev/null ||
    "$KOS_IPTABLES" -w -t filter -I FORWARD 1 "${rule[@]}"
}

metadata_block_step() {
  metadata_block
  systemctl daemon-reload
  systemctl enable kos-metadata-block.service
}

# Once the node is bootstrapped nothing on it needs the metadata service (cloud-init reads the config
# drive on later boots; the CCM and CSI find the server through the config drive or the API), and its
# user-data holds this node's secrets: close it to every process on the node, hostNetwork pods and
# root included (OUTPUT), for good (the unit above closes it again at every boot).
metadata_close() {
  local rule=(-d "$KOS_METADATA_ADDR" -m comment --comment kos-metadata-close -j DROP)
  "$KOS_IPTABLES" -w -t filter -C OUTPUT "${rule[@]}" 2>/dev/null ||
    "$KOS_IPTABLES" -w -t filter -I OUTPUT 1 "${rule[@]}"
}

metadata_close_step() {
  metadata_close
  install -d -m 0700 /etc/kos
  : >"$METADATA_CLOSED"
}

# At boot (the unit): pods never reach the metadata service; nothing does once the node bootstrapped.
metadata_boot() {
  metadata_block
  if [ -e "$METADATA_CLOSED" ]; then metadata_close; fi
}

wait_api() {
  local deadline=$((SECONDS + KOS_API_WAIT_SECONDS))
  until curl -ksf --max-time 5 "https://$KOS_ENDPOINT/readyz" >/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "API https://$KOS_ENDPOINT/readyz did not answer within ${KOS_API_WAIT_SECONDS}s"
      return 1
    fi
    sleep 10
  done
  echo "API https://$KOS_ENDPOINT is ready"
}

# What went wrong in kubeadm's output: the first failed preflight check ("[ERROR <check>]: ..."), else
# kubeadm's error line ("error: <what>", before its "To see the stack trace ..." hint), else its last line.
kubeadm_reason() {
  local out=$1 reason
  reason=$(grep -m 1 -E '^[[:space:]]*\[ERROR ' "$out" | sed -E 's/^[[:space:]]+//' || true)
  if [ -z "$reason" ]; then
    reason=$(grep -E '^error: ' "$out" | tail -n 1 | sed 's/^error: //' || true)
  fi
  if [ -z "$reason" ]; then
    reason=$(grep -v -e '^[[:space:]]*$' -e 'To see the stack trace' "$out" | tail -n 1 || true)
  fi
  printf '%s' "${reason:-no output}"
}

# Runs kubeadm until it succeeds, resetting in between. Concurrent control-plane joins collide on etcd
# (too many learners, member not in sync): back off with jitter, bounded.
kubeadm_retry() {
  local attempts=$1 attempt=1 delay=10 out=$KUBEADM_LOG
  shift
  until kubeadm "$@" --config "$KUBEADM_CONFIG" -v=1 2>&1 | tee "$out"; do
    if [ "$attempt" -ge "$attempts" ]; then
      echo "kubeadm $1 failed after $attempt attempts: $(kubeadm_reason "$out")"
      return 1
    fi
    echo "kubeadm $1 attempt $attempt failed; resetting and retrying in about ${delay}s"
    kubeadm reset -f || true
    restore_pki
    sleep $((delay + RANDOM % delay))
    attempt=$((attempt + 1))
    delay=$((delay * 2))
    if [ "$delay" -gt 120 ]; then delay=120; fi
  done
}

kubeadm_init() {
  restore_pki
  kubeadm_retry "$KOS_INIT_ATTEMPTS" init --upload-certs --skip-token-print --skip-certificate-key-print
}

kubeadm_join() {
  restore_pki
  kubeadm_retry "$KOS_JOIN_ATTEMPTS" join
}

# A manifest that names an image without a tag would pull whatever is newest: give it the pinned tag.
pin_cni_image() {
  [ -n "$KOS_CNI_IMAGE" ] || return 0
  local name=${KOS_CNI_IMAGE//./\\.} pinned="$KOS_CNI_IMAGE:$KOS_CNI_IMAGE_TAG"
  sed -i -E "s#^([[:space:]-]*image:[[:space:]]*)${name}[[:space:]]*\$#\\1$pinned#" "$CNI_FILE"
  if grep -Eq "^[[:space:]-]*image:[[:space:]]*${name}[[:space:]]*\$" "$CNI_FILE" || ! grep -qF "image: $pinned" "$CNI_FILE"; then
    echo "could not pin image $KOS_CNI_IMAGE to $KOS_CNI_IMAGE_TAG in the $KOS_CNI_NAME manifest"
    return 1
  fi
}

# kubectl against this node's own API server. admin.conf names the cluster's endpoint, which may not
# answer yet (a load balancer Octavia is still building) or at all from here; kubeadm issues the
# API server's certificate for the advertise address and records that address in the API server's
# static pod manifest.
local_kubectl() {
  local endpoint
  endpoint=$(sed -n -E 's#^[[:space:]]*kubeadm\.kubernetes\.io/kube-apiserver\.advertise-address\.endpoint:[[:space:]]*"?([^"[:space:]]+)"?[[:space:]]*$#\1#p' "$APISERVER_MANIFEST" | head -n 1)
  if [ -z "$endpoint" ]; then
    echo "no advertise address in $APISERVER_MANIFEST"
    return 1
  fi
  kubectl --server "https://$endpoint" "$@"
}

cni() {
  if [ -z "$KOS_CNI_URL" ]; then
    echo "no manifest for CNI $KOS_CNI_NAME: pin one (url and sha256) in the cluster spec"
    return 1
  fi
  if [ "$KOS_CNI_VERIFIED" != true ]; then
    echo "sha256 of the $KOS_CNI_NAME $KOS_CNI_VERSION manifest is not verified: pin one in the cluster spec"
    return 1
  fi
  curl -fsSL --retry 5 -o "$CNI_FILE" "$KOS_CNI_URL"
  if ! echo "$KOS_CNI_SHA256  $CNI_FILE" | sha256sum -c --status -; then
    echo "sha256 mismatch for $KOS_CNI_URL"
    return 1
  fi
  if [ -n "$KOS_CNI_POD_CIDR_DEFAULT" ] && [ "$KOS_CNI_POD_CIDR_DEFAULT" != "$KOS_POD_CIDR" ]; then
    sed -i "s#$KOS_CNI_POD_CIDR_DEFAULT#$KOS_POD_CIDR#g" "$CNI_FILE"
  fi
  pin_cni_image
  retry 10 local_kubectl apply -f "$CNI_FILE"
}

# `apply -f DIR` does not descend into subdirectories: the CRDs and then their custom resources are
# applied after, the resources once the definitions are established (applied together, kubectl
# finds no such kind).
addons() {
  retry 10 local_kubectl apply -f "$ADDONS_DIR"
  if [ -d "$ADDONS_DIR/crds" ]; then
    retry 10 local_kubectl apply -f "$ADDONS_DIR/crds"
    retry 10 local_kubectl wait --for condition=established --timeout=60s -f "$ADDONS_DIR/crds"
  fi
  if [ -d "$ADDONS_DIR/crs" ]; then
    retry 10 local_kubectl apply -f "$ADDONS_DIR/crs"
  fi
}

# Once every expected node registered (or the token's lifetime is over), remove what a pod could still
# abuse: the bootstrap token and the uploaded certificates.
cleanup() {
  local deadline=$((SECONDS + KOS_TOKEN_TTL_SECONDS)) count=0
  while [ "$SECONDS" -lt "$deadline" ]; do
    count=$(kubectl get nodes --no-headers 2>/dev/null | wc -l || true)
    if [ "$count" -ge "$KOS_EXPECTED_NODES" ]; then break; fi
    sleep 30
  done
  echo "$count of $KOS_EXPECTED_NODES nodes registered"
  retry 10 kubectl -n kube-system delete secret "bootstrap-token-$KOS_TOKEN_ID" kubeadm-certs --ignore-not-found
}

main() {
  : >>"$LOG"
  chmod 0600 "$LOG"
  step preflight preflight
  step packages packages
  step kernel kernel
  step containerd containerd_config
  step metadata-block metadata_block_step
  case "$KOS_ROLE" in
    init)
      step kubeadm-init kubeadm_init
      RESUMABLE=true
      step cni cni
      step addons addons
      step metadata-close metadata_close_step
      if command -v systemd-run >/dev/null 2>&1; then
        systemd-run --unit=kos-bootstrap-cleanup --collect "$SELF" cleanup >>"$LOG" 2>&1
      else
        setsid "$SELF" cleanup </dev/null >>"$LOG" 2>&1 &
      fi
      ;;
    join-control-plane | worker)
      step api-wait wait_api
      step kubeadm-join kubeadm_join
      step metadata-close metadata_close_step
      ;;
    *)
      marker "preflight failed: unknown role $KOS_ROLE"
      exit 1
      ;;
  esac
  marker "bootstrap ok"
}

case "${1:-run}" in
  run) main ;;
  metadata-block) metadata_boot ;;
  cleanup) step cleanup cleanup ;;
  resume)
    RESUMING=true
    main
    ;;
  __step)
    shift
    "$@"
    ;;
  *)
    echo "usage: $0 run | metadata-block | cleanup | resume" >&2
    exit 2
    ;;
esac
