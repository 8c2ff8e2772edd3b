// Compatibility driver: plain kafka-clients calls behind a small command line.
//
// Usage: GregorClient <command> --bootstrap HOST:PORT --topic T [options]
//   create-topic  --partitions N --replication-factor R [--topic-config k=v]...
//   delete-topic  (returns once metadata no longer lists the topic)
//   produce       [--config k=v]... [--allow-errors true]   stdin: one JSON record per line
//                 {"key": b64|null, "value": b64|null, "headers": [[name, b64|null]...],
//                  "partition": int|null, "timestamp": int|null}
//                 stdout: {"partition", "offset", "timestamp"} or {"error"} per record, in
//                 input order (a failed record exits 1 unless --allow-errors true)
//   consume       --count N [--timeout-ms M] [--until-end true] [--config k=v]...
//                 assigns every partition from the beginning; stdout: one JSON record per line
//   list-offsets  --spec earliest|latest|<timestamp ms>... [--via consumer|admin]
//                 stdout: {"spec", "partition", "offset", "timestamp"} per spec and partition
//                 (offset null if no record is that late)
//   group-consume --group G [--pattern REGEX] [--config k=v]...
//                 subscribes in group G (to the topics the broker resolves REGEX to, as
//                 subscribe(SubscriptionPattern), if given), commits after every poll; stdout:
//                 {"event": "assigned"|"revoked"|"lost", "partitions": [...], "topics": [...]
//                 (each partition's topic)} on every rebalance
//                 callback, {"event": "first", "partition", "offset"} for the first
//                 record seen per partition, {"event": "commit-failed"} when a commit
//                 fails with CommitFailedException (it consumes on), {"event": "read",
//                 "partition", "from", "to", "count", "read_at", "committed_at" (ms, null
//                 if the commit failed)} per partition of every batch, {"event": "closed",
//                 "consumed"} at the end. stdin: any line or EOF closes the consumer cleanly.
//   share-consume --group G [--ack implicit|explicit] [--release VALUE=N]... [--reject VALUE]...
//                 [--hold-after N] [--config k=v]...   a KafkaShareConsumer (share group G)
//                 subscribed to the topic, acknowledging as share.acknowledgement.mode says:
//                 implicit (the default) accepts a poll's records at the next poll; explicit
//                 ACCEPTs each record unless its value (decimal text) is named by --release
//                 (RELEASE while its delivery count is at most N) or --reject (REJECT).
//                 --hold-after N: once N records arrived, stops polling and acknowledging (the
//                 last batch stays acquired) and prints {"event": "holding"}. stdout:
//                 {"event": "record", "partition", "offset", "value", "delivery_count", "ack"}
//                 per record ("ack": the type given, or "IMPLICIT"), {"event": "ack-failed",
//                 "at_ms", "partition", "offsets", "error"} from the acknowledgement commit
//                 callback (at_ms: the client's clock, to find the broker's log lines),
//                 {"event": "closed", "received"} at the end. stdin: any line or EOF closes
//                 the consumer cleanly (a held batch is then acknowledged as its mode says).
//   share-admin   --group G --action list|describe|alter|delete-offsets|delete-group
//                 [--offset P=N]...   the Admin's share group calls: list prints
//                 {"event": "listed", "group", "type", "state"} per group listGroups (type
//                 SHARE) lists; describe {"event": "described", "state", "group_epoch",
//                 "assignment_epoch", "members": [{"client_id", "member_epoch",
//                 "partitions"}]} (describeShareGroups) and {"event": "offset", "partition",
//                 "start_offset", "leader_epoch"} per partition (listShareGroupOffsets);
//                 alter (alterShareGroupOffsets of the --offset partitions) prints
//                 {"event": "altered", "partition", "error"} each; delete-offsets
//                 (deleteShareGroupOffsets of the topic) and delete-group
//                 (deleteShareGroups) print {"event": "deleted", "error"}
//   group-commit  --group G --count N [--timeout-ms M] [--config k=v]...   subscribes in
//                 group G, polls until N records, commits them, closes; stdout: {"consumed"}
//   group-offsets --group G [--config k=v]...   the group's committed offsets (the Admin's
//                 listConsumerGroupOffsets); stdout: {"partition", "offset"} each
//   create-partitions --count N       grows the topic to N partitions
//   describe-log-dirs                  stdout: {"broker", "log_dir", "error", "total_bytes",
//                 "usable_bytes", "replicas": [{"topic", "partition", "size", "offset_lag",
//                 "is_future"}]} per log dir of every broker
//   elect-leaders --election PREFERRED|UNCLEAN [--partition P]...  (no --partition: all)
//                 stdout: {"partition", "error"} per partition answered (error: class or null)
//   alter-reassignment --partition P [--replica B]...  (no --replica: cancel)
//                 stdout: {"partition", "error"}
//   list-reassignments  stdout: {"topic", "partition", "replicas", "adding", "removing"}
//   alter-configs --resource topic|broker|group:NAME [--validate-only true]
//                 [--set k=v]... [--delete k]... [--append k=v]... [--subtract k=v]...
//                 incremental (NAME may be empty: the cluster-wide broker default).
//                 stdout: {"error", "message"}
//   describe-configs --resource type:NAME... [--key k]...
//                 stdout: {"resource", "name", "value", "source", "read_only", "synonyms":
//                 [[name, value, source]...]} per entry, or {"resource", "error", "message"}
//   authorized-operations --group G   stdout: {"topic", "cluster", "group"}: each the
//                 sorted AclOperation names the broker reports (null if none)
//   alter-quotas  --entity TYPE=NAME[,TYPE=NAME]... (NAME <default>: the default; one
//                 --entity per entity) [--set KEY=VALUE]... [--remove KEY]...
//                 [--validate-only true]   the same changes to every entity; {"altered": N}
//   describe-quotas [--filter TYPE=NAME]...  (none: all)  stdout: {"entity", "values"} each
//   produce-rate  --seconds S --record-size B   sends as fast as the producer takes records;
//                 stdout every second: {"t": ms, "bytes": value bytes acknowledged so far,
//                 "throttle_avg", "throttle_max": produce-throttle-time-avg/max,
//                 "connections": connection-creation-total}
//   consume-rate  --seconds S   reads every partition from the beginning; stdout every
//                 second: the same fields, bytes consumed, fetch-throttle-time-avg/max
//   delete-records --partition P --offset O   stdout: {"partition", "low_watermark", "error"}
//   describe-topics [--page-size N]   stdout: {"topic", "partition", "leader", "replicas",
//                 "isr"} per partition (DescribeTopicPartitions, N partitions per answer)
//   describe-producers --partition P  stdout: {"partition", "producer_id", "epoch",
//                 "last_sequence"} per active producer
//   alter-log-dir --partition P --dir D [--broker B]   stdout: {"error", "current_dir"} (the replica's
//                 directory after the request, from describeReplicaLogDirs)
//   txn-session   --transactional-id ID [--config k=v]...   a transactional producer driven
//                 by stdin, one JSON operation per line: {"op": "init"|"begin"|"commit"|
//                 "abort"}, {"op": "send", "partition": P, "value": text} (waits for the ack),
//                 {"op": "offsets", "group": G, "offsets": {"P": offset}} (sendOffsetsToTransaction
//                 for this topic). stdout per operation: {"op", "ok": true} or {"op", "error":
//                 class, "causes": [class...], "message"}. EOF closes the producer.
//   seq-produce   --count N [--from F] [--throughput R]   N records, key and value the
//                 decimal text of F..F+N-1, idempotent, at most R records/s if given;
//                 stdout: {"produced": N}
//   digest        [--config k=v]...   reads every partition from the beginning up to the end
//                 offsets (the LSO under read_committed); values are decimal numbers; stdout:
//                 {"count", "distinct", "sum", "crc_sum"} (crc_sum: sum of the values' CRC32s)
//   txn-copy      --input IN --group G --transactional-id ID [--exit-when-caught-up true]
//                 [--hold-file PATH] [--config k=v]... [--producer-config k=v]...   a
//                 consume-transform-produce loop: read_committed group consumer on IN, each
//                 poll's records copied to the topic in one transaction with
//                 sendOffsetsToTransaction; while PATH exists, a transaction flushes its
//                 copies to the log, prints {"event": "holding"} and waits there to be
//                 killed. stdout: {"event":
//                 "committed", "records", "total"} per transaction, {"event": "aborted",
//                 "error"} when a transaction is abandoned, {"event": "caught-up", "total",
//                 "end"} once every partition of IN is consumed and committed up to its end
//                 offset (end: their sum; then exits 0 if asked), else {} from an idle poll;
//                 exits 2 when fenced, 3 when the producer cannot abort (the caller restarts it)
//   serve         runs commands read from stdin, one JVM for many (see serve() below)
// Binary fields are base64. A failure prints {"error": "..."} and exits 1.

import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.AlterConfigsOptions;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.AlterClientQuotasOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.errors.FencedInstanceIdException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.TopicPartitionReplica;

public final class GregorClient {
    private static final Base64.Encoder B64E = Base64.getEncoder();
    private static final Base64.Decoder B64D = Base64.getDecoder();

    private final Map<String, List<String>> opts = new HashMap<>();

    private GregorClient(String[] args, int from) {
        for (int i = from; i < args.length; i += 2) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                throw new IllegalArgumentException("expected --option value at " + args[i]);
            }
            opts.computeIfAbsent(args[i].substring(2), k -> new ArrayList<>()).add(args[i + 1]);
        }
    }

    public static void main(String[] args) throws IOException {
        if (args.length == 1 && args[0].equals("serve")) {
            serve();
            System.exit(0);
        }
        if (args.length == 1 && args[0].equals("warm")) {
            warm();
            System.exit(0);
        }
        int code = execute(args);
        System.out.flush();
        System.exit(code);
    }

    /** serve: one command per stdin line, {"args": [command, option...], "stdin": text}, run
     * in this JVM with System.in/out/err swapped for the request's; answers one line
     * {"exit", "stdout", "stderr"} per request. A test session saves a JVM start and the
     * client's class loading per command. */
    @SuppressWarnings("unchecked")
    private static void serve() throws IOException {
        InputStream stdin = System.in;
        PrintStream stdout = new PrintStream(new FileOutputStream(FileDescriptor.out), true,
                StandardCharsets.UTF_8);
        PrintStream stderr = System.err;
        BufferedReader requests = new BufferedReader(
                new InputStreamReader(stdin, StandardCharsets.UTF_8));
        String line;
        while ((line = requests.readLine()) != null) {
            Map<String, Object> r = (Map<String, Object>) new Json(line).value();
            String[] args = ((List<Object>) r.get("args")).toArray(String[]::new);
            String input = (String) r.getOrDefault("stdin", "");
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            System.setIn(new ByteArrayInputStream(input.getBytes(StandardCharsets.UTF_8)));
            System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            int code;
            try {
                code = execute(args);
            } finally {
                System.setIn(stdin);
                System.setOut(stdout);
                System.setErr(stderr);
            }
            stdout.println("{\"exit\": " + code
                    + ", \"stdout\": " + str(out.toString(StandardCharsets.UTF_8))
                    + ", \"stderr\": " + str(err.toString(StandardCharsets.UTF_8)) + "}");
        }
    }

    /** warm: load every class of kafka-clients, and build and close each kind of client
     * without a broker, for the class-data archive that later JVMs map (java_client.py). */
    private static void warm() throws IOException {
        Path jar = Path.of(KafkaProducer.class.getProtectionDomain().getCodeSource().getLocation()
                .getPath());
        try (java.util.jar.JarFile classes = new java.util.jar.JarFile(jar.toFile())) {
            for (var entries = classes.entries(); entries.hasMoreElements(); ) {
                String name = entries.nextElement().getName();
                if (name.endsWith(".class") && !name.contains("-")) {
                    try {
                        Class.forName(name.substring(0, name.length() - 6).replace('/', '.'),
                                false, GregorClient.class.getClassLoader());
                    } catch (ClassNotFoundException | LinkageError e) {
                        // an optional dependency missing: that class stays out of the archive
                    }
                }
            }
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", "127.0.0.1:9");
        p.put("max.block.ms", "1");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("group.id", "warm");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.send(new ProducerRecord<>("warm", new byte[1]));
        }
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of("warm"));
            consumer.poll(Duration.ZERO);
        }
        Admin.create(p).close(Duration.ZERO);
        new Json("{\"warm\": [1, true, null, \"x\"]}").value();
    }

    /** Run one command; its exit code (a failure prints {"error": "..."} and is 1). */
    private static int execute(String[] args) {
        try {
            if (args.length == 0) {
                throw new IllegalArgumentException("missing command");
            }
            GregorClient c = new GregorClient(args, 1);
            return switch (args[0]) {
                case "create-topic" -> c.createTopic();
                case "delete-topic" -> c.deleteTopic();
                case "produce" -> c.produce();
                case "consume" -> c.consume();
                case "list-offsets" -> c.listOffsets();
                case "group-consume" -> c.groupConsume();
                case "share-consume" -> c.shareConsume();
                case "share-admin" -> c.shareAdmin();
                case "group-commit" -> c.groupCommit();
                case "group-offsets" -> c.groupOffsets();
                case "create-partitions" -> c.createPartitions();
                case "describe-log-dirs" -> c.describeLogDirs();
                case "elect-leaders" -> c.electLeaders();
                case "alter-reassignment" -> c.alterReassignment();
                case "list-reassignments" -> c.listReassignments();
                case "alter-configs" -> c.alterConfigs();
                case "describe-configs" -> c.describeConfigs();
                case "authorized-operations" -> c.authorizedOperations();
                case "alter-quotas" -> c.alterQuotas();
                case "describe-quotas" -> c.describeQuotas();
                case "produce-rate" -> c.produceRate();
                case "consume-rate" -> c.consumeRate();
                case "delete-records" -> c.deleteRecords();
                case "describe-topics" -> c.describeTopics();
                case "describe-producers" -> c.describeProducers();
                case "alter-log-dir" -> c.alterLogDir();
                case "txn-session" -> c.txnSession();
                case "seq-produce" -> c.seqProduce();
                case "digest" -> c.digest();
                case "txn-copy" -> c.txnCopy();
                default -> throw new IllegalArgumentException("unknown command " + args[0]);
            };
        } catch (Exception e) {
            Throwable root = e.getCause() != null ? e.getCause() : e;
            System.out.println(
                    "{\"error\": " + str(root.getClass().getName() + ": " + root.getMessage()) + "}");
            return 1;
        }
    }

    private String opt(String name, String dflt) {
        List<String> v = opts.get(name);
        if (v == null) {
            if (dflt == null) {
                throw new IllegalArgumentException("missing --" + name);
            }
            return dflt;
        }
        return v.get(v.size() - 1);
    }

    private Map<String, String> pairs(String name) {
        Map<String, String> out = new LinkedHashMap<>();
        for (String kv : opts.getOrDefault(name, List.of())) {
            int eq = kv.indexOf('=');
            out.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        return out;
    }

    private Properties props() {
        Properties p = new Properties();
        p.put("bootstrap.servers", opt("bootstrap", null));
        p.putAll(pairs("config"));
        return p;
    }

    private int createTopic() throws Exception {
        NewTopic t = new NewTopic(
                opt("topic", null),
                Optional.of(Integer.parseInt(opt("partitions", "1"))),
                Optional.of(Short.parseShort(opt("replication-factor", "1"))));
        t.configs(pairs("topic-config"));
        try (Admin admin = Admin.create(props())) {
            admin.createTopics(List.of(t)).all().get();
        }
        System.out.println("{\"created\": " + str(t.name()) + "}");
        return 0;
    }

    private int deleteTopic() throws Exception {
        String topic = opt("topic", null);
        try (Admin admin = Admin.create(props())) {
            admin.deleteTopics(List.of(topic)).all().get();
            // Done only once metadata stops listing it.
            long deadline = System.currentTimeMillis() + 30_000;
            while (admin.listTopics().names().get().contains(topic)) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException(topic + " still listed after deletion");
                }
                Thread.sleep(100);
            }
        }
        System.out.println("{\"deleted\": " + str(topic) + "}");
        return 0;
    }

    @SuppressWarnings("unchecked")
    private int produce() throws Exception {
        String topic = opt("topic", null);
        Properties p = props();
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
                BufferedReader in = new BufferedReader(
                        new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                Map<String, Object> r = (Map<String, Object>) new Json(line).value();
                List<Header> headers = new ArrayList<>();
                for (Object h : (List<Object>) r.getOrDefault("headers", List.of())) {
                    List<Object> kv = (List<Object>) h;
                    headers.add(new RecordHeader((String) kv.get(0), bytes(kv.get(1))));
                }
                Long partition = (Long) r.get("partition");
                sent.add(producer.send(new ProducerRecord<>(
                        topic,
                        partition == null ? null : partition.intValue(),
                        (Long) r.get("timestamp"),
                        bytes(r.get("key")),
                        bytes(r.get("value")),
                        headers)));
            }
            producer.flush();
            int code = 0;
            for (Future<RecordMetadata> f : sent) {
                try {
                    RecordMetadata m = f.get();
                    System.out.println("{\"partition\": " + m.partition() + ", \"offset\": "
                            + m.offset() + ", \"timestamp\": " + m.timestamp() + "}");
                } catch (Exception e) {
                    Throwable root = e.getCause() != null ? e.getCause() : e;
                    System.out.println("{\"error\": " + str(root.toString()) + "}");
                    code = 1;
                }
            }
            return opt("allow-errors", "false").equals("true") ? 0 : code;
        }
    }

    private List<TopicPartition> partitions(KafkaConsumer<byte[], byte[]> consumer, String topic) {
        List<TopicPartition> out = new ArrayList<>();
        for (PartitionInfo pi : consumer.partitionsFor(topic, Duration.ofSeconds(30))) {
            out.add(new TopicPartition(topic, pi.partition()));
        }
        if (out.isEmpty()) {
            throw new IllegalStateException("no partitions for " + topic);
        }
        return out;
    }

    private KafkaConsumer<byte[], byte[]> consumer() {
        return consumer(props());
    }

    private KafkaConsumer<byte[], byte[]> consumer(Properties p) {
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.putIfAbsent("enable.auto.commit", "false");
        return new KafkaConsumer<>(p);
    }

    private int consume() {
        String topic = opt("topic", null);
        long want = Long.parseLong(opt("count", null));
        long deadline = System.currentTimeMillis() + Long.parseLong(opt("timeout-ms", "30000"));
        long seen = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = consumer()) {
            List<TopicPartition> tps = partitions(consumer, topic);
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            // --until-end: also stop once every partition is read up to its end offset (the
            // LSO under read_committed) as it stood at the start.
            Map<TopicPartition, Long> end = opt("until-end", "false").equals("true")
                    ? consumer.endOffsets(tps) : null;
            while (seen < want && System.currentTimeMillis() < deadline
                    && (end == null || tps.stream().anyMatch(tp -> consumer.position(tp) < end.get(tp)))) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    StringBuilder hs = new StringBuilder("[");
                    for (Header h : r.headers()) {
                        hs.append(hs.length() > 1 ? ", [" : "[").append(str(h.key())).append(", ")
                                .append(b64(h.value())).append(']');
                    }
                    System.out.println("{\"partition\": " + r.partition() + ", \"offset\": "
                            + r.offset() + ", \"timestamp\": " + r.timestamp()
                            + ", \"timestamp_type\": " + str(r.timestampType().name)
                            + ", \"key\": " + b64(r.key()) + ", \"value\": " + b64(r.value())
                            + ", \"headers\": " + hs + "]}");
                    seen++;
                }
            }
        }
        return 0;
    }

    private int listOffsets() throws Exception {
        String topic = opt("topic", null);
        boolean viaAdmin = opt("via", "consumer").equals("admin");
        try (KafkaConsumer<byte[], byte[]> consumer = consumer();
                Admin admin = viaAdmin ? Admin.create(props()) : null) {
            List<TopicPartition> tps = partitions(consumer, topic);
            for (String spec : opts.getOrDefault("spec", List.of())) {
                Map<TopicPartition, Long> offsets = new HashMap<>();
                Map<TopicPartition, Long> stamps = new HashMap<>();
                if (viaAdmin) {
                    OffsetSpec os = switch (spec) {
                        case "earliest" -> OffsetSpec.earliest();
                        case "latest" -> OffsetSpec.latest();
                        default -> OffsetSpec.forTimestamp(Long.parseLong(spec));
                    };
                    Map<TopicPartition, OffsetSpec> req = new HashMap<>();
                    tps.forEach(tp -> req.put(tp, os));
                    Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> res =
                            admin.listOffsets(req).all().get();
                    for (TopicPartition tp : tps) {
                        ListOffsetsResult.ListOffsetsResultInfo info = res.get(tp);
                        // The admin API reports "no such timestamp" as offset -1.
                        offsets.put(tp, info.offset() < 0 ? null : info.offset());
                        stamps.put(tp, info.timestamp() < 0 ? null : info.timestamp());
                    }
                } else if (spec.equals("earliest")) {
                    offsets.putAll(consumer.beginningOffsets(tps));
                } else if (spec.equals("latest")) {
                    offsets.putAll(consumer.endOffsets(tps));
                } else {
                    Map<TopicPartition, Long> query = new HashMap<>();
                    tps.forEach(tp -> query.put(tp, Long.parseLong(spec)));
                    Map<TopicPartition, OffsetAndTimestamp> res = consumer.offsetsForTimes(query);
                    for (TopicPartition tp : tps) {
                        OffsetAndTimestamp ot = res.get(tp);
                        offsets.put(tp, ot == null ? null : ot.offset());
                        stamps.put(tp, ot == null ? null : ot.timestamp());
                    }
                }
                for (TopicPartition tp : tps) {
                    System.out.println("{\"spec\": " + str(spec) + ", \"partition\": "
                            + tp.partition() + ", \"offset\": " + offsets.get(tp)
                            + ", \"timestamp\": " + stamps.get(tp) + "}");
                }
            }
        }
        return 0;
    }

    private int groupConsume() throws Exception {
        Properties p = props();
        p.put("group.id", opt("group", null));
        p.putIfAbsent("auto.offset.reset", "earliest");
        p.putIfAbsent("group.protocol", "classic");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.putIfAbsent("enable.auto.commit", "false");
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p);
        Thread stdin = new Thread(() -> {
            try {
                System.in.read();
            } catch (java.io.IOException e) {
                // EOF or a closed pipe: close the consumer either way
            }
            consumer.wakeup();
        });
        stdin.setDaemon(true);
        stdin.start();
        java.util.Set<Integer> seen = new java.util.HashSet<>();
        long consumed = 0;
        try {
            ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsAssigned(java.util.Collection<TopicPartition> tps) {
                    event("assigned", tps);
                }

                @Override
                public void onPartitionsRevoked(java.util.Collection<TopicPartition> tps) {
                    event("revoked", tps);
                }

                @Override
                public void onPartitionsLost(java.util.Collection<TopicPartition> tps) {
                    event("lost", tps);
                }
            };
            if (opts.containsKey("pattern")) {
                consumer.subscribe(new org.apache.kafka.clients.consumer.SubscriptionPattern(
                        opt("pattern", null)), listener);
            } else {
                consumer.subscribe(List.of(opt("topic", null)), listener);
            }
            while (true) {
                var records = consumer.poll(Duration.ofMillis(200));
                long readAt = System.currentTimeMillis();
                // Each partition's offsets in this batch, to print with the commit's outcome.
                Map<Integer, long[]> ranges = new java.util.TreeMap<>();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    if (seen.add(r.partition())) {
                        System.out.println("{\"event\": \"first\", \"partition\": "
                                + r.partition() + ", \"offset\": " + r.offset() + "}");
                    }
                    ranges.computeIfAbsent(r.partition(), k -> new long[] {r.offset(), 0, 0});
                    long[] range = ranges.get(r.partition());
                    range[1] = r.offset();
                    range[2]++;
                    consumed++;
                }
                if (!records.isEmpty()) {
                    // null unless the commit is known to have succeeded (a wakeup may stop
                    // commitSync after it sent the commit).
                    String committedAt = "null";
                    try {
                        consumer.commitSync();
                        committedAt = Long.toString(System.currentTimeMillis());
                    } catch (org.apache.kafka.clients.consumer.CommitFailedException e) {
                        // A rebalance moved on meanwhile (e.g. a member epoch bumped while
                        // the commit was in flight): as an application does, consume on.
                        System.out.println("{\"event\": \"commit-failed\"}");
                    } finally {
                        for (var e : ranges.entrySet()) {
                            long[] range = e.getValue();
                            System.out.println("{\"event\": \"read\", \"partition\": "
                                    + e.getKey() + ", \"from\": " + range[0] + ", \"to\": "
                                    + range[1] + ", \"count\": " + range[2] + ", \"read_at\": "
                                    + readAt + ", \"committed_at\": " + committedAt + "}");
                        }
                    }
                }
                System.out.flush();
            }
        } catch (org.apache.kafka.common.errors.WakeupException e) {
            // asked to stop
        } finally {
            consumer.close();
        }
        System.out.println("{\"event\": \"closed\", \"consumed\": " + consumed + "}");
        return 0;
    }

    private int shareConsume() throws Exception {
        Properties p = props();
        p.put("group.id", opt("group", null));
        p.put("share.acknowledgement.mode", opt("ack", "implicit"));
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        boolean explicit = opt("ack", "implicit").equals("explicit");
        Map<String, String> release = pairs("release");
        Set<String> reject = Set.copyOf(opts.getOrDefault("reject", List.of()));
        long holdAfter = Long.parseLong(opt("hold-after", "-1"));
        KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(p);
        java.util.concurrent.CountDownLatch closing = new java.util.concurrent.CountDownLatch(1);
        Thread stdin = new Thread(() -> {
            try {
                System.in.read();
            } catch (java.io.IOException e) {
                // EOF or a closed pipe: close the consumer either way
            }
            closing.countDown();
            consumer.wakeup();
        });
        stdin.setDaemon(true);
        stdin.start();
        // Called on this thread, inside poll/close: printing needs no lock.
        consumer.setAcknowledgementCommitCallback((offsets, error) -> {
            if (error == null) {
                return;
            }
            for (var e : offsets.entrySet()) {
                System.out.println("{\"event\": \"ack-failed\", \"at_ms\": "
                        + System.currentTimeMillis() + ", \"partition\": "
                        + e.getKey().partition() + ", \"offsets\": " + e.getValue()
                        + ", \"error\": " + str(error.getClass().getName() + ": "
                        + error.getMessage()) + "}");
            }
            System.out.flush();
        });
        long received = 0;
        try {
            consumer.subscribe(List.of(opt("topic", null)));
            while (holdAfter < 0 || received < holdAfter) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    String value = new String(r.value(), StandardCharsets.UTF_8);
                    int count = r.deliveryCount().orElse((short) -1);
                    String ack = "IMPLICIT";
                    if (explicit) {
                        AcknowledgeType type = reject.contains(value) ? AcknowledgeType.REJECT
                                : release.containsKey(value)
                                        && count <= Integer.parseInt(release.get(value))
                                ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
                        consumer.acknowledge(r, type);
                        ack = type.name();
                    }
                    received++;
                    System.out.println("{\"event\": \"record\", \"partition\": " + r.partition()
                            + ", \"offset\": " + r.offset() + ", \"value\": " + str(value)
                            + ", \"delivery_count\": " + count + ", \"ack\": " + str(ack) + "}");
                }
                System.out.flush();
            }
            System.out.println("{\"event\": \"holding\"}");
            System.out.flush();
            closing.await();
        } catch (org.apache.kafka.common.errors.WakeupException e) {
            // asked to stop
        } finally {
            consumer.close();
        }
        System.out.println("{\"event\": \"closed\", \"received\": " + received + "}");
        return 0;
    }

    private int shareAdmin() throws Exception {
        String group = opt("group", null);
        String topic = opt("topic", null);
        try (Admin admin = Admin.create(props())) {
            switch (opt("action", null)) {
                case "list" -> {
                    var options = new org.apache.kafka.clients.admin.ListGroupsOptions()
                            .withTypes(Set.of(org.apache.kafka.common.GroupType.SHARE));
                    for (var g : admin.listGroups(options).all().get()) {
                        System.out.println("{\"event\": \"listed\", \"group\": "
                                + str(g.groupId()) + ", \"type\": "
                                + str(g.type().map(Enum::name).orElse(null)) + ", \"state\": "
                                + str(g.groupState().map(Enum::name).orElse(null)) + "}");
                    }
                }
                case "describe" -> {
                    var d = admin.describeShareGroups(List.of(group)).describedGroups()
                            .get(group).get();
                    StringBuilder members = new StringBuilder();
                    for (var m : d.members()) {
                        List<Integer> parts = new ArrayList<>();
                        m.assignment().topicPartitions().forEach(tp -> parts.add(tp.partition()));
                        parts.sort(null);
                        members.append(members.length() > 0 ? ", " : "")
                                .append("{\"client_id\": ").append(str(m.clientId()))
                                .append(", \"member_epoch\": ").append(m.memberEpoch())
                                .append(", \"partitions\": ").append(parts).append("}");
                    }
                    System.out.println("{\"event\": \"described\", \"state\": "
                            + str(d.groupState().name()) + ", \"group_epoch\": "
                            + d.groupEpoch() + ", \"assignment_epoch\": "
                            + d.targetAssignmentEpoch() + ", \"members\": [" + members + "]}");
                    var spec = new org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec();
                    var offsets = admin.listShareGroupOffsets(Map.of(group, spec))
                            .partitionsToOffsetInfo(group).get();
                    for (var e : offsets.entrySet()) {
                        var info = e.getValue();
                        System.out.println("{\"event\": \"offset\", \"partition\": "
                                + e.getKey().partition() + ", \"start_offset\": "
                                + (info == null ? "null" : info.startOffset())
                                + ", \"leader_epoch\": " + (info == null ? "null"
                                        : info.leaderEpoch().map(String::valueOf).orElse("null"))
                                + "}");
                    }
                }
                case "alter" -> {
                    Map<TopicPartition, Long> wanted = new LinkedHashMap<>();
                    for (String spec : opts.getOrDefault("offset", List.of())) {
                        String[] kv = spec.split("=", 2);
                        wanted.put(new TopicPartition(topic, Integer.parseInt(kv[0])),
                                Long.parseLong(kv[1]));
                    }
                    var result = admin.alterShareGroupOffsets(group, wanted);
                    for (TopicPartition tp : wanted.keySet()) {
                        System.out.println("{\"event\": \"altered\", \"partition\": "
                                + tp.partition() + ", \"error\": "
                                + errorOf(result.partitionResult(tp)) + "}");
                    }
                }
                case "delete-offsets" -> System.out.println("{\"event\": \"deleted\", \"error\": "
                        + errorOf(admin.deleteShareGroupOffsets(group, Set.of(topic))
                                .topicResult(topic)) + "}");
                case "delete-group" -> System.out.println("{\"event\": \"deleted\", \"error\": "
                        + errorOf(admin.deleteShareGroups(List.of(group)).all()) + "}");
                default -> throw new IllegalArgumentException("unknown --action");
            }
        }
        return 0;
    }

    private int groupCommit() {
        Properties p = props();
        p.put("group.id", opt("group", null));
        p.putIfAbsent("auto.offset.reset", "earliest");
        long want = Long.parseLong(opt("count", null));
        long deadline = System.currentTimeMillis() + Long.parseLong(opt("timeout-ms", "30000"));
        long consumed = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(p)) {
            consumer.subscribe(List.of(opt("topic", null)));
            while (consumed < want && System.currentTimeMillis() < deadline) {
                consumed += consumer.poll(Duration.ofMillis(200)).count();
            }
            consumer.commitSync();
        }
        System.out.println("{\"consumed\": " + consumed + "}");
        return 0;
    }

    private int groupOffsets() throws Exception {
        try (Admin admin = Admin.create(props())) {
            var offsets = admin.listConsumerGroupOffsets(opt("group", null))
                    .partitionsToOffsetAndMetadata().get();
            for (var e : offsets.entrySet()) {
                System.out.println("{\"partition\": " + e.getKey().partition()
                        + ", \"offset\": " + e.getValue().offset() + "}");
            }
        }
        return 0;
    }

    private List<TopicPartition> partitionsOpt(String topic) {
        List<TopicPartition> out = new ArrayList<>();
        for (String p : opts.getOrDefault("partition", List.of())) {
            out.add(new TopicPartition(topic, Integer.parseInt(p)));
        }
        return out;
    }

    private static String errorOf(Throwable e) {
        return e == null ? "null" : str(e.getClass().getSimpleName());
    }

    private static String errorOf(KafkaFuture<?> f) throws InterruptedException {
        try {
            f.get();
            return "null";
        } catch (ExecutionException e) {
            return errorOf(e.getCause());
        }
    }

    private int createPartitions() throws Exception {
        String topic = opt("topic", null);
        int count = Integer.parseInt(opt("count", null));
        try (Admin admin = Admin.create(props())) {
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(count))).all().get();
        }
        System.out.println("{\"partitions\": " + count + "}");
        return 0;
    }

    private int describeLogDirs() throws Exception {
        try (Admin admin = Admin.create(props())) {
            List<Integer> brokers = new ArrayList<>();
            admin.describeCluster().nodes().get().forEach(n -> brokers.add(n.id()));
            var all = admin.describeLogDirs(brokers).allDescriptions().get();
            for (var broker : all.entrySet()) {
                for (var dir : broker.getValue().entrySet()) {
                    LogDirDescription d = dir.getValue();
                    StringBuilder replicas = new StringBuilder();
                    for (Map.Entry<TopicPartition, ReplicaInfo> r : d.replicaInfos().entrySet()) {
                        replicas.append(replicas.length() > 0 ? ", " : "")
                                .append("{\"topic\": ").append(str(r.getKey().topic()))
                                .append(", \"partition\": ").append(r.getKey().partition())
                                .append(", \"size\": ").append(r.getValue().size())
                                .append(", \"offset_lag\": ").append(r.getValue().offsetLag())
                                .append(", \"is_future\": ").append(r.getValue().isFuture())
                                .append("}");
                    }
                    System.out.println("{\"broker\": " + broker.getKey()
                            + ", \"log_dir\": " + str(dir.getKey())
                            + ", \"error\": " + errorOf(d.error())
                            + ", \"total_bytes\": " + d.totalBytes().orElse(-1)
                            + ", \"usable_bytes\": " + d.usableBytes().orElse(-1)
                            + ", \"replicas\": [" + replicas + "]}");
                }
            }
        }
        return 0;
    }

    private int electLeaders() throws Exception {
        String topic = opt("topic", null);
        List<TopicPartition> tps = partitionsOpt(topic);
        ElectionType type = ElectionType.valueOf(opt("election", "PREFERRED"));
        try (Admin admin = Admin.create(props())) {
            var result = admin.electLeaders(type, tps.isEmpty() ? null : Set.copyOf(tps));
            for (var e : result.partitions().get().entrySet()) {
                System.out.println("{\"topic\": " + str(e.getKey().topic())
                        + ", \"partition\": " + e.getKey().partition()
                        + ", \"error\": " + errorOf(e.getValue().orElse(null)) + "}");
            }
        }
        return 0;
    }

    private int alterReassignment() throws Exception {
        String topic = opt("topic", null);
        TopicPartition tp = partitionsOpt(topic).get(0);
        List<Integer> replicas = new ArrayList<>();
        for (String b : opts.getOrDefault("replica", List.of())) {
            replicas.add(Integer.parseInt(b));
        }
        Optional<NewPartitionReassignment> target = replicas.isEmpty()
                ? Optional.empty() : Optional.of(new NewPartitionReassignment(replicas));
        try (Admin admin = Admin.create(props())) {
            var f = admin.alterPartitionReassignments(Map.of(tp, target)).values().get(tp);
            System.out.println("{\"partition\": " + tp.partition()
                    + ", \"error\": " + errorOf(f) + "}");
        }
        return 0;
    }

    private int listReassignments() throws Exception {
        try (Admin admin = Admin.create(props())) {
            var all = admin.listPartitionReassignments().reassignments().get();
            for (Map.Entry<TopicPartition, PartitionReassignment> e : all.entrySet()) {
                PartitionReassignment r = e.getValue();
                System.out.println("{\"topic\": " + str(e.getKey().topic())
                        + ", \"partition\": " + e.getKey().partition()
                        + ", \"replicas\": " + r.replicas() + ", \"adding\": "
                        + r.addingReplicas() + ", \"removing\": " + r.removingReplicas() + "}");
            }
        }
        return 0;
    }

    private static ConfigResource configResource(String spec) {
        int colon = spec.indexOf(':');
        var type = ConfigResource.Type.valueOf(spec.substring(0, colon).toUpperCase());
        return new ConfigResource(type, spec.substring(colon + 1));
    }

    private int alterConfigs() throws Exception {
        ConfigResource resource = configResource(opt("resource", null));
        List<AlterConfigOp> ops = new ArrayList<>();
        for (String k : opts.getOrDefault("delete", List.of())) {
            ops.add(new AlterConfigOp(new ConfigEntry(k, null), AlterConfigOp.OpType.DELETE));
        }
        for (var type : List.of(AlterConfigOp.OpType.SET, AlterConfigOp.OpType.APPEND,
                AlterConfigOp.OpType.SUBTRACT)) {
            for (var kv : pairs(type.name().toLowerCase()).entrySet()) {
                ops.add(new AlterConfigOp(new ConfigEntry(kv.getKey(), kv.getValue()), type));
            }
        }
        var options = new AlterConfigsOptions()
                .validateOnly(Boolean.parseBoolean(opt("validate-only", "false")));
        try (Admin admin = Admin.create(props())) {
            var f = admin.incrementalAlterConfigs(Map.of(resource, ops), options).values()
                    .get(resource);
            printOutcome(f);
        }
        return 0;
    }

    private int describeConfigs() throws Exception {
        List<ConfigResource> resources = new ArrayList<>();
        opts.getOrDefault("resource", List.of()).forEach(r -> resources.add(configResource(r)));
        Set<String> keys = Set.copyOf(opts.getOrDefault("key", List.of()));
        try (Admin admin = Admin.create(props())) {
            var futures = admin.describeConfigs(resources,
                    new DescribeConfigsOptions().includeSynonyms(true)).values();
            for (ConfigResource resource : resources) {
                String spec = str(resource.type().name().toLowerCase() + ":" + resource.name());
                Config config;
                try {
                    config = futures.get(resource).get();
                } catch (ExecutionException e) {
                    System.out.println("{\"resource\": " + spec + ", \"error\": "
                            + errorOf(e.getCause()) + ", \"message\": "
                            + str(e.getCause().getMessage()) + "}");
                    continue;
                }
                for (ConfigEntry e : config.entries()) {
                    if (!keys.isEmpty() && !keys.contains(e.name())) {
                        continue;
                    }
                    StringBuilder synonyms = new StringBuilder();
                    for (var s : e.synonyms()) {
                        synonyms.append(synonyms.length() > 0 ? ", " : "").append("[")
                                .append(str(s.name())).append(", ").append(str(s.value()))
                                .append(", ").append(str(s.source().name())).append("]");
                    }
                    System.out.println("{\"resource\": " + spec + ", \"name\": "
                            + str(e.name()) + ", \"value\": " + str(e.value())
                            + ", \"source\": " + str(e.source().name())
                            + ", \"read_only\": " + e.isReadOnly()
                            + ", \"synonyms\": [" + synonyms + "]}");
                }
            }
        }
        return 0;
    }

    private static void printOutcome(KafkaFuture<?> f) throws InterruptedException {
        String message = "null";
        try {
            f.get();
        } catch (ExecutionException e) {
            message = str(e.getCause().getMessage());
        }
        System.out.println("{\"error\": " + errorOf(f) + ", \"message\": " + message + "}");
    }

    private int authorizedOperations() throws Exception {
        String topic = opt("topic", null);
        String group = opt("group", null);
        try (Admin admin = Admin.create(props())) {
            var topicOps = admin.describeTopics(List.of(topic),
                    new DescribeTopicsOptions().includeAuthorizedOperations(true))
                    .allTopicNames().get().get(topic).authorizedOperations();
            var clusterOps = admin.describeCluster(
                    new DescribeClusterOptions().includeAuthorizedOperations(true))
                    .authorizedOperations().get();
            var groupOps = admin.describeConsumerGroups(List.of(group),
                    new DescribeConsumerGroupsOptions().includeAuthorizedOperations(true))
                    .all().get().get(group).authorizedOperations();
            System.out.println("{\"topic\": " + names(topicOps) + ", \"cluster\": "
                    + names(clusterOps) + ", \"group\": " + names(groupOps) + "}");
        }
        return 0;
    }

    private static String names(Set<AclOperation> ops) {
        if (ops == null) {
            return "null";
        }
        List<String> out = new ArrayList<>();
        ops.forEach(op -> out.add(str(op.name())));
        java.util.Collections.sort(out);
        return out.toString();
    }

    private static ClientQuotaEntity quotaEntity(String spec) {
        Map<String, String> entity = new HashMap<>();
        for (String kv : spec.split(",")) {
            int eq = kv.indexOf('=');
            String name = kv.substring(eq + 1);
            entity.put(kv.substring(0, eq), name.equals("<default>") ? null : name);
        }
        return new ClientQuotaEntity(entity);
    }

    private int alterQuotas() throws Exception {
        List<ClientQuotaAlteration.Op> ops = new ArrayList<>();
        pairs("set").forEach((k, v) -> ops.add(new ClientQuotaAlteration.Op(k, Double.valueOf(v))));
        for (String k : opts.getOrDefault("remove", List.of())) {
            ops.add(new ClientQuotaAlteration.Op(k, null));
        }
        boolean validateOnly = Boolean.parseBoolean(opt("validate-only", "false"));
        List<ClientQuotaAlteration> alterations = new ArrayList<>();
        for (String spec : opts.getOrDefault("entity", List.of())) {
            alterations.add(new ClientQuotaAlteration(quotaEntity(spec), ops));
        }
        try (Admin admin = Admin.create(props())) {
            admin.alterClientQuotas(alterations,
                    new AlterClientQuotasOptions().validateOnly(validateOnly)).all().get();
        }
        System.out.println("{\"altered\": " + alterations.size() + "}");
        return 0;
    }

    private int describeQuotas() throws Exception {
        List<ClientQuotaFilterComponent> components = new ArrayList<>();
        pairs("filter").forEach((k, v) -> components.add(v.equals("<default>")
                ? ClientQuotaFilterComponent.ofDefaultEntity(k)
                : ClientQuotaFilterComponent.ofEntity(k, v)));
        ClientQuotaFilter filter = components.isEmpty()
                ? ClientQuotaFilter.all() : ClientQuotaFilter.contains(components);
        try (Admin admin = Admin.create(props())) {
            var all = admin.describeClientQuotas(filter).entities().get();
            for (var e : all.entrySet()) {
                StringBuilder entity = new StringBuilder();
                e.getKey().entries().forEach((k, v) -> entity.append(entity.length() > 0 ? ", " : "")
                        .append(str(k)).append(": ").append(str(v)));
                StringBuilder values = new StringBuilder();
                e.getValue().forEach((k, v) -> values.append(values.length() > 0 ? ", " : "")
                        .append(str(k)).append(": ").append(v));
                System.out.println("{\"entity\": {" + entity + "}, \"values\": {" + values + "}}");
            }
        }
        return 0;
    }

    private static String metric(Map<MetricName, ? extends Metric> metrics, String group, String name) {
        for (var e : metrics.entrySet()) {
            if (e.getKey().group().equals(group) && e.getKey().name().equals(name)) {
                Object v = e.getValue().metricValue();
                return v instanceof Double d && !d.isNaN() ? d.toString() : "null";
            }
        }
        return "null";
    }

    private static void rateLine(long start, long bytes, Map<MetricName, ? extends Metric> m,
            String group, String throttle, String clientGroup) {
        System.out.println("{\"t\": " + (System.currentTimeMillis() - start) + ", \"bytes\": "
                + bytes + ", \"throttle_avg\": " + metric(m, group, throttle + "-avg")
                + ", \"throttle_max\": " + metric(m, group, throttle + "-max")
                + ", \"connections\": " + metric(m, clientGroup, "connection-creation-total") + "}");
        System.out.flush();
    }

    private int produceRate() throws Exception {
        String topic = opt("topic", null);
        long seconds = Long.parseLong(opt("seconds", null));
        int size = Integer.parseInt(opt("record-size", "1000"));
        Properties p = props();
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        byte[] value = new byte[size];
        new java.util.Random(1).nextBytes(value);
        java.util.concurrent.atomic.AtomicLong acked = new java.util.concurrent.atomic.AtomicLong();
        java.util.concurrent.atomic.AtomicReference<Exception> failed =
                new java.util.concurrent.atomic.AtomicReference<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            long start = System.currentTimeMillis();
            long next = start + 1000;
            long end = start + seconds * 1000;
            while (failed.get() == null) {
                long now = System.currentTimeMillis();
                if (now >= next) {
                    rateLine(start, acked.get(), producer.metrics(), "producer-metrics",
                            "produce-throttle-time", "producer-metrics");
                    next += 1000;
                }
                if (now >= end) {
                    break;
                }
                producer.send(new ProducerRecord<>(topic, value), (meta, e) -> {
                    if (e == null) {
                        acked.addAndGet(size);
                    } else {
                        failed.set(e);
                    }
                });
            }
            if (failed.get() != null) {
                throw failed.get();
            }
            producer.close(Duration.ZERO);  // what is still buffered is not measured
        }
        return 0;
    }

    private int consumeRate() {
        String topic = opt("topic", null);
        long seconds = Long.parseLong(opt("seconds", null));
        long bytes = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = consumer()) {
            List<TopicPartition> tps = partitions(consumer, topic);
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long start = System.currentTimeMillis();
            long next = start + 1000;
            long end = start + seconds * 1000;
            while (true) {
                long now = System.currentTimeMillis();
                if (now >= next) {
                    rateLine(start, bytes, consumer.metrics(), "consumer-fetch-manager-metrics",
                            "fetch-throttle-time", "consumer-metrics");
                    next += 1000;
                }
                if (now >= end) {
                    break;
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                    bytes += r.serializedValueSize();
                }
            }
        }
        return 0;
    }

    private int deleteRecords() throws Exception {
        TopicPartition tp = partitionsOpt(opt("topic", null)).get(0);
        long offset = Long.parseLong(opt("offset", null));
        try (Admin admin = Admin.create(props())) {
            var f = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(offset)))
                    .lowWatermarks().get(tp);
            String error = errorOf(f);
            long low = error.equals("null") ? f.get().lowWatermark() : -1;
            System.out.println("{\"partition\": " + tp.partition() + ", \"low_watermark\": "
                    + low + ", \"error\": " + error + "}");
        }
        return 0;
    }

    private int describeTopics() throws Exception {
        String topic = opt("topic", null);
        var options = new DescribeTopicsOptions()
                .partitionSizeLimitPerResponse(Integer.parseInt(opt("page-size", "2000")));
        try (Admin admin = Admin.create(props())) {
            TopicDescription d = admin.describeTopics(List.of(topic), options)
                    .allTopicNames().get().get(topic);
            for (TopicPartitionInfo p : d.partitions()) {
                List<Integer> replicas = new ArrayList<>();
                p.replicas().forEach(n -> replicas.add(n.id()));
                List<Integer> isr = new ArrayList<>();
                p.isr().forEach(n -> isr.add(n.id()));
                System.out.println("{\"topic\": " + str(d.name()) + ", \"partition\": "
                        + p.partition() + ", \"leader\": " + p.leader().id()
                        + ", \"replicas\": " + replicas + ", \"isr\": " + isr + "}");
            }
        }
        return 0;
    }

    private int describeProducers() throws Exception {
        TopicPartition tp = partitionsOpt(opt("topic", null)).get(0);
        try (Admin admin = Admin.create(props())) {
            var state = admin.describeProducers(List.of(tp)).partitionResult(tp).get();
            for (var p : state.activeProducers()) {
                System.out.println("{\"partition\": " + tp.partition() + ", \"producer_id\": "
                        + p.producerId() + ", \"epoch\": " + p.producerEpoch()
                        + ", \"last_sequence\": " + p.lastSequence() + "}");
            }
        }
        return 0;
    }

    private int alterLogDir() throws Exception {
        TopicPartition tp = partitionsOpt(opt("topic", null)).get(0);
        try (Admin admin = Admin.create(props())) {
            String given = opt("broker", null);
            int broker = given != null ? Integer.parseInt(given)
                    : admin.describeCluster().nodes().get().iterator().next().id();
            var replica = new TopicPartitionReplica(tp.topic(), tp.partition(), broker);
            var f = admin.alterReplicaLogDirs(Map.of(replica, opt("dir", null))).values()
                    .get(replica);
            String error = errorOf(f);
            var info = admin.describeReplicaLogDirs(List.of(replica)).all().get().get(replica);
            System.out.println("{\"error\": " + error + ", \"current_dir\": "
                    + str(info.getCurrentReplicaLogDir()) + "}");
        }
        return 0;
    }

    private KafkaProducer<byte[], byte[]> transactionalProducer(Map<String, String> extra) {
        Properties p = props();
        p.putAll(extra);
        p.put("transactional.id", opt("transactional-id", null));
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    private static String failure(String op, Throwable e) {
        if (e instanceof ExecutionException && e.getCause() != null) {
            e = e.getCause();
        }
        StringBuilder causes = new StringBuilder();
        for (Throwable c = e.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
            causes.append(causes.length() > 0 ? ", " : "").append(str(c.getClass().getSimpleName()));
        }
        return "{\"op\": " + str(op) + ", \"error\": " + str(e.getClass().getSimpleName())
                + ", \"causes\": [" + causes + "], \"message\": " + str(e.getMessage()) + "}";
    }

    @SuppressWarnings("unchecked")
    private int txnSession() throws Exception {
        String topic = opt("topic", null);
        try (KafkaProducer<byte[], byte[]> producer = transactionalProducer(Map.of());
                BufferedReader in = new BufferedReader(
                        new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                Map<String, Object> r = (Map<String, Object>) new Json(line).value();
                String op = (String) r.get("op");
                String result = "{\"op\": " + str(op) + ", \"ok\": true}";
                try {
                    switch (op) {
                        case "init" -> producer.initTransactions();
                        case "begin" -> producer.beginTransaction();
                        case "commit" -> producer.commitTransaction();
                        case "abort" -> producer.abortTransaction();
                        case "send" -> producer.send(new ProducerRecord<>(topic,
                                ((Long) r.get("partition")).intValue(), null,
                                ((String) r.get("value")).getBytes(StandardCharsets.UTF_8))).get();
                        case "offsets" -> {
                            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                            ((Map<String, Object>) r.get("offsets")).forEach((k, v) -> offsets.put(
                                    new TopicPartition(topic, Integer.parseInt(k)),
                                    new OffsetAndMetadata((Long) v)));
                            producer.sendOffsetsToTransaction(offsets,
                                    new ConsumerGroupMetadata((String) r.get("group")));
                        }
                        default -> throw new IllegalArgumentException("unknown op " + op);
                    }
                } catch (Exception e) {
                    result = failure(op, e);
                }
                System.out.println(result);
                System.out.flush();
            }
            producer.close(Duration.ofSeconds(5));
        }
        return 0;
    }

    private int seqProduce() throws Exception {
        long count = Long.parseLong(opt("count", null));
        Properties p = props();
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        java.util.concurrent.atomic.AtomicReference<Exception> failed =
                new java.util.concurrent.atomic.AtomicReference<>();
        long throughput = Long.parseLong(opt("throughput", "-1"));
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            long from = Long.parseLong(opt("from", "0"));
            long started = System.nanoTime();
            for (long i = from; i < from + count && failed.get() == null; i++) {
                if (throughput > 0) {
                    long ahead = started + (i - from) * 1_000_000_000L / throughput
                            - System.nanoTime();
                    if (ahead > 0) {
                        Thread.sleep(ahead / 1_000_000, (int) (ahead % 1_000_000));
                    }
                }
                byte[] text = Long.toString(i).getBytes(StandardCharsets.UTF_8);
                producer.send(new ProducerRecord<>(opt("topic", null), text, text), (m, e) -> {
                    if (e != null) {
                        failed.set(e);
                    }
                });
            }
            producer.flush();
        }
        if (failed.get() != null) {
            throw failed.get();
        }
        System.out.println("{\"produced\": " + count + "}");
        return 0;
    }

    private int digest() {
        long count = 0;
        long sum = 0;
        long crcSum = 0;
        java.util.BitSet seen = new java.util.BitSet();
        java.util.zip.CRC32 crc = new java.util.zip.CRC32();
        try (KafkaConsumer<byte[], byte[]> consumer = consumer()) {
            List<TopicPartition> tps = partitions(consumer, opt("topic", null));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps, Duration.ofSeconds(60));
            long deadline = System.currentTimeMillis() + Long.parseLong(opt("timeout-ms", "600000"));
            while (tps.stream().anyMatch(tp -> consumer.position(tp) < end.get(tp))) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("not at the end offsets " + end + " in time");
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    long v = Long.parseLong(new String(r.value(), StandardCharsets.UTF_8));
                    count++;
                    sum += v;
                    seen.set((int) v);
                    crc.reset();
                    crc.update(r.value());
                    crcSum += crc.getValue();
                }
            }
        }
        System.out.println("{\"count\": " + count + ", \"distinct\": " + seen.cardinality()
                + ", \"sum\": " + sum + ", \"crc_sum\": " + crcSum + "}");
        return 0;
    }

    /** Kafka's exactly-once processor pattern: one transaction per poll, offsets inside it. */
    private int txnCopy() throws Exception {
        String input = opt("input", null);
        String output = opt("topic", null);
        boolean exitWhenCaughtUp = opt("exit-when-caught-up", "false").equals("true");
        String holdFile = opt("hold-file", "");
        Properties cp = props();
        cp.put("group.id", opt("group", null));
        cp.put("isolation.level", "read_committed");
        cp.put("enable.auto.commit", "false");
        cp.putIfAbsent("auto.offset.reset", "earliest");
        cp.putIfAbsent("group.protocol", "classic");
        cp.put("key.deserializer", ByteArrayDeserializer.class.getName());
        cp.put("value.deserializer", ByteArrayDeserializer.class.getName());
        long total = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp);
                KafkaProducer<byte[], byte[]> producer =
                        transactionalProducer(pairs("producer-config"))) {
            producer.initTransactions();
            consumer.subscribe(List.of(input));
            while (true) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    long end = caughtUp(consumer, input);
                    if (end >= 0) {
                        System.out.println("{\"event\": \"caught-up\", \"total\": " + total
                                + ", \"end\": " + end + "}");
                        System.out.flush();
                        if (exitWhenCaughtUp) {
                            return 0;
                        }
                    } else {
                        System.out.println("{}");  // alive: a supervisor restarts a silent app
                    }
                    System.out.flush();
                    continue;
                }
                try {
                    producer.beginTransaction();
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        producer.send(new ProducerRecord<>(output, r.key(), r.value()));
                        offsets.put(new TopicPartition(r.topic(), r.partition()),
                                new OffsetAndMetadata(r.offset() + 1));
                    }
                    if (!holdFile.isEmpty() && Files.exists(Path.of(holdFile))) {
                        producer.flush();
                        System.out.println("{\"event\": \"holding\"}");
                        System.out.flush();
                        Thread.sleep(Long.MAX_VALUE);
                    }
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    producer.commitTransaction();
                    total += records.count();
                    System.out.println("{\"event\": \"committed\", \"records\": " + records.count()
                            + ", \"total\": " + total + "}");
                } catch (ProducerFencedException | FencedInstanceIdException
                        | OutOfOrderSequenceException e) {
                    System.out.println(failure("fenced", e));
                    return 2;
                } catch (KafkaException e) {
                    System.out.println("{\"event\": \"aborted\", \"error\": "
                            + str(e.getClass().getSimpleName() + ": " + e.getMessage()) + "}");
                    try {
                        producer.abortTransaction();
                    } catch (KafkaException abortFailed) {
                        System.out.println(failure("abort", abortFailed));
                        return 3;
                    }
                    rewind(consumer);
                }
                System.out.flush();
            }
        }
    }

    /** The sum of the input's end offsets if every partition is assigned here and consumed
     * and committed up to its end, else -1. */
    private static long caughtUp(KafkaConsumer<byte[], byte[]> consumer, String input) {
        Set<TopicPartition> assigned = consumer.assignment();
        if (assigned.size() != consumer.partitionsFor(input).size()) {
            return -1;
        }
        Map<TopicPartition, Long> end = consumer.endOffsets(assigned);
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
        for (TopicPartition tp : assigned) {
            OffsetAndMetadata c = committed.get(tp);
            if (consumer.position(tp) < end.get(tp) || c == null || c.offset() < end.get(tp)) {
                return -1;
            }
        }
        return end.values().stream().mapToLong(Long::longValue).sum();
    }

    /** After an abort the consumer resumes from the group's committed offsets. */
    private static void rewind(KafkaConsumer<byte[], byte[]> consumer) {
        Set<TopicPartition> assigned = consumer.assignment();
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
        for (TopicPartition tp : assigned) {
            OffsetAndMetadata c = committed.get(tp);
            if (c == null) {
                consumer.seekToBeginning(List.of(tp));
            } else {
                consumer.seek(tp, c.offset());
            }
        }
    }

    private static void event(String name, java.util.Collection<TopicPartition> tps) {
        StringBuilder sb = new StringBuilder();
        StringBuilder topics = new StringBuilder();
        for (TopicPartition tp : tps) {
            sb.append(sb.length() > 0 ? ", " : "").append(tp.partition());
            topics.append(topics.length() > 0 ? ", " : "").append(str(tp.topic()));
        }
        System.out.println("{\"event\": " + str(name) + ", \"partitions\": [" + sb
                + "], \"topics\": [" + topics + "]}");
        System.out.flush();
    }

    private static byte[] bytes(Object b64) {
        return b64 == null ? null : B64D.decode((String) b64);
    }

    private static String b64(byte[] b) {
        return b == null ? "null" : "\"" + B64E.encodeToString(b) + "\"";
    }

    private static String str(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder sb = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            switch (ch) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                default -> {
                    if (ch < 0x20) {
                        sb.append(String.format("\\u%04x", (int) ch));
                    } else {
                        sb.append(ch);
                    }
                }
            }
        }
        return sb.append('"').toString();
    }

    /** Just enough JSON for the driver's input: objects, arrays, strings, integers, literals. */
    private static final class Json {
        private final String s;
        private int i;

        Json(String s) {
            this.s = s;
        }

        Object value() {
            skip();
            char c = s.charAt(i);
            if (c == '{') {
                Map<String, Object> m = new LinkedHashMap<>();
                i++;
                while (peek() != '}') {
                    String k = (String) value();
                    expect(':');
                    m.put(k, value());
                    if (peek() == ',') {
                        i++;
                    }
                }
                i++;
                return m;
            }
            if (c == '[') {
                List<Object> l = new ArrayList<>();
                i++;
                while (peek() != ']') {
                    l.add(value());
                    if (peek() == ',') {
                        i++;
                    }
                }
                i++;
                return l;
            }
            if (c == '"') {
                StringBuilder sb = new StringBuilder();
                for (i++; s.charAt(i) != '"'; i++) {
                    char ch = s.charAt(i);
                    if (ch == '\\') {
                        char e = s.charAt(++i);
                        switch (e) {
                            case 'n' -> sb.append('\n');
                            case 't' -> sb.append('\t');
                            case 'r' -> sb.append('\r');
                            case 'b' -> sb.append('\b');
                            case 'f' -> sb.append('\f');
                            case 'u' -> {
                                sb.append((char) Integer.parseInt(s.substring(i + 1, i + 5), 16));
                                i += 4;
                            }
                            default -> sb.append(e);
                        }
                    } else {
                        sb.append(ch);
                    }
                }
                i++;
                return sb.toString();
            }
            int start = i;
            while (i < s.length() && ",}] \t".indexOf(s.charAt(i)) < 0) {
                i++;
            }
            String tok = s.substring(start, i);
            return switch (tok) {
                case "null" -> null;
                case "true" -> Boolean.TRUE;
                case "false" -> Boolean.FALSE;
                default -> Long.parseLong(tok);
            };
        }

        private char peek() {
            skip();
            return s.charAt(i);
        }

        private void expect(char c) {
            if (peek() != c) {
                throw new IllegalArgumentException("bad JSON at " + i + ": " + s);
            }
            i++;
        }

        private void skip() {
            while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
                i++;
            }
        }
    }
}
