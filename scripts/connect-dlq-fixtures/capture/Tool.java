package capture;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.regex.Pattern;

/**
 * The Kafka side of scripts/connect-dlq-fixtures.sh:
 *   produce BOOTSTRAP TOPIC RECORDS_JSON
 *   await BOOTSTRAP TOPIC TIMEOUT_SECONDS WORKER_PID GROUP...
 *   dump BOOTSTRAP RUN_ID RECORDS_JSON OUT_DIR CONNECT_VERSION CONNECTOR_PROPERTIES...
 */
public final class Tool {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String CONTEXT_PREFIX = "__connect.errors.";
    private static final String STACKTRACE = "__connect.errors.exception.stacktrace";
    /** Stack frame lines of Throwable.printStackTrace: "\tat ..." and "\t... N more". */
    private static final Pattern FRAME = Pattern.compile("^\\t(at |\\.\\.\\. \\d+ more$).*");

    private Tool() {
    }

    public static void main(String[] args) throws Exception {
        switch (args.length == 0 ? "" : args[0]) {
            case "produce":
                produce(args[1], args[2], Paths.get(args[3]));
                break;
            case "await":
                await(args[1], args[2], Integer.parseInt(args[3]), Long.parseLong(args[4]),
                    Arrays.asList(args).subList(5, args.length));
                break;
            case "dump":
                dump(args[1], args[2], Paths.get(args[3]), Paths.get(args[4]), args[5],
                    Arrays.asList(args).subList(6, args.length));
                break;
            default:
                System.err.println("usage: produce|await|dump ...");
                System.exit(2);
        }
    }

    private static Properties client(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        return p;
    }

    private static List<JsonNode> records(Path file) throws IOException {
        List<JsonNode> out = new ArrayList<>();
        JSON.readTree(file.toFile()).get("records").forEach(out::add);
        return out;
    }

    private static void produce(String bootstrap, String topic, Path recordsFile) throws Exception {
        try (Admin admin = Admin.create(client(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
        }
        Properties p = client(bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        p.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, "1048576");
        List<JsonNode> records = records(recordsFile);
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (JsonNode r : records) {
                RecordHeaders headers = new RecordHeaders();
                if (r.has("headers")) {
                    for (JsonNode h : r.get("headers")) {
                        headers.add(h.get(0).textValue(), Bytes.decode(h.get(1)));
                    }
                }
                // One at a time: offsets follow the order of records.json.
                producer.send(new ProducerRecord<>(topic, 0, null, Bytes.decode(r.get("key")),
                    Bytes.decode(r.get("value")), headers)).get();
            }
        }
        System.err.println("produced " + records.size() + " records to " + topic);
    }

    private static void await(String bootstrap, String topic, int timeoutSeconds, long workerPid, List<String> groups)
        throws Exception {
        TopicPartition tp = new TopicPartition(topic, 0);
        long deadline = System.nanoTime() + timeoutSeconds * 1_000_000_000L;
        try (Admin admin = Admin.create(client(bootstrap))) {
            long end = admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get().offset();
            List<String> waiting = new ArrayList<>(groups);
            while (!waiting.isEmpty()) {
                List<String> still = new ArrayList<>();
                for (String group : waiting) {
                    OffsetAndMetadata committed = admin.listConsumerGroupOffsets(group)
                        .partitionsToOffsetAndMetadata().get().get(tp);
                    if (committed == null || committed.offset() < end) {
                        still.add(group);
                    }
                }
                waiting = still;
                if (!waiting.isEmpty()) {
                    if (System.nanoTime() > deadline) {
                        throw new IllegalStateException("groups " + waiting + " did not commit offset " + end + " in time");
                    }
                    if (!ProcessHandle.of(workerPid).map(ProcessHandle::isAlive).orElse(false)) {
                        throw new IllegalStateException("the Connect worker exited; groups " + waiting + " unfinished");
                    }
                    Thread.sleep(500);
                }
            }
            System.err.println("every connector committed offset " + end + " of " + topic);
        }
    }

    private static List<ConsumerRecord<byte[], byte[]>> readAll(String bootstrap, String topic) throws Exception {
        Properties p = client(bootstrap);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
        try (Admin admin = Admin.create(client(bootstrap));
             KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            if (!admin.listTopics().names().get().contains(topic)) {
                return out;
            }
            List<TopicPartition> tps = new ArrayList<>();
            admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions()
                .forEach(info -> tps.add(new TopicPartition(topic, info.partition())));
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            tps.forEach(tp -> latest.put(tp, OffsetSpec.latest()));
            Map<TopicPartition, Long> end = new HashMap<>();
            admin.listOffsets(latest).all().get().forEach((tp, info) -> end.put(tp, info.offset()));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long deadline = System.nanoTime() + 60_000_000_000L;
            while (tps.stream().anyMatch(tp -> consumer.position(tp) < end.get(tp))) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("could not read " + topic + " to its end");
                }
                consumer.poll(Duration.ofMillis(500)).forEach(out::add);
            }
        }
        return out;
    }

    private static String normalise(String text, String runId) {
        return text.replace("-" + runId, "");
    }

    /** printStackTrace text without its frame lines. */
    private static String withoutFrames(String trace) {
        StringBuilder out = new StringBuilder();
        for (String line : trace.split("\n", -1)) {
            if (!FRAME.matcher(line).matches()) {
                out.append(line).append('\n');
            }
        }
        // split(-1) keeps the empty piece after the last newline; do not double it.
        return out.substring(0, out.length() - 1);
    }

    private static void dump(String bootstrap, String runId, Path recordsFile, Path outDir, String connectVersion,
                             List<String> connectorFiles) throws Exception {
        List<JsonNode> input = records(recordsFile);
        for (String file : connectorFiles) {
            Properties connector = new Properties();
            try (InputStreamReader in = new InputStreamReader(new FileInputStream(file), StandardCharsets.UTF_8)) {
                connector.load(in);
            }
            String name = connector.getProperty("name");
            String dlqTopic = connector.getProperty("errors.deadletterqueue.topic.name");
            Map<Long, ConsumerRecord<byte[], byte[]>> letters = new TreeMap<>();
            for (ConsumerRecord<byte[], byte[]> r : readAll(bootstrap, dlqTopic)) {
                Header offset = r.headers().lastHeader(CONTEXT_PREFIX + "offset");
                long o = Long.parseLong(new String(offset.value(), StandardCharsets.UTF_8));
                if (letters.put(o, r) != null) {
                    throw new IllegalStateException(name + ": offset " + o + " dead-lettered twice");
                }
            }
            Map<Long, JsonNode> sink = sinkOutput(connector);

            ObjectNode doc = JsonNodeFactory.instance.objectNode();
            doc.put("about", "Captured by scripts/connect-dlq-fixtures.sh from a Kafka Connect " + connectVersion
                + " standalone worker; regenerate, do not edit. Normalised: topic names lose their run suffix, "
                + "stack traces lose their frame lines (\"\\tat ...\", \"\\t... N more\").");
            doc.put("kafka_connect_version", connectVersion);
            ObjectNode config = doc.putObject("connector");
            new TreeMap<>(connector).forEach((k, v) -> {
                String key = (String) k;
                String value = normalise((String) v, runId);
                if (key.equals("capture.file")) {
                    value = "<sink output file>";
                }
                config.put(key, value);
            });
            ArrayNode out = doc.putArray("records");
            for (int i = 0; i < input.size(); i++) {
                JsonNode in = input.get(i);
                ObjectNode rec = JsonNodeFactory.instance.objectNode();
                rec.put("offset", i);
                rec.put("case", in.get("case").textValue());
                ConsumerRecord<byte[], byte[]> letter = letters.get((long) i);
                if (letter == null) {
                    rec.putNull("dead_letter");
                } else {
                    ObjectNode dl = rec.putObject("dead_letter");
                    dl.put("original_preserved", preserved(in, letter));
                    ArrayNode headers = dl.putArray("headers");
                    for (Header h : letter.headers()) {
                        ArrayNode pair = headers.addArray();
                        pair.add(h.key());
                        JsonNode value = Bytes.encode(h.value());
                        if (h.key().startsWith(CONTEXT_PREFIX) && value.isTextual()) {
                            String text = normalise(value.textValue(), runId);
                            if (h.key().equals(STACKTRACE)) {
                                text = withoutFrames(text);
                            }
                            value = JsonNodeFactory.instance.textNode(text);
                        }
                        pair.add(value);
                    }
                }
                JsonNode converted = sink.get((long) i);
                rec.set("sink", converted == null ? JsonNodeFactory.instance.nullNode() : converted);
                out.add(rec);
            }
            Path target = outDir.resolve(name + ".json");
            Files.writeString(target, layout(doc), StandardCharsets.UTF_8);
            System.err.println(name + ": " + letters.size() + " dead letters of " + input.size() + " records -> " + target);
        }
    }

    /** Pretty JSON, except that each element of "records" takes one line, so a diff shows records. */
    private static String layout(ObjectNode doc) throws IOException {
        StringBuilder out = new StringBuilder("{\n");
        List<String> fields = new ArrayList<>();
        doc.fieldNames().forEachRemaining(fields::add);
        for (int i = 0; i < fields.size(); i++) {
            String field = fields.get(i);
            JsonNode value = doc.get(field);
            out.append(' ').append(JSON.writeValueAsString(field)).append(": ");
            if (value.isArray()) {
                out.append("[\n");
                for (int j = 0; j < value.size(); j++) {
                    out.append("  ").append(JSON.writeValueAsString(value.get(j)));
                    out.append(j + 1 < value.size() ? ",\n" : "\n");
                }
                out.append(" ]");
            } else if (value.isObject()) {
                out.append("{\n");
                List<String> keys = new ArrayList<>();
                value.fieldNames().forEachRemaining(keys::add);
                for (int j = 0; j < keys.size(); j++) {
                    out.append("  ").append(JSON.writeValueAsString(keys.get(j))).append(": ")
                        .append(JSON.writeValueAsString(value.get(keys.get(j))));
                    out.append(j + 1 < keys.size() ? ",\n" : "\n");
                }
                out.append(" }");
            } else {
                out.append(JSON.writeValueAsString(value));
            }
            out.append(i + 1 < fields.size() ? ",\n" : "\n");
        }
        return out.append("}\n").toString();
    }

    /** Key, value and the original headers of a dead letter are those produced. */
    private static boolean preserved(JsonNode in, ConsumerRecord<byte[], byte[]> letter) {
        if (!Arrays.equals(Bytes.decode(in.get("key")), letter.key())
            || !Arrays.equals(Bytes.decode(in.get("value")), letter.value())) {
            return false;
        }
        List<Header> original = new ArrayList<>();
        for (Header h : letter.headers()) {
            if (!h.key().startsWith(CONTEXT_PREFIX)) {
                original.add(h);
            }
        }
        JsonNode expected = in.has("headers") ? in.get("headers") : JSON.createArrayNode();
        if (expected.size() != original.size()) {
            return false;
        }
        for (int i = 0; i < original.size(); i++) {
            if (!expected.get(i).get(0).textValue().equals(original.get(i).key())
                || !Arrays.equals(Bytes.decode(expected.get(i).get(1)), original.get(i).value())) {
                return false;
            }
        }
        return true;
    }

    /** What the capture sink wrote for each offset it received. */
    private static Map<Long, JsonNode> sinkOutput(Properties connector) throws IOException {
        Map<Long, JsonNode> out = new HashMap<>();
        for (String line : Files.readAllLines(Paths.get(connector.getProperty("capture.file")), StandardCharsets.UTF_8)) {
            JsonNode node = JSON.readTree(line);
            ObjectNode copy = ((ObjectNode) node).deepCopy();
            copy.remove("offset");
            out.put(node.get("offset").longValue(), copy);
        }
        return out;
    }
}
