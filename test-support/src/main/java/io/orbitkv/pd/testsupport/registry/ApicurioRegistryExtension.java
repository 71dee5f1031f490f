package io.orbitkv.pd.testsupport.registry;

import java.time.Duration;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * The JUnit side of {@link WithApicurio}: one registry per test class, kept in the class-level
 * {@link ExtensionContext.Store} so JUnit closes it (an {@link AutoCloseable}) when the class is done.
 */
public final class ApicurioRegistryExtension implements BeforeAllCallback, ParameterResolver {

    private static final ExtensionContext.Namespace NS = ExtensionContext.Namespace.create(ApicurioRegistryExtension.class);

    @Override
    public void beforeAll(ExtensionContext context) {
        registry(context);
    }

    @Override
    public boolean supportsParameter(ParameterContext parameter, ExtensionContext context) {
        return parameter.getParameter().getType() == ApicurioRegistry.class;
    }

    @Override
    public Object resolveParameter(ParameterContext parameter, ExtensionContext context) {
        return registry(context);
    }

    private static ApicurioRegistry registry(ExtensionContext context) {
        Class<?> testClass = context.getRequiredTestClass();
        ExtensionContext classContext = context;
        while (classContext.getTestMethod().isPresent() && classContext.getParent().isPresent()) {
            classContext = classContext.getParent().get();
        }
        return classContext.getStore(NS).computeIfAbsent(testClass.getName(), k -> start(testClass), ApicurioRegistry.class);
    }

    private static ApicurioRegistry start(Class<?> testClass) {
        WithApicurio spec = testClass.getAnnotation(WithApicurio.class);
        int timeout = spec == null ? 60 : spec.startTimeoutSeconds();
        return ApicurioRegistry.builder()
                .name(testClass.getSimpleName())
                .startTimeout(Duration.ofSeconds(timeout))
                .start();
    }
}
