package io.orbitkv.pd.schemas.config;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** How the CLI commands combine a --config file with their command-line overrides. */
class ConfigPropsOverrideTest {

    @Test
    void anOverrideReplacesTheFilesValueAndAMissingOneKeepsIt(@TempDir Path dir) throws Exception {
        Path file = Files.writeString(dir.resolve("c.properties"), "bootstrap.servers=from-file:9092\nproxy.http.port=8000\n");
        ConfigProps props = ConfigProps.loadOrEmpty(file);
        props.override("bootstrap.servers", null).override("proxy.http.port", 9001);
        assertThat(props.string("bootstrap.servers", null)).isEqualTo("from-file:9092");
        assertThat(props.integer("proxy.http.port", 0)).isEqualTo(9001);
    }

    @Test
    void noFileMeansNoPropertiesButOverridesStillApply() {
        ConfigProps props = ConfigProps.loadOrEmpty(null).override("bootstrap.servers", "cli:9092");
        assertThat(props.string("bootstrap.servers", "default")).isEqualTo("cli:9092");
        assertThat(props.string("topics.prefix", "default")).isEqualTo("default");
    }

    @org.junit.jupiter.api.Test
    void aValueMayNameAnEnvironmentVariable() {
        String home = System.getenv("HOME");
        org.junit.jupiter.api.Assumptions.assumeTrue(home != null);
        ConfigProps p = ConfigProps.empty().with("a", "x-${env:HOME}-y").with("kafka.sasl.jaas.config", "${env:HOME}")
                .with("b", "${env:ORBITKV_SURELY_NOT_SET_42}");
        org.assertj.core.api.Assertions.assertThat(p.string("a", null)).isEqualTo("x-" + home + "-y");
        org.assertj.core.api.Assertions.assertThat(p.withPrefix("kafka.")).containsEntry("sasl.jaas.config", home);
        org.assertj.core.api.Assertions.assertThatThrownBy(() -> p.string("b", null))
                .hasMessage("b: environment variable ORBITKV_SURELY_NOT_SET_42 is not set");
    }
}
