#!/usr/bin/env bash
# Build the FLTest base image (Debian + python3, nginx) locally, without a container registry:
# debootstrap a minbase rootfs of the kit's Debian release (deploy/kit.env: FLTEST_DEBIAN_RELEASE),
# then `docker import` it.
#
# Usage:  sudo ./build-base-image.sh [TAG]
# Env:    BASE_TAG       image tag (default fltest-base:<release>; the TAG argument wins)
#         DEBIAN_MIRROR  Debian archive URI (default: the host's Debian mirror, read from its apt sources)
#         FORCE=1        rebuild even if the tag already exists
#         TMPDIR         where the temporary rootfs is built (needs ~300 MB)
set -euo pipefail

KIT_FILE="$(cd "$(dirname "$0")/../.." && pwd)/deploy/kit.env"
SUITE="$(sed -n 's/^FLTEST_DEBIAN_RELEASE=//p' "$KIT_FILE")"
[[ -n "$SUITE" ]] || { printf '[build-base-image] ERROR: no FLTEST_DEBIAN_RELEASE in %s\n' "$KIT_FILE" >&2; exit 1; }
TAG="${1:-${BASE_TAG:-fltest-base:$SUITE}}"
# nginx: the Flower SuperLink's Fleet proxy (deploy/node/fleet_proxy.conf), the only listener SuperNodes reach.
PACKAGES="python3,python3-venv,ca-certificates,nginx"
IMAGE_PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

log() { printf '[build-base-image] %s\n' "$*" >&2; }
die() { printf '[build-base-image] ERROR: %s\n' "$*" >&2; exit 1; }

# Print the first URI of an enabled "deb" source of Debian's main archive: a suite without a "-"
# (bookworm, trixie; not bookworm-security or -updates) and the component main. Any release's mirror
# serves every release, so a bookworm host's mirror builds a trixie image.
# Handles one-line *.list files and deb822 *.sources files.
find_host_mirror() {
	local f
	shopt -s nullglob
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -r "$f" ]] || continue
		# deb [opt=a opt2=b] URI SUITE COMPONENT...
		sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk '
			$1 == "deb" && $3 !~ /-/ {
				for (i = 4; i <= NF; i++) if ($i == "main") { print $2; exit }
			}'
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -r "$f" ]] || continue
		awk '
			function release(list,   n, a, i) {
				n = split(list, a, /[ \t]+/)
				for (i = 1; i <= n; i++) if (a[i] != "" && a[i] !~ /-/) return 1
				return 0
			}
			function has(list, word,   n, a, i) {
				n = split(list, a, /[ \t]+/)
				for (i = 1; i <= n; i++) if (a[i] == word) return 1
				return 0
			}
			function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
			function flush(   n, u, i) {
				if (has(f["types"], "deb") && release(f["suites"]) &&
				    has(f["components"], "main") && tolower(f["enabled"]) != "no") {
					n = split(f["uris"], u, /[ \t]+/)
					for (i = 1; i <= n; i++) if (u[i] != "") { print u[i]; found = 1; break }
				}
				split("", f); key = ""
			}
			/^#/ { next }
			/^[ \t]*$/ { flush(); if (found) exit; next }
			/^[ \t]/ { if (key != "") f[key] = trim(f[key] " " trim($0)); next }
			{
				key = tolower(trim(substr($0, 1, index($0, ":") - 1)))
				f[key] = trim(substr($0, index($0, ":") + 1))
			}
			END { if (!found) flush() }' "$f"
	done
}

# ---------------------------------------------------------------- checks
[[ "${EUID:-$(id -u)}" -eq 0 ]] || die "must run as root (debootstrap needs it)"
command -v docker >/dev/null 2>&1 || die "docker client not found in PATH"
docker info >/dev/null 2>&1 || die "cannot talk to the docker engine (is dockerd running?)"

if [[ -z "${FORCE:-}" ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
	log "image $TAG already exists; nothing to do (set FORCE=1 to rebuild)"
	exit 0
fi

MIRROR="${DEBIAN_MIRROR:-}"
if [[ -z "$MIRROR" ]]; then
	MIRROR="$(find_host_mirror | head -n 1 || true)"
	[[ -n "$MIRROR" ]] || die "no Debian 'main' mirror found in /etc/apt/sources.list{,.d/*.list,.d/*.sources}; set DEBIAN_MIRROR=http://<mirror>/debian"
	log "using Debian mirror from host apt config: $MIRROR"
else
	log "using Debian mirror from DEBIAN_MIRROR: $MIRROR"
fi
MIRROR="${MIRROR%/}"

if ! command -v debootstrap >/dev/null 2>&1; then
	command -v apt-get >/dev/null 2>&1 || die "debootstrap is missing and apt-get is unavailable to install it"
	log "installing debootstrap"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

ARCH="$(dpkg --print-architecture 2>/dev/null || echo amd64)"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
keyring_opt=()
if [[ -r "$KEYRING" ]]; then
	keyring_opt=(--keyring="$KEYRING")
else
	log "WARNING: $KEYRING not found; debootstrap will not verify Release signatures"
	keyring_opt=(--no-check-gpg)
fi

# ---------------------------------------------------------------- workdir
WORK="$(mktemp -d -t fltest-base.XXXXXX)"
ROOTFS="$WORK/rootfs"
cleanup() {
	local m
	# Unmount anything debootstrap may have left mounted (proc, sys, /dev
	# bind mounts) *before* deleting, so host device nodes are never touched.
	if [[ -d "$ROOTFS" ]]; then
		awk -v r="$ROOTFS" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/self/mounts |
			sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	fi
	rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start=$SECONDS
log "debootstrap --variant=minbase $SUITE ($ARCH) into $ROOTFS"
debootstrap --variant=minbase --arch="$ARCH" --components=main \
	--include="$PACKAGES" "${keyring_opt[@]}" \
	"$SUITE" "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 || {
	tail -n 30 "$WORK/debootstrap.log" >&2
	die "debootstrap failed (last lines above)"
}
log "debootstrap done in $((SECONDS - start))s"

# ---------------------------------------------------------------- cleanup rootfs
log "cleaning apt lists/caches and host-specific files"
chroot "$ROOTFS" apt-get clean
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin \
	"$ROOTFS"/var/cache/debconf/*-old "$ROOTFS"/var/lib/dpkg/*-old \
	"$ROOTFS"/var/log/* "$ROOTFS"/tmp/* "$ROOTFS"/var/tmp/* "$ROOTFS"/root/.cache
mkdir -p "$ROOTFS"/var/lib/apt/lists/partial
# docker bind-mounts these at run time; do not bake in the build host's copies
rm -f "$ROOTFS"/etc/hostname "$ROOTFS"/etc/resolv.conf "$ROOTFS"/etc/machine-id
# Keep future `apt-get install` in derived images from leaving caches behind
cat >"$ROOTFS"/etc/apt/apt.conf.d/docker-clean <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
EOF
log "rootfs size: $(du -sh --one-file-system "$ROOTFS" | cut -f1)"

# ---------------------------------------------------------------- import
log "importing rootfs as $TAG"
previous="$(docker image inspect --format '{{.Id}}' "$TAG" 2>/dev/null || true)"  # FORCE=1: the image the tag leaves
tar --numeric-owner --one-file-system -C "$ROOTFS" -c . |
	docker import \
		--change "ENV PATH=$IMAGE_PATH" \
		--change "ENV LANG=C.UTF-8" \
		--change 'CMD ["python3"]' \
		--message "FLTest base: debootstrap $SUITE minbase + $PACKAGES" \
		- "$TAG" >/dev/null
# No untagged image is left behind; one that images are built on stays (docker refuses) until they go.
if [[ -n "$previous" && "$(docker image inspect --format '{{len .RepoTags}}' "$previous" 2>/dev/null)" == 0 ]]; then
	docker rmi "$previous" >/dev/null 2>&1 || log "kept the previous $TAG ($previous): images are built on it"
fi

log "built $TAG in $((SECONDS - start))s"
docker images "$TAG" >&2
