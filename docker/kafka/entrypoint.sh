#!/usr/bin/env bash
# Writes server.properties (single-node KRaft defaults, overridden by KAFKA_* variables
# as apache/kafka reads them), formats the storage once, and runs kafka.Kafka.
#
# Closed by default: the client listener binds KAFKA_BIND_ADDRESS (default 127.0.0.1, this
# host only) and the controller 127.0.0.1 always; the listeners are PLAINTEXT (no TLS, no
# authentication). To serve other hosts, set KAFKA_BIND_ADDRESS (0.0.0.0: every
# interface) and KAFKA_ADVERTISED_HOST (the name clients connect to; required with a
# wildcard address), or give KAFKA_LISTENERS/KAFKA_ADVERTISED_LISTENERS yourself - and
# prefer SASL_SSL listeners there (docs/security.md). A PLAINTEXT listener on anything
# but loopback is started with a warning on stderr.
set -euo pipefail
conf_dir="${KAFKA_CONF_DIR:-/var/lib/kafka/config}"
mkdir -p "$conf_dir"
conf="$conf_dir/server.properties"

bind="${KAFKA_BIND_ADDRESS:-127.0.0.1}"
case "$bind" in
  0.0.0.0 | "::" | "[::]" | "")
    if [ -z "${KAFKA_ADVERTISED_HOST:-}" ]; then
      echo "entrypoint: KAFKA_BIND_ADDRESS=$bind listens on every interface: set" \
        "KAFKA_ADVERTISED_HOST to the host name clients connect to" >&2
      exit 2
    fi ;;
esac
case "$bind" in *:*) [ "${bind:0:1}" = "[" ] || bind="[$bind]" ;; esac  # IPv6 literal
advertised="${KAFKA_ADVERTISED_HOST:-$bind}"

declare -A props=(
  [process.roles]=broker,controller
  [node.id]=1
  [controller.quorum.voters]=1@127.0.0.1:9093
  [listeners]=PLAINTEXT://$bind:9092,CONTROLLER://127.0.0.1:9093
  [advertised.listeners]=PLAINTEXT://$advertised:9092
  [controller.listener.names]=CONTROLLER
  [inter.broker.listener.name]=PLAINTEXT
  [listener.security.protocol.map]=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
  [log.dirs]=/var/lib/kafka/data
  [num.partitions]=1
  [auto.create.topics.enable]=false
  [default.replication.factor]=1
  [min.insync.replicas]=1
  [offsets.topic.replication.factor]=1
  [offsets.topic.num.partitions]=5
  [transaction.state.log.replication.factor]=1
  [transaction.state.log.min.isr]=1
  [transaction.state.log.num.partitions]=5
  [share.coordinator.state.topic.replication.factor]=1
  [share.coordinator.state.topic.min.isr]=1
  [group.initial.rebalance.delay.ms]=0
  [num.network.threads]=2
  [num.io.threads]=2
  [num.recovery.threads.per.data.dir]=1
  [delete.topic.enable]=true
)
# Not properties: the JVM and logging options of Kafka's own scripts.
skip=" KAFKA_HEAP_OPTS KAFKA_OPTS KAFKA_JVM_PERFORMANCE_OPTS KAFKA_LOG4J_OPTS KAFKA_JMX_OPTS \
KAFKA_GC_LOG_OPTS KAFKA_LOG4J_ROOT_LOGLEVEL KAFKA_LOG4J_LOGGERS KAFKA_TOOLS_LOG4J_LOGLEVEL \
KAFKA_CONF_DIR KAFKA_VERSION KAFKA_HOME KAFKA_BIND_ADDRESS KAFKA_ADVERTISED_HOST "
for var in $(compgen -e); do
  case "$var" in KAFKA_*) ;; *) continue ;; esac
  case "$skip" in *" $var "*) continue ;; esac
  name="${var#KAFKA_}"; name="${name,,}"
  name="${name//___/-}"; name="${name//__/@}"; name="${name//_/.}"; name="${name//@/_}"
  props[$name]="${!var}"
done
: >"$conf"
for key in $(printf '%s\n' "${!props[@]}" | sort); do
  printf '%s=%s\n' "$key" "${props[$key]}" >>"$conf"
done

# Warn about every PLAINTEXT listener that other hosts may reach.
declare -A protocol=()
IFS=, read -ra pairs <<<"${props[listener.security.protocol.map]}"
for pair in "${pairs[@]}"; do protocol[${pair%%:*}]="${pair#*:}"; done
IFS=, read -ra listeners <<<"${props[listeners]}"
for listener in "${listeners[@]}"; do
  name="${listener%%://*}"; hostport="${listener#*://}"; host="${hostport%:*}"
  case "$host" in 127.* | localhost | "[::1]") continue ;; esac
  if [ "${protocol[$name]:-$name}" = PLAINTEXT ]; then
    echo "entrypoint: warning: listener $listener accepts anyone who reaches it, without" \
      "TLS or authentication (PLAINTEXT); see docs/security.md" >&2
  fi
done

cat >"$conf_dir/log4j2.properties" <<LOG
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = ${KAFKA_LOG4J_ROOT_LOGLEVEL:-INFO}
rootLogger.appenderRef.out.ref = OUT
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
LOG

# shellcheck disable=SC2206  # word splitting of the options is intended
jvm=(java ${KAFKA_HEAP_OPTS:-}
     ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseSerialGC -XX:TieredStopAtLevel=1}
     -Djava.awt.headless=true -Djava.net.preferIPv4Stack=true
     "-Dlog4j2.configurationFile=$conf_dir/log4j2.properties" ${KAFKA_OPTS:-}
     -cp "/opt/kafka/libs/*")
"${jvm[@]}" kafka.tools.StorageTool format --ignore-formatted \
  -t "${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}" -c "$conf"
exec "${jvm[@]}" kafka.Kafka "$conf"
