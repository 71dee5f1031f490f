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
}
