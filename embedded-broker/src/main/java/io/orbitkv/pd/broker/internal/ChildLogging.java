package io.orbitkv.pd.broker.internal;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.net.MalformedURLException;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;

/**
 * Logging set-up for a broker child JVM.
 *
 * <p>Kafka logs through SLF4J. Which backend the child ends up with depends on the class path it inherits:
 * Kafka's own distribution ships log4j2 ({@code log4j-slf4j2-impl}), but the Maven artifacts only pull in
 * {@code log4j-api}/{@code log4j-core} <em>without</em> the SLF4J binding, while our applications and tests
 * bring logback. So we look at the child's class path, pick one provider (log4j2 first, as Kafka's native
 * backend, then logback, then whatever else is there) and pin it with {@code -Dslf4j.provider}, which also
 * silences SLF4J's "multiple providers" warning. Config files for both backends are generated because
 * {@code log4j-core} is always present and would otherwise complain about a missing configuration. Both log
 * to stdout, which the parent redirects into the node's log file, so JVM crash output, the storage tool and
 * Kafka's logs end up in one place.
 */
public final class ChildLogging {

    static final String SLF4J_SERVICE = "META-INF/services/org.slf4j.spi.SLF4JServiceProvider";
    static final String LOG4J2_PROVIDER = "org.apache.logging.slf4j.SLF4JServiceProvider";
    static final String LOGBACK_PROVIDER = "ch.qos.logback.classic.spi.LogbackServiceProvider";

    /**
     * Loggers that are chatty at INFO on every start or for every partition; WARN still reaches the file.
     * {@code AbstractConfig} prints a several-hundred-line config dump per client and per server start; the
     * effective config is in {@code server.properties} next to the data anyway.
     */
    private static final List<String> QUIET_LOGGERS = List.of(
            "org.apache.kafka.common.config.AbstractConfig",
            "org.apache.kafka.common.metrics",
            "kafka.request.logger",
            "state.change.logger",
            "kafka.authorizer.logger",
            "org.apache.kafka.storage.internals.log");

    private ChildLogging() {
    }

    /**
     * The SLF4J provider the child will be pinned to, if any provider is on its class path.
     *
     * @param classPath the child's expanded class path
     */
    public static Optional<String> chooseProvider(List<Path> classPath) {
        List<String> found = providersOn(classPath);
        if (found.contains(LOG4J2_PROVIDER)) {
            return Optional.of(LOG4J2_PROVIDER);
        }
        if (found.contains(LOGBACK_PROVIDER)) {
            return Optional.of(LOGBACK_PROVIDER);
        }
        return found.stream().findFirst();
    }

    /** Provider class names registered through {@code ServiceLoader} files on the given class path. */
    static List<String> providersOn(List<Path> classPath) {
        URL[] urls = new URL[classPath.size()];
        for (int i = 0; i < urls.length; i++) {
            try {
                urls[i] = classPath.get(i).toUri().toURL();
            } catch (MalformedURLException e) {
                throw new IllegalArgumentException("classPath: bad entry " + classPath.get(i), e);
            }
        }
        Set<String> names = new LinkedHashSet<>();
        // Parent null: look only at the child's entries, not at whatever this JVM happens to have loaded.
        try (URLClassLoader cl = new URLClassLoader(urls, null)) {
            for (Enumeration<URL> en = cl.getResources(SLF4J_SERVICE); en.hasMoreElements(); ) {
                URL u = en.nextElement();
                try (BufferedReader r = new BufferedReader(
                        new InputStreamReader(u.openStream(), StandardCharsets.UTF_8))) {
                    r.lines()
                            .map(l -> l.replaceFirst("#.*", "").strip())
                            .filter(l -> !l.isEmpty())
                            .forEach(names::add);
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot scan child class path for SLF4J providers", e);
        }
        return new ArrayList<>(names);
    }

    /**
     * Writes {@code log4j2.properties} and {@code logback.xml} into {@code configDir} and returns the
     * {@code -D} options that make the child use them.
     *
     * @param configDir directory owned by one node
     * @param provider  provider to pin, from {@link #chooseProvider}
     */
    public static List<String> writeConfigs(Path configDir, Optional<String> provider) throws IOException {
        Path log4j2 = configDir.resolve("log4j2.properties");
        Path logback = configDir.resolve("logback.xml");
        Files.writeString(log4j2, log4j2Config(), StandardCharsets.UTF_8);
        Files.writeString(logback, logbackConfig(), StandardCharsets.UTF_8);
        List<String> opts = new ArrayList<>();
        provider.ifPresent(p -> opts.add("-Dslf4j.provider=" + p));
        // SLF4J reports the explicit provider choice at INFO on stderr; only problems are interesting.
        opts.add("-Dslf4j.internal.verbosity=WARN");
        opts.add("-Dlog4j2.configurationFile=" + log4j2.toAbsolutePath());
        opts.add("-Dlogback.configurationFile=" + logback.toAbsolutePath());
        // Kafka's log4j2 configs reference this; harmless otherwise.
        opts.add("-Dkafka.logs.dir=" + configDir.toAbsolutePath());
        return opts;
    }

    static String log4j2Config() {
        StringBuilder sb = new StringBuilder();
        sb.append("# Generated by OrbitKV KraftCluster; rewritten on every node start.\n")
                .append("status = warn\n")
                .append("appender.out.type = Console\n")
                .append("appender.out.name = STDOUT\n")
                .append("appender.out.layout.type = PatternLayout\n")
                .append("appender.out.layout.pattern = %d{ISO8601} %-5p [%t] %c - %m%n\n")
                .append("rootLogger.level = INFO\n")
                .append("rootLogger.appenderRef.out.ref = STDOUT\n");
        for (int i = 0; i < QUIET_LOGGERS.size(); i++) {
            sb.append("logger.q").append(i).append(".name = ").append(QUIET_LOGGERS.get(i)).append('\n')
                    .append("logger.q").append(i).append(".level = WARN\n");
        }
        return sb.toString();
    }

    static String logbackConfig() {
        StringBuilder sb = new StringBuilder();
        sb.append("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
                .append("<!-- Generated by OrbitKV KraftCluster; rewritten on every node start. -->\n")
                .append("<configuration>\n")
                .append("  <appender name=\"STDOUT\" class=\"ch.qos.logback.core.ConsoleAppender\">\n")
                .append("    <encoder><pattern>%d{ISO8601} %-5level [%thread] %logger - %msg%n</pattern></encoder>\n")
                .append("  </appender>\n");
        for (String l : QUIET_LOGGERS) {
            sb.append("  <logger name=\"").append(l).append("\" level=\"WARN\"/>\n");
        }
        sb.append("  <root level=\"INFO\"><appender-ref ref=\"STDOUT\"/></root>\n")
                .append("</configuration>\n");
        return sb.toString();
    }
}
