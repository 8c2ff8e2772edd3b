// Compatibility driver: plain kafka-clients calls behind a small command line.
//
// Usage: GregorClient <command> --bootstrap HOST:PORT --topic T [options]
//   create-topic  --partitions N --replication-factor R [--topic-config k=v]...
//   delete-topic  (returns once metadata no longer lists the topic)
//   produce       [--config k=v]...      stdin: one JSON record per line
//                 {"key": b64|null, "value": b64|null, "headers": [[name, b64|null]...],
//                  "partition": int|null, "timestamp": int|null}
//                 stdout: {"partition", "offset", "timestamp"} per record, in input order
//   consume       --count N [--timeout-ms M] [--config k=v]...
//                 assigns every partition from the beginning; stdout: one JSON record per line
//   list-offsets  --spec earliest|latest|<timestamp ms>... [--via consumer|admin]
//                 stdout: {"spec", "partition", "offset", "timestamp"} per spec and partition
//                 (offset null if no record is that late)
//   group-consume --group G [--config k=v]...
//                 subscribes in group G, commits after every poll; stdout: {"event":
//                 "assigned"|"revoked"|"lost", "partitions": [...]} on every rebalance
//                 callback, {"event": "first", "partition", "offset"} for the first
//                 record seen per partition, {"event": "closed", "consumed"} at the end.
//                 stdin: any line or EOF closes the consumer cleanly.
//   create-partitions --count N       grows the topic to N partitions
//   describe-log-dirs                  stdout: {"log_dir", "error", "total_bytes",
//                 "usable_bytes", "replicas": [{"topic", "partition", "size", "offset_lag",
//                 "is_future"}]} per log dir of every broker
//   elect-leaders --election PREFERRED|UNCLEAN [--partition P]...  (no --partition: all)
//                 stdout: {"partition", "error"} per partition answered (error: class or null)
//   alter-reassignment --partition P [--replica B]...  (no --replica: cancel)
//                 stdout: {"partition", "error"}
//   list-reassignments  stdout: {"topic", "partition", "replicas", "adding", "removing"}
// Binary fields are base64. A failure prints {"error": "..."} and exits 1.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
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
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

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

    public static void main(String[] args) {
        int code = 0;
        try {
            if (args.length == 0) {
                throw new IllegalArgumentException("missing command");
            }
            GregorClient c = new GregorClient(args, 1);
            code = switch (args[0]) {
                case "create-topic" -> c.createTopic();
                case "delete-topic" -> c.deleteTopic();
                case "produce" -> c.produce();
                case "consume" -> c.consume();
                case "list-offsets" -> c.listOffsets();
                case "group-consume" -> c.groupConsume();
                case "create-partitions" -> c.createPartitions();
                case "describe-log-dirs" -> c.describeLogDirs();
                case "elect-leaders" -> c.electLeaders();
                case "alter-reassignment" -> c.alterReassignment();
                case "list-reassignments" -> c.listReassignments();
                default -> throw new IllegalArgumentException("unknown command " + args[0]);
            };
        } catch (Exception e) {
            Throwable root = e.getCause() != null ? e.getCause() : e;
            System.out.println(
                    "{\"error\": " + str(root.getClass().getName() + ": " + root.getMessage()) + "}");
            code = 1;
        }
        System.out.flush();
        System.exit(code);
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
            return code;
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
        Properties p = props();
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
            while (seen < want && System.currentTimeMillis() < deadline) {
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
            consumer.subscribe(List.of(opt("topic", null)), new ConsumerRebalanceListener() {
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
            });
            while (true) {
                var records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    if (seen.add(r.partition())) {
                        System.out.println("{\"event\": \"first\", \"partition\": "
                                + r.partition() + ", \"offset\": " + r.offset() + "}");
                    }
                    consumed++;
                }
                if (!records.isEmpty()) {
                    consumer.commitSync();
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
            for (Map<String, LogDirDescription> dirs : all.values()) {
                for (var dir : dirs.entrySet()) {
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
                    System.out.println("{\"log_dir\": " + str(dir.getKey())
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

    private static void event(String name, java.util.Collection<TopicPartition> tps) {
        StringBuilder sb = new StringBuilder();
        for (TopicPartition tp : tps) {
            sb.append(sb.length() > 0 ? ", " : "").append(tp.partition());
        }
        System.out.println("{\"event\": " + str(name) + ", \"partitions\": [" + sb + "]}");
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
