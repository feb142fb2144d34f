package capture;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.sink.ErrantRecordReporter;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTask;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.Collection;
import java.util.HexFormat;
import java.util.Map;
import java.util.concurrent.ExecutionException;

/** See {@link CaptureSinkConnector}. */
public class CaptureSinkTask extends SinkTask {
    private static final ObjectMapper JSON = new ObjectMapper();
    private PrintStream out;
    private boolean report;

    @Override
    public String version() {
        return "1";
    }

    @Override
    public void start(Map<String, String> props) {
        report = Boolean.parseBoolean(props.getOrDefault("capture.report", "false"));
        try {
            out = new PrintStream(Files.newOutputStream(Paths.get(props.get("capture.file")),
                StandardOpenOption.CREATE, StandardOpenOption.APPEND), false, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new ConnectException("cannot open capture.file", e);
        }
    }

    @Override
    public void put(Collection<SinkRecord> records) {
        ErrantRecordReporter reporter = report ? context.errantRecordReporter() : null;
        for (SinkRecord record : records) {
            Object value = record.value();
            if (reporter != null && value instanceof String && ((String) value).startsWith("report:")) {
                try {
                    reporter.report(record, new ConnectException(((String) value).substring("report:".length()).trim())).get();
                } catch (InterruptedException | ExecutionException e) {
                    throw new ConnectException("could not report a record", e);
                }
                continue;
            }
            ObjectNode line = JsonNodeFactory.instance.objectNode();
            line.put("offset", record.kafkaOffset());
            line.set("key", describe(record.key()));
            line.set("value", describe(value));
            ArrayNode headers = line.putArray("headers");
            for (Header header : record.headers()) {
                ArrayNode pair = headers.addArray();
                pair.add(header.key());
                pair.add(describe(header.value()));
            }
            try {
                out.println(JSON.writeValueAsString(line));
            } catch (IOException e) {
                throw new ConnectException(e);
            }
        }
    }

    /** The Java class of a converted value and its text (hex for bytes). */
    private static ObjectNode describe(Object value) {
        ObjectNode node = JsonNodeFactory.instance.objectNode();
        if (value == null) {
            node.putNull("class");
            node.putNull("text");
        } else {
            node.put("class", value.getClass().getName());
            if (value instanceof byte[]) {
                node.put("text", HexFormat.of().formatHex((byte[]) value));
            } else if (value instanceof ByteBuffer) {
                ByteBuffer b = ((ByteBuffer) value).duplicate();
                byte[] a = new byte[b.remaining()];
                b.get(a);
                node.put("text", HexFormat.of().formatHex(a));
            } else {
                node.put("text", String.valueOf(value));
            }
        }
        return node;
    }

    @Override
    public void flush(Map<org.apache.kafka.common.TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> offsets) {
        out.flush();
    }

    @Override
    public void stop() {
        if (out != null) {
            out.close();
        }
    }
}
