#!/usr/bin/env bash
# Healthy when the broker accepts connections on the port of its first listener.
set -euo pipefail
conf="${KAFKA_CONF_DIR:-/var/lib/kafka/config}/server.properties"
listeners="$(sed -n 's/^listeners=//p' "$conf")"
first="${listeners%%,*}"
hostport="${first#*://}"
port="${hostport##*:}"
host="${hostport%:*}"
case "$host" in "" | 0.0.0.0 | "[::]") host=127.0.0.1 ;; esac  # every interface: loopback too
host="${host#[}"; host="${host%]}"
exec 3<>"/dev/tcp/$host/$port"
