// Client "G" of the mirror row of scripts/bench.sh (see benches/BENCHMARKS.md): an at-least-once mirror
// with the Java clients. A KafkaShareConsumer (explicit acknowledgements) reads the source topic;
// each record is sent to the target topic, same partition, key, value, headers and timestamp,
// through a KafkaProducer with its defaults (idempotent, acks=all); after each poll the producer
// is flushed, then the poll's records are acknowledged and committed (commitSync).
//
//   java -cp CLASSPATH:DIR MirrorAtLeastOnce BOOTSTRAP SOURCE TARGET GROUP RECORDS MAX_POLL_RECORDS IDLE_SECS
//
// The clock starts when the first poll returns records (the group join is not timed) and stops
// after the commit of the poll that reaches RECORDS. Prints one BENCH line as bench_consumer does.
// Compiled by scripts/bench.sh with javac against `scripts/kafka.sh classpath`.

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class MirrorAtLeastOnce {
    public static void main(String[] args) throws Exception {
        if (args.length != 7) {
            System.err.println("usage: MirrorAtLeastOnce BOOTSTRAP SOURCE TARGET GROUP RECORDS MAX_POLL_RECORDS IDLE_SECS");
            System.exit(2);
        }
        String bootstrap = args[0], source = args[1], target = args[2], group = args[3];
        long records = Long.parseLong(args[4]);
        int maxPollRecords = Integer.parseInt(args[5]);
        long idleMs = Long.parseLong(args[6]) * 1000;

        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("client.id", "bench-g");
        c.put("share.acknowledgement.mode", "explicit");
        c.put("max.poll.records", Integer.toString(maxPollRecords));
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", "bench-g");

        long processStart = System.currentTimeMillis();
        long start = -1, end = -1, count = 0, bytes = 0, redelivered = 0, polls = 0;
        try (KafkaShareConsumer<byte[], byte[]> consumer =
                 new KafkaShareConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer());
             KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            consumer.subscribe(List.of(source));
            long lastProgress = System.currentTimeMillis();
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            while (count < records) {
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(500));
                if (batch.isEmpty()) {
                    if (System.currentTimeMillis() - lastProgress >= idleMs) {
                        System.err.println("no records for " + idleMs + " ms after " + count + " of " + records);
                        break;
                    }
                    continue;
                }
                if (start < 0) start = System.currentTimeMillis();
                sent.clear();
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    sent.add(producer.send(new ProducerRecord<>(target, r.partition(), r.timestamp(), r.key(), r.value(), r.headers())));
                    bytes += (r.key() == null ? 0 : r.key().length) + (r.value() == null ? 0 : r.value().length);
                    if (r.deliveryCount().orElse((short) 1) > 1) redelivered++;
                }
                producer.flush();
                for (Future<RecordMetadata> f : sent) f.get(); // a failed send fails the run
                for (ConsumerRecord<byte[], byte[]> r : batch) consumer.acknowledge(r);
                consumer.commitSync();
                count += batch.count();
                polls++;
                lastProgress = System.currentTimeMillis();
            }
            end = System.currentTimeMillis();
        }
        if (start < 0) start = end;
        System.out.printf("BENCH client=G records=%d bytes=%d window_records=%d window_bytes=%d window_ms=%d join_ms=%d "
                + "redelivered=%d drivers=1 complete=%d window_start_unix_ms=%d window_end_unix_ms=%d polls=%d commits=%d%n",
            count, bytes, count, bytes, end - start, start - processStart, redelivered, count >= records ? 1 : 0,
            start, end, polls, polls);
    }
}
