#!/usr/bin/env bash
# The container image (Containerfile): a static driftguard on scratch, built
# with Debian's podman from a binary built here, so no base image is pulled.
#
#   scripts/image.sh install        apt-get install podman and runc if missing
#   scripts/image.sh build [NAME..] build the binary and the image; tags it
#                                   localhost/driftguard:<version> and :latest,
#                                   or the NAMEs given; prints the first name
#   scripts/image.sh test [NAME]    check the image (default :latest) and run
#                                   it read-only, as its user, with no network
#   scripts/image.sh check          install, build under a throwaway name,
#                                   test, remove the name (the test task's step)
set -euo pipefail

NAME=image
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO=localhost/driftguard
# The image's user; the Containerfile's USER and --chown name the same ids,
# and `test` checks that they agree with the passwd file made here.
IMAGE_UID=65532
DATA_DIR=/var/lib/driftguard
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

# podman's run flags for the test. runc, not Debian's default crun: crun 1.8
# refuses a host with cgroup v1 controllers beside a cgroup2 mount that still
# has controllers ("cgroups in hybrid mode not supported"). The limits: for a
# rootful container podman asks for RLIMIT_NOFILE 1048576 and more processes
# than a host may allow, and raising a hard limit needs CAP_SYS_RESOURCE,
# which a sandboxed root may lack (EPERM from the runtime); these small
# limits are below any host's.
RUN_FLAGS=(--runtime runc --rm --read-only --network none
  --ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

install() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v runc >/dev/null || [[ -x /usr/sbin/runc ]] || missing+=(runc)
  [[ -f "$CA_BUNDLE" ]] || missing+=(ca-certificates)
  ((${#missing[@]} == 0)) || apt_install "${missing[@]}"
}

# A linked worktree's .git is a file, which Go's VCS stamping does not take
# for a repository (go.dev/issue/58218): it stamps nothing, or the revision
# of a checkout above. There the binary is built unstamped; the image's
# labels still name the revision.
linked_worktree() {
  [[ "$(git -C "$ROOT" rev-parse --path-format=absolute --git-dir)" != \
     "$(git -C "$ROOT" rev-parse --path-format=absolute --git-common-dir)" ]]
}

# buildinfo BINARY KEY: a value of the binary's build information (`go
# version -m`): "mod" for the module version, or a build setting such as
# vcs.revision; empty when absent.
buildinfo() {
  go version -m "$1" | awk -v k="$2" '
    $1 == "mod" && k == "mod" { print $3 }
    $1 == "build" { split($2, kv, "="); if (kv[1] == k) { sub(/^[^=]*=/, "", $2); print $2 } }'
}

# context DIR: builds the binary into DIR/rootfs and lays out the rest of
# the build context the Containerfile copies from.
context() {
  local dir="$1" vcs=-buildvcs=true
  if linked_worktree; then
    vcs=-buildvcs=false
    log "a linked git worktree: the binary carries no VCS stamp (go.dev/issue/58218), the labels do"
  fi
  # /var/lib comes with the root filesystem, owned by root: a COPY --chown
  # into a folder whose parents are missing makes the parents the user's.
  mkdir -p "$dir/rootfs/usr/local/bin" "$dir/rootfs/etc/ssl/certs" "$dir/rootfs/tmp" \
    "$dir/rootfs/var/lib" "$dir/state"
  # An explicit -buildvcs, since GOFLAGS may turn stamping off. The tzdata
  # is embedded because scratch has no /usr/share/zoneinfo and the
  # ClickHouse client loads the server's time zone at every handshake.
  (cd "$ROOT" && CGO_ENABLED=0 go build "$vcs" -trimpath -tags timetzdata \
    -ldflags "-s -w" -o "$dir/rootfs/usr/local/bin/driftguard" ./cmd/driftguard)
  cat >"$dir/rootfs/etc/passwd" <<EOF
root:x:0:0:root:/root:/sbin/nologin
driftguard:x:$IMAGE_UID:$IMAGE_UID:driftguard:$DATA_DIR:/sbin/nologin
EOF
  cat >"$dir/rootfs/etc/group" <<EOF
root:x:0:
driftguard:x:$IMAGE_UID:
EOF
  # /etc/hosts first, as the runtime writes it; Go's resolver reads this.
  echo "hosts: files dns" >"$dir/rootfs/etc/nsswitch.conf"
  cp "$CA_BUNDLE" "$dir/rootfs/etc/ssl/certs/ca-certificates.crt"
  chmod 0644 "$dir"/rootfs/etc/{passwd,group,nsswitch.conf} "$dir/rootfs/etc/ssl/certs/ca-certificates.crt"
  chmod 0755 "$dir/rootfs/usr/local/bin/driftguard"
  chmod 1777 "$dir/rootfs/tmp"
  chmod 0750 "$dir/state"
}

build() {
  local dir
  dir="$(mktemp -d "${TMPDIR:-/tmp}/driftguard-image.XXXXXX")"
  # shellcheck disable=SC2064 # dir is fixed now
  trap "rm -rf '$dir'" EXIT
  context "$dir"
  local bin="$dir/rootfs/usr/local/bin/driftguard" revision created epoch version
  revision="$(git -C "$ROOT" rev-parse HEAD)"
  # The commit's time, for the label and every file's time, so that one
  # commit always gives the same image.
  epoch="$(git -C "$ROOT" log -1 --format=%ct HEAD)"
  created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"
  # Go's own version of the module (a tag or a pseudo-version, +dirty with
  # uncommitted changes), else the short revision.
  version="$(buildinfo "$bin" mod)"
  if [[ -z "$version" || "$version" == "(devel)" ]]; then
    version="devel-${revision:0:12}"
    [[ -z "$(git -C "$ROOT" status --porcelain)" ]] || version+="+dirty"
  fi
  local names=("$@")
  ((${#names[@]})) || names=("$REPO:${version//+/-}" "$REPO:latest")
  local tags=()
  for name in "${names[@]}"; do tags+=(--tag "$name"); done
  # --layers=false commits only the final image, no intermediate ones.
  podman build --pull=never --layers=false --timestamp "$epoch" \
    --build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg CREATED="$created" \
    "${tags[@]}" -f "$ROOT/Containerfile" "$dir" >&2
  log "built ${names[*]} ($(podman image inspect --format '{{.Size}}' "${names[0]}" | numfmt --to=si)B)"
  echo "${names[0]}"
}

fail() {
  log "FAIL: $*"
  exit 1
}

# inspect IMAGE FORMAT: one field of the image's config.
inspect() { podman image inspect --format "$2" "$1"; }

test_image() {
  local image="${1:-$REPO:latest}" out mnt
  [[ "$(inspect "$image" '{{.Config.User}}')" == "$IMAGE_UID:$IMAGE_UID" ]] ||
    fail "USER is $(inspect "$image" '{{.Config.User}}'), not $IMAGE_UID:$IMAGE_UID (the passwd entry)"
  [[ "$(inspect "$image" '{{json .Config.Entrypoint}}')" == '["/usr/local/bin/driftguard"]' ]] ||
    fail "ENTRYPOINT is $(inspect "$image" '{{json .Config.Entrypoint}}')"
  for volume in "$DATA_DIR" /tmp; do
    [[ "$(inspect "$image" "{{index .Config.Volumes \"$volume\"}}")" != "<no value>" ]] || fail "$volume is no VOLUME"
  done

  # The files as shipped: only the data folder is the user's, and the binary
  # is the static one the script builds, stamped with the labelled revision.
  mnt="$(podman image mount "$image")"
  # shellcheck disable=SC2064 # image is fixed now
  trap "podman image unmount '$image' >/dev/null" EXIT
  [[ "$(find "$mnt" -user "$IMAGE_UID" -printf '/%P\n')" == "$DATA_DIR" ]] ||
    fail "files owned by $IMAGE_UID other than $DATA_DIR: $(find "$mnt" -user "$IMAGE_UID" -printf '/%P ')"
  [[ "$(stat -c %a "$mnt/tmp")" == 1777 ]] || fail "/tmp is not mode 1777"
  local bin="$mnt/usr/local/bin/driftguard" label
  [[ "$(buildinfo "$bin" CGO_ENABLED)" == 0 ]] || fail "the binary was built with cgo"
  [[ "$(buildinfo "$bin" -trimpath)" == true ]] || fail "the binary was built without -trimpath"
  [[ "$(buildinfo "$bin" -tags)" == *timetzdata* ]] || fail "the binary has no embedded tzdata"
  label="$(inspect "$image" '{{index .Config.Labels "org.opencontainers.image.revision"}}')"
  if [[ -n "$(buildinfo "$bin" vcs.revision)" ]] || ! linked_worktree; then
    [[ "$(buildinfo "$bin" vcs.revision)" == "$label" ]] ||
      fail "the binary's vcs.revision '$(buildinfo "$bin" vcs.revision)' is not the label's '$label'"
  fi

  # Its default command, read-only, as the image's own user, no network: a
  # scratch image runs only a static binary, as no dynamic loader is there.
  out="$(podman run "${RUN_FLAGS[@]}" "$image")" || fail "podman run $image --help failed"
  for command in dev ingest process sink bridge token migrate topics config version; do
    grep -qE "^  $command " <<<"$out" || fail "--help does not name the command $command:"$'\n'"$out"
  done
  # `driftguard version` in the image names the revision of its label.
  out="$(podman run "${RUN_FLAGS[@]}" "$image" version)" || fail "driftguard version failed"
  if [[ -n "$(buildinfo "$bin" vcs.revision)" ]]; then
    [[ "$out" == *"revision $label"* ]] || fail "driftguard version says '$out', not revision $label"
  fi
  # The image's variables are a valid configuration (loaded and validated;
  # --print connects to nothing).
  out="$(podman run "${RUN_FLAGS[@]}" "$image" migrate --print)" || fail "migrate --print failed"
  grep -q "CREATE TABLE" <<<"$out" || fail "migrate --print printed no CREATE TABLE"
  log "ok: $image runs --help and migrate --print read-only as $IMAGE_UID:$IMAGE_UID with no network"
}

check() {
  install
  local name="$REPO:check-$$"
  build "$name" >/dev/null
  # shellcheck disable=SC2064 # name is fixed now
  trap "podman rmi '$name' >/dev/null" EXIT
  (test_image "$name")
}

case "${1:-}" in
  install) install ;;
  build) shift; build "$@" ;;
  test) test_image "${2:-}" ;;
  check) check ;;
  *)
    echo "usage: $0 install | build [NAME...] | test [NAME] | check" >&2
    exit 2
    ;;
esac
