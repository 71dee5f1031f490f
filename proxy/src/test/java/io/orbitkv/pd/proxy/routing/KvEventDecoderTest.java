package io.orbitkv.pd.proxy.routing;

import static io.orbitkv.pd.proxy.routing.KvEvents.ev;
import static io.orbitkv.pd.proxy.routing.KvEvents.removed;
import static io.orbitkv.pd.proxy.routing.KvEvents.stored;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.events.AllBlocksCleared;
import io.orbitkv.pd.events.BlockRemoved;
import io.orbitkv.pd.events.BlockStored;
import io.orbitkv.pd.events.KvCacheEvent;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.EventSerdes;
import org.junit.jupiter.api.Test;

/** The index's decoder reads what the index keys by and skips the token ids; bad bytes fail as the serde's do. */
class KvEventDecoderTest {

    private final EventSerdes serdes = EventSerdes.embedded();
    private final KvEventDecoder decoder = new KvEventDecoder(serdes.kvCacheEvent());

    private KvCacheEvent roundTrip(KvCacheEvent e) {
        return decoder.decode("orbitkv.kv-events", serdes.kvCacheEvent().serializer().serialize("orbitkv.kv-events", e));
    }

    @Test
    void everyPayloadDecodesWithoutItsTokenIds() {
        KvCacheEvent s = roundTrip(ev("p-0", 3, 7, BlockStored.newBuilder(stored(1, 2)).setMedium("GPU").setLoraName("l").build()));
        assertThat(s.getEngineId()).isEqualTo("p-0");
        assertThat(s.getInstanceEpoch()).isEqualTo(3);
        assertThat(s.getSeq()).isEqualTo(7);
        BlockStored b = (BlockStored) s.getPayload();
        assertThat(b.getBlockHashes()).containsExactlyElementsOf(stored(1, 2).getBlockHashes());
        assertThat(b.getBlockSize()).isEqualTo(16);
        assertThat(b.getMedium()).isEqualTo("GPU");
        assertThat(b.getLoraName()).isEqualTo("l");
        assertThat(b.getTokenIds()).isEmpty();
        assertThat(((BlockRemoved) roundTrip(ev("p-0", 3, 8, removed(2))).getPayload()).getBlockHashes()).hasSize(1);
        assertThat(((AllBlocksCleared) roundTrip(ev("p-0", 3, 0, AllBlocksCleared.newBuilder().setReason("reset").build())).getPayload())
                .getReason()).isEqualTo("reset");
        // what the index builds from it is what it builds from the full event
        KvIndex full = new KvIndex();
        KvIndex projected = new KvIndex();
        full.apply(ev("p-0", 3, 1, stored(1, 2, 3)));
        projected.apply(roundTrip(ev("p-0", 3, 1, stored(1, 2, 3))));
        assertThat(projected.matches(java.util.List.of(KvEvents.h(1), KvEvents.h(2), KvEvents.h(3))))
                .isEqualTo(full.matches(java.util.List.of(KvEvents.h(1), KvEvents.h(2), KvEvents.h(3))));
    }

    @Test
    void garbageFailsAsTheSerdeSays() {
        assertThatThrownBy(() -> decoder.decode("orbitkv.kv-events", new byte[] {1, 2, 3})).isInstanceOf(EventDecodingException.class);
        byte[] ok = serdes.kvCacheEvent().serializer().serialize("orbitkv.kv-events", ev("p-0", 1, 1, stored(1)));
        assertThatThrownBy(() -> decoder.decode("orbitkv.kv-events", java.util.Arrays.copyOf(ok, ok.length - 5)))
                .isInstanceOf(EventDecodingException.class);
    }

    /**
     * The one-pass read and the general read agree: on random events of every shape, and on those events' bytes with a
     * byte changed or cut short — wherever the one-pass read returns an event, the general read returns the same one (it
     * never accepts what the general read refuses).
     */
    @Test
    void theOnePassReadAgreesWithTheGeneralReadOnRandomAndDamagedRecords() {
        java.util.Random rnd = new java.util.Random(33);
        var serializer = serdes.kvCacheEvent().serializer();
        int fastReads = 0;
        int agreedRefusals = 0;
        for (int n = 0; n < 3000; n++) {
            byte[] ok = serializer.serialize("orbitkv.kv-events", randomEvent(rnd));
            int start = serdes.kvCacheEvent().payload("orbitkv.kv-events", ok).start();
            assertThat(KvEventDecoder.Wire.read(ok, start)).isEqualTo(decoder.general("orbitkv.kv-events", ok));
            byte[] bad = rnd.nextBoolean() ? java.util.Arrays.copyOf(ok, start + rnd.nextInt(ok.length - start)) : ok.clone();
            if (bad.length == ok.length) {
                int at = start + rnd.nextInt(ok.length - start);
                bad[at] = (byte) rnd.nextInt(256);
            }
            KvCacheEvent fast = KvEventDecoder.Wire.read(bad, start);
            KvCacheEvent general;
            try {
                general = decoder.general("orbitkv.kv-events", bad);
            } catch (EventDecodingException refused) {
                assertThat(fast).as("the one-pass read accepted what the general read refused: %s", refused.getMessage()).isNull();
                agreedRefusals++;
                continue;
            }
            if (fast != null) {
                assertThat(fast).isEqualTo(general);
                fastReads++;
            }
        }
        assertThat(fastReads).isPositive();
        assertThat(agreedRefusals).isPositive();
    }

    private static KvCacheEvent randomEvent(java.util.Random rnd) {
        Object payload = switch (rnd.nextInt(3)) {
            case 0 -> {
                int blocks = rnd.nextInt(5);
                java.util.List<java.nio.ByteBuffer> hashes = new java.util.ArrayList<>();
                java.util.List<Integer> tokens = new java.util.ArrayList<>();
                for (int i = 0; i < blocks; i++) {
                    byte[] h = new byte[rnd.nextInt(3) == 0 ? rnd.nextInt(12) : 8];
                    rnd.nextBytes(h);
                    hashes.add(java.nio.ByteBuffer.wrap(h));
                    for (int t = 0; t < 4; t++) {
                        tokens.add(rnd.nextInt(200_000) - (rnd.nextInt(10) == 0 ? 100_000 : 0));
                    }
                }
                java.util.List<java.util.List<String>> extra = null;
                if (rnd.nextBoolean()) {
                    extra = new java.util.ArrayList<>();
                    for (int i = 0; i < blocks; i++) {
                        extra.add(rnd.nextBoolean() ? null : java.util.List.of("lora-" + rnd.nextInt(9), "mm-" + rnd.nextLong()));
                    }
                }
                yield BlockStored.newBuilder().setBlockHashes(hashes)
                        .setParentBlockHash(rnd.nextBoolean() ? null : java.nio.ByteBuffer.wrap(new byte[] {1, 2, 3, 4, 5, 6, 7, 8}))
                        .setTokenIds(tokens).setBlockSize(4).setLoraId(rnd.nextBoolean() ? null : rnd.nextInt())
                        .setMedium(rnd.nextBoolean() ? null : "GPU").setLoraName(rnd.nextBoolean() ? null : "adapter-é")
                        .setExtraKeys(extra).build();
            }
            case 1 -> BlockRemoved.newBuilder().setBlockHashes(java.util.List.of(java.nio.ByteBuffer.wrap(new byte[] {9, 8, 7, 6, 5, 4, 3, 2})))
                    .setMedium(rnd.nextBoolean() ? null : "CPU").build();
            default -> AllBlocksCleared.newBuilder().setReason("reason-" + rnd.nextInt(100)).build();
        };
        return KvCacheEvent.newBuilder().setEngineId("engine-" + rnd.nextInt(1000)).setInstanceEpoch(rnd.nextLong())
                .setSeq(rnd.nextLong()).setEventTimeMs(rnd.nextLong()).setPayload(payload).build();
    }
}
