package capture;

import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.sink.SinkConnector;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * A sink that writes what the converters made of each record, one JSON line per record, and
 * (with capture.report=true) hands records whose value is a string starting with "report:" to
 * the ErrantRecordReporter instead, so the TASK_PUT dead letter can be captured.
 */
public class CaptureSinkConnector extends SinkConnector {
    private Map<String, String> props;

    @Override
    public void start(Map<String, String> props) {
        this.props = props;
    }

    @Override
    public Class<? extends Task> taskClass() {
        return CaptureSinkTask.class;
    }

    @Override
    public List<Map<String, String>> taskConfigs(int maxTasks) {
        List<Map<String, String>> configs = new ArrayList<>();
        configs.add(props);
        return configs;
    }

    @Override
    public void stop() {
    }

    @Override
    public ConfigDef config() {
        return new ConfigDef()
            .define("capture.file", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "where to write the JSON lines")
            .define("capture.report", ConfigDef.Type.BOOLEAN, false, ConfigDef.Importance.LOW, "report \"report:\" strings");
    }

    @Override
    public String version() {
        return "1";
    }
}
