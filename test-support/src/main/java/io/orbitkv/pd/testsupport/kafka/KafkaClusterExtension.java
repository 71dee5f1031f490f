package io.orbitkv.pd.testsupport.kafka;

import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.CodeSource;
import java.util.Optional;

import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionConfigurationException;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;
import org.junit.platform.commons.support.AnnotationSupport;

import io.orbitkv.pd.broker.KraftCluster;

/**
 * The JUnit 5 side of {@link WithKafka}: one cluster per annotated test class.
 *
 * <p>The cluster lives in the store of the annotated class's {@link ExtensionContext}, so JUnit closes it (and
 * its child JVMs) when that class is done, also when tests fail or {@code @BeforeAll} throws; the cluster's
 * own shutdown hook and parent-pid watch cover a JVM that dies outright. It is started in {@code beforeAll}, or
 * earlier on first parameter resolution (a {@code PER_CLASS} test instance is constructed before
 * {@code beforeAll} runs). {@code @Nested} classes without their own {@code @WithKafka} share the enclosing
 * class's cluster; with their own annotation they get their own.
 */
public final class KafkaClusterExtension implements BeforeAllCallback, ParameterResolver {

    private static final ExtensionContext.Namespace NS = ExtensionContext.Namespace.create(KafkaClusterExtension.class);

    @Override
    public void beforeAll(ExtensionContext context) {
        cluster(context);
    }

    @Override
    public boolean supportsParameter(ParameterContext parameter, ExtensionContext context) {
        return parameter.getParameter().getType() == KraftCluster.class;
    }

    @Override
    public Object resolveParameter(ParameterContext parameter, ExtensionContext context) {
        return cluster(context);
    }

    private static KraftCluster cluster(ExtensionContext context) {
        ExtensionContext owner = owningClassContext(context);
        Class<?> testClass = owner.getRequiredTestClass();
        return owner.getStore(NS).computeIfAbsent(testClass.getName(), k -> start(testClass), KraftCluster.class);
    }

    /**
     * The nearest class-level context whose class carries {@link WithKafka}; the nearest class-level context at
     * all when the extension was registered through {@code @ExtendWith} alone.
     */
    private static ExtensionContext owningClassContext(ExtensionContext context) {
        ExtensionContext firstClassLevel = null;
        for (Optional<ExtensionContext> cur = Optional.of(context); cur.isPresent(); cur = cur.get().getParent()) {
            ExtensionContext c = cur.get();
            if (c.getTestMethod().isPresent() || c.getTestClass().isEmpty()) {
                continue; // method, template invocation or engine level
            }
            if (firstClassLevel == null) {
                firstClassLevel = c;
            }
            if (AnnotationSupport.isAnnotated(c.getRequiredTestClass(), WithKafka.class)) {
                return c;
            }
        }
        if (firstClassLevel == null) {
            throw new ExtensionConfigurationException("KafkaClusterExtension needs a test class context");
        }
        return firstClassLevel;
    }

    private static KraftCluster start(Class<?> testClass) {
        Optional<WithKafka> spec = AnnotationSupport.findAnnotation(testClass, WithKafka.class);
        Path root = targetDir(testClass).resolve("kafka").resolve(classDirName(testClass));
        KraftCluster.Builder b = KraftCluster.builder()
                .nodes(spec.map(WithKafka::nodes).orElse(1))
                .dataDir(root.resolve("data"))
                .logsDir(root.resolve("logs"));
        for (String kv : spec.map(WithKafka::brokerProperties).orElse(new String[0])) {
            int eq = kv.indexOf('=');
            if (eq <= 0) {
                throw new ExtensionConfigurationException(
                        "@WithKafka(brokerProperties): expected key=value, got '" + kv + "' on " + testClass.getName());
            }
            b.brokerProperty(kv.substring(0, eq).strip(), kv.substring(eq + 1).strip());
        }
        // Non-persistent: the cluster wipes data left by an earlier (crashed) run before starting.
        return b.build().start();
    }

    /**
     * The module's {@code target/}: the parent of the {@code test-classes} directory the class was loaded from,
     * so IDE runs with another working directory still write there; the working directory's {@code target/}
     * otherwise.
     */
    static Path targetDir(Class<?> testClass) {
        CodeSource cs = testClass.getProtectionDomain().getCodeSource();
        if (cs != null && cs.getLocation() != null && "file".equals(cs.getLocation().getProtocol())) {
            try {
                Path loc = Path.of(cs.getLocation().toURI());
                if (Files.isDirectory(loc) && loc.getParent() != null
                        && loc.getParent().getFileName() != null
                        && loc.getParent().getFileName().toString().equals("target")) {
                    return loc.getParent();
                }
            } catch (URISyntaxException | IllegalArgumentException ignored) {
                // fall back to the working directory
            }
        }
        return Path.of("target").toAbsolutePath();
    }

    /** {@code DeciderIT}, or {@code Outer$Inner} for a nested class: short but unique within a module. */
    static String classDirName(Class<?> testClass) {
        String pkg = testClass.getPackageName();
        return pkg.isEmpty() ? testClass.getName() : testClass.getName().substring(pkg.length() + 1);
    }
}
