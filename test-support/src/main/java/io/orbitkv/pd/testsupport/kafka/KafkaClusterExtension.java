package io.orbitkv.pd.testsupport.kafka;

import io.orbitkv.pd.broker.KraftCluster;
import java.nio.file.Path;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolutionException;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * The JUnit 5 side of {@link WithKafka}: one cluster per test class, kept in the class-level store so JUnit closes
 * it (and its child JVMs) when the class is done, even when a test fails.
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
        Class<?> testClass = context.getRequiredTestClass();
        ExtensionContext classContext = context;
        while (classContext.getParent().isPresent() && classContext.getTestMethod().isPresent()) {
            classContext = classContext.getParent().get();
        }
        return classContext.getStore(NS).getOrComputeIfAbsent(testClass.getName(), k -> start(testClass), Holder.class).cluster;
    }

    private static Holder start(Class<?> testClass) {
        WithKafka spec = testClass.getAnnotation(WithKafka.class);
        int nodes = spec == null ? 1 : spec.nodes();
        if (nodes != 1 && nodes != 3) {
            throw new ParameterResolutionException("@WithKafka(nodes): 1 or 3 supported, got " + nodes);
        }
        Path root = Path.of("target", "kafka", testClass.getSimpleName() + "-" + System.nanoTime()).toAbsolutePath();
        return new Holder(KraftCluster.builder().nodes(nodes).dataDir(root.resolve("data")).logsDir(root.resolve("logs")).build().start());
    }

    /** Closes the cluster when JUnit drops the class-level store. */
    private record Holder(KraftCluster cluster) implements AutoCloseable {
        @Override
        public void close() {
            cluster.close();
        }
    }
}
