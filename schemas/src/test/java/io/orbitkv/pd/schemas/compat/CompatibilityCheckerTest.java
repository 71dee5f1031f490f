package io.orbitkv.pd.schemas.compat;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.node.TextNode;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.schemas.EventSchemas.Released;
import io.orbitkv.pd.schemas.SchemaJson;
import io.orbitkv.pd.schemas.compat.CompatibilityChecker.Direction;
import io.orbitkv.pd.schemas.compat.CompatibilityChecker.Violation;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Consumer;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.avro.Schema;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Proves the gate: each case edits the current RequestEvent or Decision the way a developer would edit the
 * {@code .avsc}, releases the unedited schema as "v1", and checks what the checker reports. Incompatible edits
 * must be reported in the right direction(s) with the field named; compatible ones must report nothing.
 */
class CompatibilityCheckerTest {

    static Stream<Arguments> incompatibleEdits() {
        return Stream.of(
                edit("remove a top-level field without default", Decision.getClassSchema(), "Decision",
                        r -> SchemaJson.removeField(r, "decision_id"), Set.of(Direction.FORWARD), "Decision.decision_id"),
                edit("remove a field without default inside a union branch", RequestEvent.getClassSchema(), "PrefillCompleted",
                        r -> SchemaJson.removeField(r, "num_tokens"), Set.of(Direction.FORWARD),
                        "RequestEvent.payload[PrefillCompleted].num_tokens"),
                edit("change a field type int -> string inside a union branch", RequestEvent.getClassSchema(), "RequestAdmitted",
                        r -> SchemaJson.field(r, "prompt_tokens").put("type", "string"), Set.of(Direction.BACKWARD, Direction.FORWARD),
                        "RequestEvent.payload[RequestAdmitted].prompt_tokens"),
                edit("change a top-level field type int -> string", Decision.getClassSchema(), "Decision",
                        r -> SchemaJson.field(r, "seq").put("type", "string"), Set.of(Direction.BACKWARD, Direction.FORWARD), "Decision.seq"),
                edit("change a field type inside an array of a nested record", Decision.getClassSchema(), "BlockRun",
                        r -> SchemaJson.field(r, "count").put("type", "string"), Set.of(Direction.BACKWARD, Direction.FORWARD),
                        "Decision.payload[TransferOrder].source_blocks[].count"),
                edit("narrow a field long -> int", RequestEvent.getClassSchema(), "RequestEvent",
                        r -> SchemaJson.field(r, "event_time_ms").put("type", "int"), Set.of(Direction.BACKWARD), "RequestEvent.event_time_ms"),
                edit("add a required field without default", Decision.getClassSchema(), "Decision",
                        r -> SchemaJson.addField(r, "{\"name\": \"priority\", \"type\": \"int\"}"), Set.of(Direction.BACKWARD), "priority"),
                edit("add a required field without default inside a union branch", Decision.getClassSchema(), "TransferOrder",
                        r -> SchemaJson.addField(r, "{\"name\": \"checksum\", \"type\": \"string\"}"), Set.of(Direction.BACKWARD),
                        "Decision.payload[TransferOrder].checksum"),
                edit("remove a union branch (an event type)", RequestEvent.getClassSchema(), "RequestEvent",
                        r -> SchemaJson.removeBranch(SchemaJson.unionOf(r, "payload"), "Tick"), Set.of(Direction.BACKWARD),
                        "RequestEvent.payload[Tick]"),
                edit("remove the null branch of an optional field", Decision.getClassSchema(), "Decision",
                        r -> {
                            SchemaJson.field(r, "cause_event_id").put("type", "string");
                            SchemaJson.field(r, "cause_event_id").remove("default");
                        }, Set.of(Direction.BACKWARD), "Decision.cause_event_id"),
                edit("add a union branch (a new event type) is not forward compatible", Decision.getClassSchema(), "Decision",
                        r -> SchemaJson.unionOf(r, "payload").add(SchemaJson.json(
                                "{\"type\": \"record\", \"name\": \"Paused\", \"fields\": [{\"name\": \"why\", \"type\": \"string\"}]}")),
                        Set.of(Direction.FORWARD), "Decision.payload[Paused]"),
                edit("remove an enum symbol from an enum without default", RequestEvent.getClassSchema(), "FailurePolicy",
                        e -> {
                            e.remove("default");
                            ((ArrayNode) e.get("symbols")).remove(1);
                        }, Set.of(Direction.BACKWARD), "RequestEvent.payload[RequestAdmitted].failure_policy"),
                edit("remove an enum symbol from an enum without default, in a nested record", Decision.getClassSchema(), "OutcomeKind",
                        e -> {
                            e.remove("default");
                            ArrayNode symbols = (ArrayNode) e.get("symbols");
                            symbols.removeAll();
                            List.of("UNKNOWN", "COMPLETED", "CANCELLED", "FAILED").forEach(symbols::add);
                        }, Set.of(Direction.BACKWARD), "Decision.payload[RequestOutcome].kind"),
                Arguments.of("rename a field without alias", Decision.getClassSchema(),
                        SchemaJson.edit(Decision.getClassSchema(), "Decision", r -> SchemaJson.field(r, "decision_id").put("name", "id")),
                        Set.of(Direction.BACKWARD, Direction.FORWARD),
                        // the new reader misses "id", the released reader misses "decision_id"
                        Map.of(Direction.BACKWARD, "Decision.id", Direction.FORWARD, "Decision.decision_id")),
                edit("rename a field with an alias is still not forward compatible", Decision.getClassSchema(), "Decision",
                        r -> {
                            SchemaJson.field(r, "decision_id").put("name", "id");
                            SchemaJson.field(r, "id").putArray("aliases").add("decision_id");
                        }, Set.of(Direction.FORWARD), "Decision.decision_id"));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("incompatibleEdits")
    void incompatibleEditIsReportedWithTheFieldInEveryBrokenDirection(String name, Schema released, Schema edited,
                                                                      Set<Direction> directions, Map<Direction, String> fields) {
        // given the unedited schema released as v1 and the edited one as current
        List<Released> v1 = List.of(new Released("v1", released.getName(), released));
        // when
        List<Violation> violations = CompatibilityChecker.check(Map.of(edited.getName(), edited), v1);
        // then every expected direction is reported, naming schema, version, direction and field
        assertThat(violations).as(name).isNotEmpty();
        assertThat(violations.stream().map(Violation::direction).collect(Collectors.toSet())).as(name).isEqualTo(directions);
        for (Direction d : directions) {
            assertThat(violations).as("%s: %s %s", name, d, violations)
                    .anySatisfy(v -> {
                        assertThat(v.direction()).isEqualTo(d);
                        assertThat(v.message()).contains(released.getName(), "v1", d.name(), fields.get(d));
                    });
        }
        assertThat(violations).allSatisfy(v -> assertThat(v.type()).isNotNull());
    }

    static Stream<Arguments> compatibleEdits() {
        return Stream.of(
                edit("add a top-level field with a default", Decision.getClassSchema(), "Decision",
                        r -> SchemaJson.addField(r, "{\"name\": \"priority\", \"type\": \"int\", \"default\": 0}"), Set.of(), ""),
                edit("add an optional field inside a union branch", RequestEvent.getClassSchema(), "PrefillCompleted",
                        r -> SchemaJson.addField(r, "{\"name\": \"trace_id\", \"type\": [\"null\", \"string\"], \"default\": null}"), Set.of(), ""),
                edit("remove a field that has a default", RequestEvent.getClassSchema(), "RequestAdmitted",
                        r -> SchemaJson.removeField(r, "deadline_ms"), Set.of(), ""),
                edit("add an enum symbol to an enum with a default", RequestEvent.getClassSchema(), "FailurePolicy",
                        e -> ((ArrayNode) e.get("symbols")).add("RETRY_ELSEWHERE"), Set.of(), ""),
                edit("edit documentation", Decision.getClassSchema(), "Decision",
                        r -> r.set("doc", TextNode.valueOf("reworded")), Set.of(), ""));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("compatibleEdits")
    void compatibleEditReportsNothing(String name, Schema released, Schema edited, Set<Direction> directions, Map<Direction, String> fields) {
        // given
        List<Released> v1 = List.of(new Released("v1", released.getName(), released));
        // when
        List<Violation> violations = CompatibilityChecker.check(Map.of(edited.getName(), edited), v1);
        // then
        assertThat(violations).as(name).isEmpty();
        assertThat(edited.toString()).as("the edit must change something").isNotEqualTo(released.toString());
    }

    private static Arguments edit(String name, Schema current, String typeName, Consumer<ObjectNode> change,
                                  Set<Direction> directions, String field) {
        Map<Direction, String> fields = new EnumMap<>(Direction.class);
        directions.forEach(d -> fields.put(d, field));
        return Arguments.of(name, current, SchemaJson.edit(current, typeName, change), directions, fields);
    }
}
