package io.orbitkv.pd.schemas;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowableOfType;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;

import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.schemas.EventDecodingException.Reason;
import java.io.ByteArrayOutputStream;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.apache.avro.Schema;
import org.apache.avro.specific.SpecificRecord;
import org.junit.jupiter.api.Test;

/**
 * Hostile bytes against the embedded serde: every input must either decode or end in an
 * {@link EventDecodingException}. Any other exception, any {@link Error} (an OutOfMemoryError from a forged
 * length among them: tests run with -Xmx1g), a hang, or a large allocation fails the test.
 */
class SerdeFuzzTest {

    private static final String TOPIC = "orbitkv.fuzz";
    /** Decoding a few-hundred-byte record needs kilobytes; building a resolving reader once, a little more. */
    private static final long MAX_ALLOCATION_PER_INPUT = 8L << 20;
    private static final long SEED = 0x0b17_4b7_5eedL;

    private final EventSerdes serdes = EventSerdes.embedded();
    private final com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();

    @Test
    void everyMutatedTruncatedOrRandomInputDecodesOrFailsWithEventDecodingException() {
        Outcomes outcomes = new Outcomes();
        // A hang guard, not a benchmark: the loop takes about a second.
        assertTimeoutPreemptively(Duration.ofSeconds(30), () -> {
            Random rnd = new Random(SEED);
            List<SpecificRecord> samples = Samples.all();
            for (SpecificRecord sample : samples) {
                AvroEventSerde<SpecificRecord> serde = EmbeddedSerdeTest.serdeFor(serdes, sample);
                byte[] valid = serde.serialize(TOPIC, sample);

                // every truncation: Avro binary is self-delimiting, so no proper prefix is a whole record
                for (int len = 0; len < valid.length; len++) {
                    EventDecodingException e = outcomes.mustFail(serde, Arrays.copyOf(valid, len));
                    Reason expected = len == 0 ? Reason.EMPTY : len < 10 ? Reason.BAD_HEADER : null;
                    if (expected != null) {
                        assertThat(e.reason()).as("truncated to %d", len).isEqualTo(expected);
                    } else {
                        // a cut inside a string or bytes leaves a length larger than what follows
                        assertThat(e.reason()).as("truncated to %d", len).isIn(Reason.TRUNCATED, Reason.FORGED_LENGTH);
                    }
                }
                // every bit flip
                for (int i = 0; i < valid.length; i++) {
                    for (int bit = 0; bit < 8; bit++) {
                        byte[] flipped = valid.clone();
                        flipped[i] ^= (byte) (1 << bit);
                        if (i < 2) {
                            assertThat(outcomes.mustFail(serde, flipped).reason()).isEqualTo(Reason.BAD_HEADER);
                        } else if (i < 10) {
                            assertThat(outcomes.mustFail(serde, flipped).reason()).isEqualTo(Reason.UNKNOWN_SCHEMA);
                        } else {
                            outcomes.feed(serde, flipped);
                        }
                    }
                }
                // random byte replacements, several at once, in the payload
                for (int n = 0; n < 300; n++) {
                    byte[] mutated = valid.clone();
                    for (int k = 1 + rnd.nextInt(4); k > 0; k--) {
                        mutated[10 + rnd.nextInt(valid.length - 10)] = (byte) rnd.nextInt(256);
                    }
                    outcomes.feed(serde, mutated);
                }
                // a byte inserted or deleted somewhere in the payload
                for (int n = 0; n < 100; n++) {
                    int at = 10 + rnd.nextInt(valid.length - 10);
                    byte[] shifted = n % 2 == 0
                            ? concat(Arrays.copyOf(valid, at), new byte[] {(byte) rnd.nextInt(256)}, Arrays.copyOfRange(valid, at, valid.length))
                            : concat(Arrays.copyOf(valid, at), Arrays.copyOfRange(valid, at + 1, valid.length));
                    outcomes.feed(serde, shifted);
                }
            }
            // random garbage, and random payloads behind a valid header of each type
            List<AvroEventSerde<SpecificRecord>> serdesByType = samples.stream().map(s -> EmbeddedSerdeTest.serdeFor(serdes, s)).toList();
            for (int n = 0; n < 6_000; n++) {
                AvroEventSerde<SpecificRecord> serde = serdesByType.get(rnd.nextInt(serdesByType.size()));
                byte[] garbage = new byte[rnd.nextInt(300)];
                rnd.nextBytes(garbage);
                outcomes.feed(serde, garbage);
                Schema schema = EventSchemas.schemaOf(serde.type());
                outcomes.feed(serde, EmbeddedSerdeTest.frame(schema, garbage));
            }
        });
        // then the loop really ran, hit the interesting paths, and decoded some mutants
        assertThat(outcomes.total).isGreaterThanOrEqualTo(20_000);
        assertThat(outcomes.byReason.keySet()).contains(Reason.EMPTY, Reason.BAD_HEADER, Reason.UNKNOWN_SCHEMA, Reason.TRUNCATED,
                Reason.FORGED_LENGTH, Reason.MALFORMED, Reason.TRAILING_BYTES);
        assertThat(outcomes.decoded).isPositive();
        assertThat(outcomes.maxAllocated).as("bytes allocated by one decode").isLessThan(MAX_ALLOCATION_PER_INPUT);
    }

    @Test
    void zeroLengthIsEmpty() {
        assertThat(reasonOf(serdes.requestEvent(), new byte[0])).isEqualTo(Reason.EMPTY);
    }

    @Test
    void wrongMagicIsBadHeaderAndAConfluentRecordGetsAHint() {
        // given a Confluent-framed record (magic 0, schema id 1) sent to the embedded serde
        byte[] confluent = concat(new byte[] {0, 0, 0, 0, 1}, payload(w -> w.string("r").string("e").string("s").varLong(1).varLong(12).varLong(3)));
        // when
        EventDecodingException e = decodeFailure(serdes.requestEvent(), confluent);
        // then
        assertThat(e.reason()).isEqualTo(Reason.BAD_HEADER);
        assertThat(e.getMessage()).contains("serde.mode registry");
        assertThat(reasonOf(serdes.requestEvent(), new byte[] {(byte) 0xC3, 0x01, 1, 2})).isEqualTo(Reason.BAD_HEADER);
    }

    @Test
    void unknownFingerprintIsUnknownSchema() {
        // given a well-formed header whose fingerprint no schema has
        byte[] bytes = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN).put((byte) 0xC3).put((byte) 1)
                .putLong(0x1234_5678_9abc_def0L).put((byte) 2).put((byte) 0x61).array();
        // when
        EventDecodingException e = decodeFailure(serdes.requestEvent(), bytes);
        // then
        assertThat(e.reason()).isEqualTo(Reason.UNKNOWN_SCHEMA);
        assertThat(e.getMessage()).contains("123456789abcdef0");
    }

    @Test
    void anotherTypesFingerprintIsUnknownSchema() {
        // given a valid Decision (and the durable internal state, whose fingerprint the catalog knows) on a RequestEvent topic
        byte[] decision = serdes.decision().serialize(TOPIC, Samples.decisions().get(0));
        byte[] state = EmbeddedSerdeTest.frame(io.orbitkv.pd.state.DeciderState.getClassSchema(), new byte[] {2, 0x61});
        // when / then
        EventDecodingException e = decodeFailure(serdes.requestEvent(), decision);
        assertThat(e.reason()).isEqualTo(Reason.UNKNOWN_SCHEMA);
        assertThat(e.getMessage()).contains("Decision", "RequestEvent");
        assertThat(reasonOf(serdes.requestEvent(), state)).isEqualTo(Reason.UNKNOWN_SCHEMA);
    }

    @Test
    void recordThatEndsBeforeAFieldIsTruncatedAndNamesTheField() {
        // given a PrefillCompleted whose one BlockRun has its start but not its count
        byte[] bytes = frame(RequestEvent.getClassSchema(), payload(w -> envelope(w, 1)
                .string("prefill-0").varLong(7).varLong(1).varLong(40)));
        // when
        EventDecodingException e = decodeFailure(serdes.requestEvent(), bytes);
        // then
        assertThat(e.reason()).isEqualTo(Reason.TRUNCATED);
        assertThat(e.getMessage()).contains("RequestEvent.payload[PrefillCompleted].source_blocks[].count");
    }

    @Test
    void stringLengthOf2To31IsForgedAndNamesTheField() {
        // given request_id claiming 2^31 bytes in a 20-byte record: Avro alone would allocate 2 GiB
        byte[] bytes = frame(RequestEvent.getClassSchema(), payload(w -> w.varLong(1L << 31).raw("abcdefgh")));
        // when
        EventDecodingException e = decodeFailure(serdes.requestEvent(), bytes);
        // then
        assertThat(e.reason()).isEqualTo(Reason.FORGED_LENGTH);
        assertThat(e.getMessage()).contains("RequestEvent.request_id", "2147483648");
    }

    @Test
    void negativeStringLengthIsForged() {
        byte[] bytes = frame(RequestEvent.getClassSchema(), payload(w -> w.varLong(-5).raw("abcdefgh")));
        EventDecodingException e = decodeFailure(serdes.requestEvent(), bytes);
        assertThat(e.reason()).isEqualTo(Reason.FORGED_LENGTH);
        assertThat(e.getMessage()).contains("request_id", "negative");
    }

    @Test
    void arrayCountOf2To40IsForgedAndNamesTheField() {
        // given PrefillCompleted.source_blocks claiming 2^40 runs
        byte[] bytes = frame(RequestEvent.getClassSchema(), payload(w -> envelope(w, 1)
                .string("prefill-0").varLong(7).varLong(1L << 40).varLong(0).varLong(2)));
        // when
        EventDecodingException e = decodeFailure(serdes.requestEvent(), bytes);
        // then
        assertThat(e.reason()).isEqualTo(Reason.FORGED_LENGTH);
        assertThat(e.getMessage()).contains("source_blocks");
    }

    @Test
    void countWithinTheLimitButAboveTheBytesLeftIsForged() {
        // given 1000 runs claimed where 3 bytes follow (under the 2^20 item cap, so the byte check must catch it)
        byte[] bytes = frame(Decision.getClassSchema(), payload(w -> w.string("r").string("d").varLong(0).varLong(1).varLong(0)
                .varLong(2).string("r/o/0").varLong(0).varLong(1000).varLong(1).varLong(2)));
        EventDecodingException e = decodeFailure(serdes.decision(), bytes);
        assertThat(e.reason()).isEqualTo(Reason.FORGED_LENGTH);
        assertThat(e.getMessage()).contains("Decision.payload[ReleaseDecided].blocks");
    }

    @Test
    void negativeBlockCountWithAHugeByteSizeIsForged() {
        // given a block-encoded array: count -1 followed by a byte size of 2^40
        byte[] bytes = frame(RequestEvent.getClassSchema(), payload(w -> envelope(w, 1)
                .string("prefill-0").varLong(7).varLong(-1).varLong(1L << 40).varLong(0).varLong(2)));
        EventDecodingException e = decodeFailure(serdes.requestEvent(), bytes);
        assertThat(e.reason()).isEqualTo(Reason.FORGED_LENGTH);
        assertThat(e.getMessage()).contains("source_blocks", "block size");
    }

    @Test
    void forgedMapCountAndBytesLengthNameTheirFields() {
        // given an EngineRegistration whose first endpoint's attributes map claims 2^40 entries
        byte[] registration = frame(EngineRegistration.getClassSchema(), payload(w -> w.string("prefill-0").varLong(1).varLong(7)
                .string("m").string("http://x").varLong(1).string("tcp").string("h:1").varLong(1L << 40).string("k")));
        // and a TransferOrder whose auth_token claims 2^31 bytes
        byte[] order = frame(Decision.getClassSchema(), payload(w -> {
            w.string("r").string("d").varLong(0).varLong(1).varLong(0).varLong(0)
                    .string("o").varLong(0).string("p").varLong(1).string("d").varLong(1)
                    .varLong(0).varLong(0);
            layout(w).string("lease").varLong(1).varLong(1L << 31).raw("tok");
        }));
        // when / then
        EventDecodingException e = decodeFailure(serdes.engineRegistration(), registration);
        assertThat(e.reason()).isEqualTo(Reason.FORGED_LENGTH);
        assertThat(e.getMessage()).contains("EngineRegistration.endpoints[].attributes");
        EventDecodingException t = decodeFailure(serdes.decision(), order);
        assertThat(t.reason()).isEqualTo(Reason.FORGED_LENGTH);
        assertThat(t.getMessage()).contains("Decision.payload[TransferOrder].auth_token");
    }

    @Test
    void badUnionBranchIsMalformedAndNamesTheUnion() {
        byte[] bytes = frame(RequestEvent.getClassSchema(), payload(w -> envelope(w, 99)));
        EventDecodingException e = decodeFailure(serdes.requestEvent(), bytes);
        assertThat(e.reason()).isEqualTo(Reason.MALFORMED);
        assertThat(e.getMessage()).contains("RequestEvent.payload", "union branch 99");
    }

    @Test
    void bytesAfterACompleteRecordAreTrailing() {
        byte[] valid = serdes.deadLetter().serialize(TOPIC, Samples.deadLetter());
        EventDecodingException e = decodeFailure(serdes.deadLetter(), concat(valid, new byte[] {0}));
        assertThat(e.reason()).isEqualTo(Reason.TRAILING_BYTES);
    }

    @Test
    void inputOverTheConfiguredMaximumIsOversizedBeforeAnyParsing() {
        // given a serde limited to 1 KiB, and the default one (4 MiB)
        EventSerdes small = EventSerdes.create(new SerdeConfig(SerdeMode.EMBEDDED, null, false, 1024, Duration.ofSeconds(1)));
        byte[] justOver = new byte[1025];
        justOver[0] = (byte) 0xC3;
        justOver[1] = 1;
        byte[] overDefault = new byte[SerdeConfig.DEFAULT_MAX_RECORD_BYTES + 1];
        // when / then
        assertThat(reasonOf(small.requestEvent(), justOver)).isEqualTo(Reason.OVERSIZED);
        assertThat(reasonOf(serdes.requestEvent(), overDefault)).isEqualTo(Reason.OVERSIZED);
        // and a record at the limit is not refused for its size
        assertThat(reasonOf(small.requestEvent(), Arrays.copyOf(justOver, 1024))).isNotEqualTo(Reason.OVERSIZED);
    }

    @Test
    void serializingARecordOverTheMaximumIsRefused() {
        EventSerdes small = EventSerdes.create(new SerdeConfig(SerdeMode.EMBEDDED, null, false, 64, Duration.ofSeconds(1)));
        DeadLetter big = Samples.deadLetter();
        big.setReason("x".repeat(100));
        assertThatThrownBy(() -> small.deadLetter().serialize(TOPIC, big)).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("serde.max.record.bytes=64");
    }

    // ---- helpers ----

    /** Counts outcomes; anything but a record or an EventDecodingException is a failure with the input in hex. */
    private final class Outcomes {
        long total;
        long decoded;
        long maxAllocated;
        final Map<Reason, Integer> byReason = new EnumMap<>(Reason.class);

        void feed(AvroEventSerde<SpecificRecord> serde, byte[] input) {
            decode(serde, input);
        }

        EventDecodingException mustFail(AvroEventSerde<SpecificRecord> serde, byte[] input) {
            EventDecodingException e = decode(serde, input);
            assertThat(e).as("input decoded but must not: %s", HexFormat.of().formatHex(input)).isNotNull();
            return e;
        }

        private EventDecodingException decode(AvroEventSerde<SpecificRecord> serde, byte[] input) {
            total++;
            long before = threads.getCurrentThreadAllocatedBytes();
            SpecificRecord record;
            EventDecodingException failure = null;
            try {
                record = serde.deserialize(TOPIC, input);
            } catch (EventDecodingException e) {
                record = null;
                failure = e;
            } catch (Throwable t) {
                throw new AssertionError(serde.type().getSimpleName() + " input " + HexFormat.of().formatHex(input)
                        + " threw " + t + " instead of EventDecodingException", t);
            }
            maxAllocated = Math.max(maxAllocated, threads.getCurrentThreadAllocatedBytes() - before);
            if (failure != null) {
                assertThat(failure.getMessage()).contains(TOPIC, failure.reason().name());
                byReason.merge(failure.reason(), 1, Integer::sum);
                return failure;
            }
            // a mutant that decodes is a real record: it must survive its own round trip
            decoded++;
            assertThat(serde.deserialize(TOPIC, serde.serialize(TOPIC, record))).isEqualTo(record);
            return null;
        }
    }

    private static <T extends SpecificRecord> EventDecodingException decodeFailure(AvroEventSerde<T> serde, byte[] bytes) {
        EventDecodingException e = catchThrowableOfType(EventDecodingException.class, () -> serde.deserialize(TOPIC, bytes));
        assertThat(e).as("decoding must fail").isNotNull();
        return e;
    }

    private static <T extends SpecificRecord> Reason reasonOf(AvroEventSerde<T> serde, byte[] bytes) {
        return decodeFailure(serde, bytes).reason();
    }

    private static byte[] frame(Schema writer, byte[] payload) {
        return EmbeddedSerdeTest.frame(writer, payload);
    }

    private static byte[] concat(byte[]... parts) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        for (byte[] p : parts) {
            out.writeBytes(p);
        }
        return out.toByteArray();
    }

    /** RequestEvent envelope fields, then the union index of the payload branch. */
    private static Avro envelope(Avro w, int branch) {
        return w.string("req-1").string("req-1/0").string("engine:prefill-0").varLong(1_733_000_000_000L).varLong(branch);
    }

    /** A valid KvLayout (10 fields). */
    private static Avro layout(Avro w) {
        return w.varLong(32).varLong(1).varLong(16).varLong(8).varLong(128).varLong(2).varLong(0).varLong(1).varLong(4096).varLong(4096);
    }

    private static byte[] payload(java.util.function.Consumer<Avro> body) {
        Avro w = new Avro();
        body.accept(w);
        return w.out.toByteArray();
    }

    /** Hand-written Avro binary, so the tests can say exactly which length is forged. */
    private static final class Avro {
        final ByteArrayOutputStream out = new ByteArrayOutputStream();

        Avro varLong(long v) {
            long z = (v << 1) ^ (v >> 63);
            while ((z & ~0x7FL) != 0) {
                out.write((int) ((z & 0x7F) | 0x80));
                z >>>= 7;
            }
            out.write((int) z);
            return this;
        }

        Avro string(String s) {
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            varLong(b.length);
            out.writeBytes(b);
            return this;
        }

        Avro raw(String s) {
            out.writeBytes(s.getBytes(StandardCharsets.UTF_8));
            return this;
        }
    }
}
