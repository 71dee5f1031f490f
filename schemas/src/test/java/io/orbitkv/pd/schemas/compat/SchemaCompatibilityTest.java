package io.orbitkv.pd.schemas.compat;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assertions.fail;

import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.schemas.EventSchemas;
import io.orbitkv.pd.schemas.EventSchemas.Released;
import io.orbitkv.pd.schemas.compat.CompatibilityChecker.Violation;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/**
 * The build's compatibility gate: the current public schemas against every released version, both ways. An
 * incompatible change to {@code schemas/src/main/avro} fails {@code mvn verify} here, listing every violation.
 */
class SchemaCompatibilityTest {

    @Test
    void currentSchemasAreBackwardAndForwardCompatibleWithEveryReleasedVersion() {
        // given the compiled schemas and the released versions on the class path
        EventSchemas catalog = EventSchemas.get();
        assertThat(catalog.released()).as("no released versions found: is released/index.txt on the class path?").isNotEmpty();
        // when
        List<Violation> violations = CompatibilityChecker.check(catalog);
        // then
        if (!violations.isEmpty()) {
            fail(violations.size() + " incompatible change(s) against released schemas (see docs/schemas.md):\n  "
                    + violations.stream().map(Violation::message).collect(Collectors.joining("\n  ")));
        }
    }

    @Test
    void everyTopLevelTypeIsReleased() {
        // a top-level type that was never released would escape the check above
        List<String> released = EventSchemas.get().released().stream().map(Released::name).distinct().toList();
        assertThat(released).containsAll(EventSchemas.topLevelTypes().stream().map(Class::getSimpleName).toList());
    }

    @Test
    void aReleasedNameWithNoCurrentSchemaIsAViolation() {
        // given a release of Decision but a current set without it (the type was removed or renamed)
        List<Released> released = List.of(new Released("v1", "Decision", Decision.getClassSchema()));
        // when
        List<Violation> violations = CompatibilityChecker.check(Map.of(), released);
        // then
        assertThat(violations).singleElement().satisfies(v -> {
            assertThat(v.schema()).isEqualTo("Decision");
            assertThat(v.message()).contains("Decision", "v1", "no current schema");
        });
    }
}
