#!/usr/bin/env bash
# The container image: builds the Containerfile with Debian's podman, as
# `podman build .` would, adding the version, revision and time of the
# commit, and a Go builder image of its own where no registry is reachable.
#
#   scripts/image.sh install        apt-get install podman, runc and
#                                   debootstrap if missing
#   scripts/image.sh build [--platform OS/ARCH] [NAME..]
#                                   build the image (default: this machine's
#                                   platform); tags it
#                                   ghcr.io/driftguard/driftguard:<version>
#                                   and :latest, or the NAMEs given; prints
#                                   the first name
#   scripts/image.sh test [NAME]    check the image (default :latest) and run
#                                   it read-only, as its user, with no network
#   scripts/image.sh check          install, build linux/amd64 and
#                                   linux/arm64 under throwaway names, test
#                                   both (running the one this machine can),
#                                   remove the names (the test task's step)
#
# The Go stage's image is GO_IMAGE if set, else the Containerfile's default
# (golang at go.mod's version) when it is here or can be pulled, else a
# stand-in made here: Debian bookworm (debootstrap, from DEBIAN_MIRROR) with
# this machine's Go of the same version, imported as
# localhost/driftguard-builder:<go version> and kept as a tarball under
# ~/.cache/driftguard so that a later run skips debootstrap.
set -euo pipefail
# The image's names come from functions run in $(...), where bash drops -e
# unless told: a failed debootstrap would otherwise go on to cache a broken
# stand-in for every later run.
shopt -s inherit_errexit

NAME=image
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The one repository name: the chart's default image.repository (a chart
# test holds them equal) and the docs name it too.
REPO=ghcr.io/driftguard/driftguard
SOURCE=https://github.com/driftguard/driftguard
# The image's user and data folder, as the Containerfile makes them.
IMAGE_UID=65532
DATA_DIR=/var/lib/driftguard
CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/driftguard"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
GO_VERSION="$(awk '$1 == "go" { print $2; exit }' "$ROOT/go.mod")"
# The Containerfile's own Go image (its GO_IMAGE default); `check` holds its
# tag to go.mod's version.
OFFICIAL_GO_IMAGE="$(sed -n 's/^ARG GO_IMAGE=//p' "$ROOT/Containerfile")"

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
  command -v debootstrap >/dev/null || [[ -x /usr/sbin/debootstrap ]] || missing+=(debootstrap)
  ((${#missing[@]} == 0)) || apt_install "${missing[@]}"
}

# go_image: the image for the Containerfile's Go stage (GO_IMAGE).
go_image() {
  if [[ -n "${GO_IMAGE:-}" ]]; then
    echo "$GO_IMAGE"
    return
  fi
  if podman image exists "$OFFICIAL_GO_IMAGE" || podman pull --quiet "$OFFICIAL_GO_IMAGE" >/dev/null 2>&1; then
    echo "$OFFICIAL_GO_IMAGE"
    return
  fi
  log "cannot pull $OFFICIAL_GO_IMAGE; using a stand-in made here"
  stand_in
}

# stand_in: prints the name of a local image that does the official Go
# image's part: Debian bookworm with ca-certificates and Go $GO_VERSION at
# /usr/local/go, GOPATH /go. Its C compiler is left out: the build is
# CGO_ENABLED=0.
stand_in() {
  local name="localhost/driftguard-builder:$GO_VERSION"
  local tarball
  tarball="$CACHE_DIR/driftguard-builder-go$GO_VERSION-bookworm-$(dpkg --print-architecture).tar"
  if ! podman image exists "$name"; then
    [[ -f "$tarball" ]] || stand_in_tarball "$tarball"
    podman import --quiet \
      --change 'ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV GOPATH=/go' --change 'ENV GOTOOLCHAIN=local' --change 'WORKDIR /go' \
      --change 'CMD ["bash"]' "$tarball" "$name" >/dev/null
    log "imported $name from $tarball"
  fi
  echo "$name"
}

# stand_in_tarball FILE: makes the stand-in's root filesystem as a tarball.
# A subshell, for the trap.
stand_in_tarball() (
  local file="$1" goroot root
  # `go env` runs the toolchain go.mod selects, downloaded if GOTOOLCHAIN
  # allows; its GOROOT is what the stand-in gets.
  [[ "$(cd "$ROOT" && go env GOVERSION)" == "go$GO_VERSION" ]] ||
    { log "go.mod asks for go$GO_VERSION, this machine's go runs $(cd "$ROOT" && go env GOVERSION)"; exit 1; }
  goroot="$(cd "$ROOT" && go env GOROOT)"
  root="$(mktemp -d "${TMPDIR:-/tmp}/driftguard-builder.XXXXXX")"
  # shellcheck disable=SC2064 # root is fixed now
  trap "rm -rf '$root'" EXIT
  log "debootstrap bookworm from $DEBIAN_MIRROR, with go$GO_VERSION from $goroot"
  debootstrap --variant=minbase --include=ca-certificates bookworm "$root" "$DEBIAN_MIRROR" >&2
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  cp -a "$goroot" "$root/usr/local/go"
  mkdir -p "$root/go/bin" "$root/go/src"
  chmod -R 1777 "$root/go"
  mkdir -p "$CACHE_DIR"
  tar -C "$root" --numeric-owner -cf "$file.tmp" .
  mv "$file.tmp" "$file"
  log "cached the stand-in as $file ($(du -h "$file" | cut -f1))"
)

# revision: the commit built, with -dirty when the tree has changes.
revision() {
  local rev
  rev="$(git -C "$ROOT" rev-parse HEAD)"
  [[ -z "$(git -C "$ROOT" status --porcelain)" ]] || rev+="-dirty"
  echo "$rev"
}

# image_version: the release (v1.2.3 tagged on HEAD gives 1.2.3, as the
# chart's appVersion names it), else a version in the shape of Go's
# pseudo-versions, after the last release: 1.2.4-0.<commit time>-<12 hex>,
# or 0.0.0-<commit time>-<12 hex> before any; +dirty with changes.
image_version() {
  local tag rev time version major minor patch
  rev="$(git -C "$ROOT" rev-parse HEAD)"
  if tag="$(git -C "$ROOT" describe --tags --exact-match --match 'v[0-9]*' HEAD 2>/dev/null)"; then
    version="${tag#v}"
  else
    time="$(TZ=UTC git -C "$ROOT" log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD)"
    if tag="$(git -C "$ROOT" describe --tags --abbrev=0 --match 'v[0-9]*.[0-9]*.[0-9]*' HEAD 2>/dev/null)" &&
      IFS=. read -r major minor patch <<<"${tag#v}" && [[ "$patch" =~ ^[0-9]+$ ]]; then
      version="$major.$minor.$((patch + 1))-0.$time-${rev:0:12}"
    else
      version="0.0.0-$time-${rev:0:12}"
    fi
  fi
  [[ -z "$(git -C "$ROOT" status --porcelain)" ]] || version+="+dirty"
  echo "$version"
}

build() {
  local platform=()
  if [[ "${1:-}" == --platform ]]; then
    platform=(--platform "$2")
    shift 2
  fi
  local go revision version epoch created
  go="$(go_image)"
  revision="$(revision)"
  version="$(image_version)"
  # The commit's time, for the label and every file's time, so that one
  # commit always gives the same image.
  epoch="$(git -C "$ROOT" log -1 --format=%ct HEAD)"
  created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"
  local names=("$@")
  ((${#names[@]})) || names=("$REPO:${version//+/-}" "$REPO:latest")
  local args=()
  for name in "${names[@]}"; do args+=(--tag "$name"); done
  # The modules this machine has already downloaded, offered to the build
  # as a module proxy in front of the usual one, so a machine that ran the
  # tests downloads nothing again.
  local modcache
  modcache="$(cd "$ROOT" && go env GOMODCACHE)/cache/download"
  if [[ -d "$modcache" ]]; then
    args+=(--volume "$modcache:/run/driftguard-goproxy:ro"
      --build-arg GOPROXY="file:///run/driftguard-goproxy,$(cd "$ROOT" && go env GOPROXY)")
  fi
  # The module downloads trust what this machine trusts (a TLS-inspecting
  # proxy's CA, say); the image's own CA bundle stays the Go image's.
  local ca="${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}"
  if [[ -f "$ca" ]]; then
    args+=(--volume "$(realpath "$ca"):/run/driftguard-host-ca.crt:ro"
      --build-arg SSL_CERT_FILE=/run/driftguard-host-ca.crt)
  fi
  # The Go stage runs here and cross-compiles. BUILDPLATFORM given
  # explicitly: podman 4.3's buildah (Debian 12) sets it for RUN but
  # leaves it empty in `FROM --platform=$BUILDPLATFORM`, which then asks
  # for the Go image of the target's platform.
  args+=(--build-arg BUILDPLATFORM="linux/$(go env GOHOSTARCH)")
  # --pull=never: the Go image is here now and scratch needs none.
  # --layers=false commits only the final image, no intermediate ones; the
  # Go caches are the Containerfile's cache mounts.
  podman build --pull=never --layers=false --timestamp "$epoch" "${platform[@]}" \
    --build-arg GO_IMAGE="$go" --build-arg VERSION="$version" \
    --build-arg REVISION="$revision" --build-arg CREATED="$created" \
    "${args[@]}" -f "$ROOT/Containerfile" "$ROOT" >&2
  log "built ${names[*]} ($(podman image inspect --format '{{.Os}}/{{.Architecture}}' "${names[0]}"), $(podman image inspect --format '{{.Size}}' "${names[0]}" | numfmt --to=si)B)"
  echo "${names[0]}"
}

fail() {
  log "FAIL: $*"
  exit 1
}

# inspect IMAGE FORMAT: a field of the image.
inspect() { podman image inspect --format "$2" "$1"; }

# label IMAGE KEY: an org.opencontainers.image label of the image.
label() { inspect "$1" "{{index .Config.Labels \"org.opencontainers.image.$2\"}}"; }

# buildinfo BINARY KEY: a build setting of the binary's build information
# (`go version -m`), such as GOARCH or -tags; empty when absent.
buildinfo() {
  go version -m "$1" | awk -v k="$2" '
    $1 == "build" { split($2, kv, "="); if (kv[1] == k) { sub(/^[^=]*=/, "", $2); print $2 } }'
}

# elf_machine FILE: the machine an ELF file is for (e_machine, bytes 18-19,
# little-endian), as GOARCH names it.
elf_machine() {
  [[ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" == '177ELF' ]] || { echo "not ELF"; return; }
  case "$(od -An -tx1 -j18 -N2 "$1" | tr -d ' ')" in
    3e00) echo amd64 ;;
    b700) echo arm64 ;;
    *) echo "e_machine $(od -An -tx1 -j18 -N2 "$1")" ;;
  esac
}

# test_image IMAGE [ARCH]: checks the image as built for ARCH (default:
# this machine's), and runs it when ARCH is this machine's. A subshell,
# for the trap.
test_image() (
  local image="${1:-$REPO:latest}" arch="${2:-$(go env GOHOSTARCH)}" out mnt revision version
  [[ "$(inspect "$image" '{{.Os}}/{{.Architecture}}')" == "linux/$arch" ]] ||
    fail "$image is for $(inspect "$image" '{{.Os}}/{{.Architecture}}'), not linux/$arch"
  [[ "$(inspect "$image" '{{.Config.User}}')" == "$IMAGE_UID:$IMAGE_UID" ]] ||
    fail "USER is $(inspect "$image" '{{.Config.User}}'), not $IMAGE_UID:$IMAGE_UID (the passwd entry)"
  [[ "$(inspect "$image" '{{json .Config.Entrypoint}}')" == '["/usr/local/bin/driftguard"]' ]] ||
    fail "ENTRYPOINT is $(inspect "$image" '{{json .Config.Entrypoint}}')"
  for volume in "$DATA_DIR" /tmp; do
    [[ "$(inspect "$image" "{{index .Config.Volumes \"$volume\"}}")" != "<no value>" ]] || fail "$volume is no VOLUME"
  done
  [[ "$(label "$image" licenses)" == Apache-2.0 ]] || fail "licenses label '$(label "$image" licenses)'"
  [[ "$(label "$image" source)" == "$SOURCE" ]] || fail "source label '$(label "$image" source)'"
  revision="$(label "$image" revision)" version="$(label "$image" version)"
  [[ "$revision" =~ ^[0-9a-f]{40}(-dirty)?$ ]] || fail "revision label '$revision' is no commit"
  [[ -n "$version" ]] || fail "no version label"
  [[ -n "$(label "$image" created)" ]] || fail "no created label"

  # The files as shipped: all root's but the data folder, which is the
  # user's; the binary static, for ARCH, stamped with the labels' values.
  mnt="$(podman image mount "$image")"
  # shellcheck disable=SC2064 # image is fixed now
  trap "podman image unmount '$image' >/dev/null" EXIT
  [[ "$(find "$mnt" -mindepth 1 \( ! -user 0 -o ! -group 0 \) -printf '/%P\n')" == "$DATA_DIR" ]] ||
    fail "files not owned by root other than $DATA_DIR: $(find "$mnt" -mindepth 1 \( ! -user 0 -o ! -group 0 \) -printf '/%P ')"
  [[ "$(stat -c %u:%g "$mnt$DATA_DIR")" == "$IMAGE_UID:$IMAGE_UID" ]] ||
    fail "$DATA_DIR is owned by $(stat -c %u:%g "$mnt$DATA_DIR"), not $IMAGE_UID:$IMAGE_UID"
  [[ "$(stat -c %a "$mnt/tmp")" == 1777 ]] || fail "/tmp is not mode 1777"
  grep -q "^driftguard:x:$IMAGE_UID:$IMAGE_UID:" "$mnt/etc/passwd" || fail "/etc/passwd has no driftguard $IMAGE_UID"
  grep -q "BEGIN CERTIFICATE" "$mnt/etc/ssl/certs/ca-certificates.crt" || fail "no CA bundle"
  cmp -s "$ROOT/LICENSE" "$mnt/usr/share/doc/driftguard/LICENSE" || fail "no LICENSE in /usr/share/doc/driftguard"
  local bin="$mnt/usr/local/bin/driftguard"
  [[ "$(elf_machine "$bin")" == "$arch" ]] || fail "the binary is for $(elf_machine "$bin"), not $arch"
  [[ "$(buildinfo "$bin" GOARCH)" == "$arch" ]] || fail "the binary was built for GOARCH $(buildinfo "$bin" GOARCH)"
  [[ "$(buildinfo "$bin" CGO_ENABLED)" == 0 ]] || fail "the binary was built with cgo"
  [[ "$(buildinfo "$bin" -trimpath)" == true ]] || fail "the binary was built without -trimpath"
  [[ "$(buildinfo "$bin" -tags)" == *timetzdata* ]] || fail "the binary has no embedded tzdata"
  # -trimpath leaves -ldflags out of the build information: the stamped
  # revision is looked for among the binary's strings.
  grep -qF "$revision" "$bin" || fail "the binary carries no revision $revision"
  if [[ "$arch" != "$(go env GOHOSTARCH)" ]]; then
    log "ok: $image is a linux/$arch image as labelled, owned and stamped as it must be (not run here)"
    exit 0
  fi

  # Read-only, as the image's own user, no network: a scratch image runs
  # only a static binary, as no dynamic loader is there.
  out="$(podman run "${RUN_FLAGS[@]}" "$image")" || fail "podman run $image --help failed"
  for command in dev ingest process sink bridge token migrate topics config version; do
    grep -qE "^  $command " <<<"$out" || fail "--help does not name the command $command:"$'\n'"$out"
  done
  out="$(podman run "${RUN_FLAGS[@]}" "$image" version)" || fail "driftguard version failed"
  [[ "$out" == "driftguard $version (revision $revision, go$GO_VERSION)" ]] ||
    fail "driftguard version says '$out', not version $version, revision $revision, go$GO_VERSION"
  out="$(podman run "${RUN_FLAGS[@]}" "$image" dev --help 2>&1)" || fail "driftguard dev --help failed: $out"
  grep -q "^Usage: driftguard dev " <<<"$out" || fail "dev --help printed no usage: $out"
  # The image's variables are a valid configuration (loaded and validated;
  # --print connects to nothing).
  out="$(podman run "${RUN_FLAGS[@]}" "$image" migrate --print)" || fail "migrate --print failed"
  grep -q "CREATE TABLE" <<<"$out" || fail "migrate --print printed no CREATE TABLE"
  log "ok: $image runs --help, version, dev --help and migrate --print read-only as $IMAGE_UID:$IMAGE_UID with no network"
)

# The check's throwaway image names, global for the EXIT trap (a
# function's locals are gone when it runs).
CHECK_NAMES=()

check() {
  install
  [[ "$OFFICIAL_GO_IMAGE" == *":$GO_VERSION-"* ]] ||
    fail "the Containerfile's GO_IMAGE $OFFICIAL_GO_IMAGE is not Go $GO_VERSION, as go.mod asks"
  GO_IMAGE="$(go_image)" # once for both builds
  trap 'if ((${#CHECK_NAMES[@]})); then podman rmi "${CHECK_NAMES[@]}" >/dev/null 2>&1 || true; fi' EXIT
  local name arch
  for arch in amd64 arm64; do
    name="localhost/driftguard-check:$$-$arch"
    CHECK_NAMES+=("$name")
    build --platform "linux/$arch" "$name" >/dev/null
    test_image "$name" "$arch"
  done
}

case "${1:-}" in
  install) install ;;
  build) shift; build "$@" ;;
  test) test_image "${2:-}" ;;
  check) check ;;
  *)
    echo "usage: $0 install | build [--platform OS/ARCH] [NAME...] | test [NAME] | check" >&2
    exit 2
    ;;
esac
