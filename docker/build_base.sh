#!/usr/bin/env bash
# Build the local stand-in for python:3.11-slim-bookworm when no image registry is
# reachable: a minimal Debian bookworm made with debootstrap, plus Python 3.11 (Debian's
# python3, with venv) and CA certificates, imported as a Docker image.
#
#   docker/build_base.sh [TAG]            (default TAG: cdc-sink/base:bookworm)
#
# The mirror is $DEBIAN_MIRROR, else the first Debian mirror apt is configured with on
# this machine, else http://deb.debian.org/debian. Needs root, debootstrap and docker.
# The extra CA certificates this machine trusts ($EXTRA_CA_DIR, default
# /usr/local/share/ca-certificates, e.g. those of a TLS-inspecting egress proxy) are
# trusted in the image too, so pip and Maven reach PyPI and Maven Central during builds.
set -euo pipefail
TAG="${1:-cdc-sink/base:bookworm}"
SUITE=bookworm
INCLUDE=python3,python3-venv,ca-certificates

mirror="${DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
  mirror="$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list \
             /etc/apt/sources.list.d/*.list 2>/dev/null \
           | grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -n1 | tr -d ' ' || true)"
fi
mirror="${mirror:-http://deb.debian.org/debian}"

root="$(mktemp -d /tmp/cdc_sink-base.XXXXXX)"
unmount_all() {  # whatever debootstrap left mounted under the root (e.g. /proc)
  grep -o " $root/[^ ]*" /proc/mounts 2>/dev/null | sort -r | while read -r m; do
    umount -l "$m" || true
  done || true
}
trap 'unmount_all; rm -rf --one-file-system "$root"' EXIT
echo "debootstrap $SUITE from $mirror into $root"
debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$root" "$mirror" >"$root.log" 2>&1 \
  || { tail -n 40 "$root.log"; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
unmount_all
# Slim like the Debian images: no apt lists, no caches, no man pages or docs.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
       "$root"/usr/share/man/* "$root"/usr/share/doc/* "$root"/tmp/*
ca_dir="${EXTRA_CA_DIR:-/usr/local/share/ca-certificates}"
if compgen -G "$ca_dir/*.crt" >/dev/null; then
  cp "$ca_dir"/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null
fi
printf 'deb %s %s main\ndeb %s %s-updates main\n' "$mirror" "$SUITE" "$mirror" "$SUITE" \
  >"$root/etc/apt/sources.list"
mkdir -p "$root/usr/share/man/man1"  # openjdk's postinst links man pages here
tar --numeric-owner --one-file-system -C "$root" -c . \
  | docker import --change 'ENV LANG=C.UTF-8' \
      --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
      --change 'ENV REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt' \
      --change 'CMD ["/bin/bash"]' - "$TAG"
echo "built $TAG"
