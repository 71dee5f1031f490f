package io.orbitkv.pd.dashboard;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.orbitkv.pd.metrics.MetricNames;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/** deploy/grafana/orbitkv-pd.json and docs/dashboard.md use exactly the metric names of {@link MetricNames}. */
class GrafanaDashboardTest {

    private static final Pattern METRIC = Pattern.compile("orbitkv_[a-z_]+");

    /** Every Prometheus series name a MetricNames constant can produce (timer, summary, counter, gauge). */
    private static Set<String> rendered() throws IllegalAccessException {
        Set<String> out = new HashSet<>();
        for (Field f : MetricNames.class.getFields()) {
            if (Modifier.isStatic(f.getModifiers()) && f.getType() == String.class) {
                String base = ((String) f.get(null)).replace('.', '_');
                out.add(base);
                out.add(base + "_total");
                for (String suffix : new String[] {"_bucket", "_count", "_sum", "_max"}) {
                    out.add(base + suffix); // a distribution summary without a unit
                }
                for (String unit : new String[] {"_seconds", "_bytes"}) {
                    for (String suffix : new String[] {"", "_bucket", "_count", "_sum", "_max"}) {
                        out.add(base + unit + suffix);
                    }
                }
            }
        }
        return out;
    }

    private static Path root() {
        Path p = Path.of("").toAbsolutePath();
        return Files.exists(p.resolve("deploy")) ? p : p.getParent();
    }

    @Test
    void grafanaQueriesOnlyKnownMetrics() throws Exception {
        JsonNode dash = new ObjectMapper().readTree(root().resolve("deploy/grafana/orbitkv-pd.json").toFile());
        Set<String> used = new TreeSet<>();
        for (JsonNode panel : dash.path("panels")) {
            for (JsonNode t : panel.path("targets")) {
                Matcher m = METRIC.matcher(t.path("expr").asText());
                while (m.find()) {
                    used.add(m.group());
                }
            }
        }
        assertThat(used).hasSizeGreaterThan(15);
        assertThat(rendered()).containsAll(used);
        assertThat(dash.path("uid").asText()).isEqualTo("orbitkv-pd");
    }

    @Test
    void docsNameEveryMetric() throws Exception {
        String docs = Files.readString(root().resolve("docs/dashboard.md"));
        for (Field f : MetricNames.class.getFields()) {
            String base = ((String) f.get(null)).replace('.', '_');
            assertThat(docs).as("docs/dashboard.md names " + f.getName()).contains(base);
        }
    }
}
