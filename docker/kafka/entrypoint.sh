#!/usr/bin/env bash
# Writes server.properties (single-node KRaft defaults, overridden by KAFKA_* variables
# as apache/kafka reads them), formats the storage once, and runs kafka.Kafka.
set -euo pipefail
conf_dir="${KAFKA_CONF_DIR:-/var/lib/kafka/config}"
mkdir -p "$conf_dir"
conf="$conf_dir/server.properties"

declare -A props=(
  [process.roles]=broker,controller
  [node.id]=1
  [controller.quorum.voters]=1@localhost:9093
  [listeners]=PLAINTEXT://:9092,CONTROLLER://:9093
  [advertised.listeners]=PLAINTEXT://localhost:9092
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
KAFKA_CONF_DIR KAFKA_VERSION KAFKA_HOME "
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
