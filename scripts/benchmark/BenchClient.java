import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Load driver for scripts/bench. Usage: {@code BenchClient MODE key=value...} where MODE is
 * produce, txn-produce, consume, latency or writer. Keys "p.X" and "c.X" become producer and consumer config
 * X. Prints exactly one JSON object on stdout as its last line; diagnostics go to stderr.
 */
public final class BenchClient {
  private final Map<String, String> opts = new HashMap<>();
  private final Properties producerProps = new Properties();
  private final Properties consumerProps = new Properties();

  private BenchClient(String[] args) {
    for (int i = 1; i < args.length; i++) {
      int eq = args[i].indexOf('=');
      if (eq < 0) {
        throw new IllegalArgumentException("expected key=value, got " + args[i]);
      }
      String key = args[i].substring(0, eq);
      String value = args[i].substring(eq + 1);
      if (key.startsWith("p.")) {
        producerProps.put(key.substring(2), value);
      } else if (key.startsWith("c.")) {
        consumerProps.put(key.substring(2), value);
      } else {
        opts.put(key, value);
      }
    }
    producerProps.put("bootstrap.servers", need("bootstrap"));
    consumerProps.put("bootstrap.servers", need("bootstrap"));
    // Manual assignment without a group: measures the fetch path, not the group protocol.
    consumerProps.putIfAbsent("enable.auto.commit", "false");
  }

  public static void main(String[] args) {
    try {
      BenchClient client = new BenchClient(args);
      switch (args[0]) {
        case "produce" -> client.produce();
        case "txn-produce" -> client.txnProduce();
        case "consume" -> client.consume();
        case "latency" -> client.latency();
        case "writer" -> client.writer();
        default -> throw new IllegalArgumentException("unknown mode " + args[0]);
      }
    } catch (Throwable t) {
      t.printStackTrace();
      System.out.println("{\"error\": " + quote(t.toString()) + "}");
      System.exit(2);
    }
    System.exit(0);
  }

  private String need(String key) {
    String value = opts.get(key);
    if (value == null) {
      throw new IllegalArgumentException("missing option " + key);
    }
    return value;
  }

  private long deadlineNanos(long start) {
    return start + (long) (Double.parseDouble(need("seconds")) * 1e9);
  }

  private void produce() {
    String topic = need("topic");
    long records = Long.parseLong(need("records"));
    int size = Integer.parseInt(need("size"));
    byte[] value = new byte[size];
    new Random(42).nextBytes(value);
    AtomicLong acked = new AtomicLong();
    AtomicLong failed = new AtomicLong();
    AtomicReference<Exception> firstError = new AtomicReference<>();
    Callback callback =
        (metadata, e) -> {
          if (e == null) {
            acked.incrementAndGet();
          } else {
            failed.incrementAndGet();
            firstError.compareAndSet(null, e);
          }
        };
    try (KafkaProducer<byte[], byte[]> producer =
        new KafkaProducer<>(producerProps, new ByteArraySerializer(), new ByteArraySerializer())) {
      producer.partitionsFor(topic); // metadata outside the timed section
      long start = System.nanoTime();
      long deadline = deadlineNanos(start);
      // The producer copies the value into its batch on send, so one array serves every record.
      for (long sent = 0; sent < records; sent++) {
        if ((sent & 1023) == 0 && (System.nanoTime() > deadline || failed.get() > 0)) {
          break;
        }
        producer.send(new ProducerRecord<>(topic, value), callback);
      }
      producer.flush();
      double seconds = (System.nanoTime() - start) / 1e9;
      emitThroughput(acked.get(), acked.get() * size, seconds, failed.get(), firstError.get());
    }
  }

  /**
   * Transactions of {@code txn} records each (the transactional.id is p.transactional.id, or a
   * fresh one); adds the transaction count and commitTransaction's p50/p99 (which includes
   * flushing the transaction's last batches, as Kafka's txn-commit-time metric does).
   */
  private void txnProduce() {
    String topic = need("topic");
    long records = Long.parseLong(need("records"));
    int size = Integer.parseInt(need("size"));
    int perTxn = Integer.parseInt(need("txn"));
    byte[] value = new byte[size];
    new Random(42).nextBytes(value);
    producerProps.putIfAbsent("transactional.id", "bench-" + System.nanoTime());
    AtomicLong failed = new AtomicLong();
    AtomicReference<Exception> firstError = new AtomicReference<>();
    Callback callback =
        (metadata, e) -> {
          if (e != null) {
            failed.incrementAndGet();
            firstError.compareAndSet(null, e);
          }
        };
    List<Long> commits = new ArrayList<>();
    try (KafkaProducer<byte[], byte[]> producer =
        new KafkaProducer<>(producerProps, new ByteArraySerializer(), new ByteArraySerializer())) {
      producer.initTransactions();
      producer.partitionsFor(topic); // metadata outside the timed section
      long start = System.nanoTime();
      long deadline = deadlineNanos(start);
      long committed = 0;
      while (committed < records && System.nanoTime() < deadline && failed.get() == 0) {
        long n = Math.min(perTxn, records - committed);
        producer.beginTransaction();
        for (long i = 0; i < n; i++) {
          producer.send(new ProducerRecord<>(topic, value), callback);
        }
        long before = System.nanoTime();
        producer.commitTransaction();
        commits.add(System.nanoTime() - before);
        committed += n;
      }
      double seconds = (System.nanoTime() - start) / 1e9;
      long[] sorted = commits.stream().mapToLong(Long::longValue).sorted().toArray();
      System.out.println(
          String.format(
              Locale.ROOT,
              "{\"records\": %d, \"bytes\": %d, \"seconds\": %.6f, \"errors\": %d, \"error\": %s,"
                  + " \"transactions\": %d, \"commit_p50_ms\": %.3f, \"commit_p99_ms\": %.3f}",
              committed,
              committed * size,
              seconds,
              failed.get(),
              firstError.get() == null ? "null" : quote(firstError.get().toString()),
              sorted.length,
              percentileMs(sorted, 0.50),
              percentileMs(sorted, 0.99)));
    }
  }

  private void consume() {
    String topic = need("topic");
    long records = Long.parseLong(need("records"));
    long count = 0;
    long bytes = 0;
    try (KafkaConsumer<byte[], byte[]> consumer =
        new KafkaConsumer<>(consumerProps, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
      List<TopicPartition> partitions = assignAll(consumer, topic);
      consumer.seekToBeginning(partitions);
      long start = System.nanoTime();
      long deadline = deadlineNanos(start);
      while (count < records && System.nanoTime() < deadline) {
        ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(200));
        for (ConsumerRecord<byte[], byte[]> record : batch) {
          bytes += record.serializedValueSize();
        }
        count += batch.count();
      }
      double seconds = (System.nanoTime() - start) / 1e9;
      emitThroughput(count, bytes, seconds, 0, null);
    }
  }

  private static List<TopicPartition> assignAll(KafkaConsumer<?, ?> consumer, String topic) {
    List<TopicPartition> partitions = new ArrayList<>();
    for (PartitionInfo info : consumer.partitionsFor(topic)) {
      partitions.add(new TopicPartition(topic, info.partition()));
    }
    consumer.assign(partitions);
    return partitions;
  }

  /** Produces at a fixed rate with System.nanoTime() in the first 8 value bytes; one JVM reads it. */
  private void latency() throws InterruptedException {
    String topic = need("topic");
    int rate = Integer.parseInt(need("rate"));
    int size = Math.max(8, Integer.parseInt(need("size")));
    double seconds = Double.parseDouble(need("seconds"));
    long warmup = (long) (Double.parseDouble(opts.getOrDefault("warmup", "1")) * rate);
    long total = (long) (seconds * rate);
    long[] latencies = new long[(int) Math.max(0, total - warmup)];
    AtomicLong received = new AtomicLong();
    AtomicReference<Throwable> consumerError = new AtomicReference<>();
    CountDownLatch positioned = new CountDownLatch(1);
    Thread reader =
        new Thread(
            () -> {
              try (KafkaConsumer<byte[], byte[]> consumer =
                  new KafkaConsumer<>(
                      consumerProps, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                List<TopicPartition> partitions = assignAll(consumer, topic);
                consumer.seekToEnd(partitions);
                for (TopicPartition tp : partitions) {
                  consumer.position(tp); // resolve the offset before the producer starts
                }
                positioned.countDown();
                long deadline = System.nanoTime() + (long) ((seconds + 30) * 1e9);
                while (received.get() < total && System.nanoTime() < deadline) {
                  for (ConsumerRecord<byte[], byte[]> record :
                      consumer.poll(Duration.ofMillis(100))) {
                    long latency = System.nanoTime() - ByteBuffer.wrap(record.value()).getLong(0);
                    long index = received.getAndIncrement();
                    if (index >= warmup && index - warmup < latencies.length) {
                      latencies[(int) (index - warmup)] = latency;
                    }
                  }
                }
              } catch (Throwable t) {
                consumerError.set(t);
              } finally {
                positioned.countDown();
              }
            },
            "latency-consumer");
    reader.start();
    if (!positioned.await(60, TimeUnit.SECONDS)) {
      throw new IllegalStateException("consumer did not get a position within 60 s");
    }
    AtomicLong failed = new AtomicLong();
    AtomicReference<Exception> firstError = new AtomicReference<>();
    try (KafkaProducer<byte[], byte[]> producer =
        new KafkaProducer<>(producerProps, new ByteArraySerializer(), new ByteArraySerializer())) {
      producer.partitionsFor(topic);
      long start = System.nanoTime();
      for (long i = 0; i < total && consumerError.get() == null; i++) {
        long due = start + i * 1_000_000_000L / rate;
        long wait;
        while ((wait = due - System.nanoTime()) > 0) {
          LockSupport.parkNanos(wait);
        }
        byte[] value = new byte[size];
        ByteBuffer.wrap(value).putLong(0, System.nanoTime());
        producer.send(
            new ProducerRecord<>(topic, value),
            (metadata, e) -> {
              if (e != null) {
                failed.incrementAndGet();
                firstError.compareAndSet(null, e);
              }
            });
      }
      producer.flush();
    }
    reader.join();
    if (consumerError.get() != null) {
      throw new IllegalStateException("consumer failed", consumerError.get());
    }
    int measured = (int) Math.max(0, Math.min(latencies.length, received.get() - warmup));
    long[] sorted = Arrays.copyOf(latencies, measured);
    Arrays.sort(sorted);
    System.out.println(
        String.format(
            Locale.ROOT,
            "{\"sent\": %d, \"received\": %d, \"measured\": %d, \"p50_ms\": %.3f, "
                + "\"p99_ms\": %.3f, \"max_ms\": %.3f, \"errors\": %d, \"error\": %s}",
            total,
            received.get(),
            measured,
            percentileMs(sorted, 0.50),
            percentileMs(sorted, 0.99),
            percentileMs(sorted, 1.0),
            failed.get(),
            firstError.get() == null ? "null" : quote(firstError.get().toString())));
  }

  /**
   * Sends one small record every interval.ms until stdin closes, then flushes. Each answer is a
   * stdout line "SENT ANSWERED OK": System.nanoTime() (CLOCK_MONOTONIC, as Python's
   * time.monotonic()) when the record was sent and answered, and 1 or 0.
   */
  private void writer() throws InterruptedException {
    String topic = need("topic");
    long intervalNanos = (long) (Double.parseDouble(need("interval.ms")) * 1e6);
    Thread stdin =
        new Thread(
            () -> {
              try {
                while (System.in.read() >= 0) {}
              } catch (java.io.IOException e) {
                // closed: stop as at EOF
              }
            },
            "stdin");
    stdin.setDaemon(true);
    stdin.start();
    byte[] value = new byte[100];
    try (KafkaProducer<byte[], byte[]> producer =
        new KafkaProducer<>(producerProps, new ByteArraySerializer(), new ByteArraySerializer())) {
      producer.partitionsFor(topic);
      long next = System.nanoTime();
      while (stdin.isAlive()) {
        long sent = System.nanoTime();
        producer.send(
            new ProducerRecord<>(topic, value),
            (metadata, e) -> {
              String line = sent + " " + System.nanoTime() + " " + (e == null ? 1 : 0);
              synchronized (System.out) {
                System.out.println(line);
              }
            });
        next += intervalNanos;
        long wait;
        while ((wait = next - System.nanoTime()) > 0) {
          LockSupport.parkNanos(wait);
        }
      }
      producer.flush();
    }
    synchronized (System.out) {
      System.out.println("{\"error\": null}");
    }
  }

  private static double percentileMs(long[] sorted, double q) {
    if (sorted.length == 0) {
      return Double.NaN;
    }
    int index = (int) Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1);
    return sorted[Math.max(0, index)] / 1e6;
  }

  private static void emitThroughput(
      long records, long bytes, double seconds, long errors, Exception firstError) {
    System.out.println(
        String.format(
            Locale.ROOT,
            "{\"records\": %d, \"bytes\": %d, \"seconds\": %.6f, \"errors\": %d, \"error\": %s}",
            records,
            bytes,
            seconds,
            errors,
            firstError == null ? "null" : quote(firstError.toString())));
  }

  private static String quote(String s) {
    StringBuilder out = new StringBuilder("\"");
    for (char ch : s.toCharArray()) {
      switch (ch) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\n' -> out.append("\\n");
        default -> {
          if (ch < 0x20) {
            out.append(String.format("\\u%04x", (int) ch));
          } else {
            out.append(ch);
          }
        }
      }
    }
    return out.append('"').toString();
  }
}
