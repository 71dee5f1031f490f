package io.orbitkv.pd.transport.tcp.internal;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvTestData;
import io.orbitkv.pd.kv.TransferPlan;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class PlanCursorTest {

    @Test
    void stripesCutAnywhereStillCoverEveryByteOnce() {
        KvGeometry g = KvTestData.pages(1000, 50, 3);
        TransferPlan p = TransferPlan.build(g, List.of(run(0, 7), run(10, 5)), g, List.of(run(30, 2), run(1, 10)));
        long total = p.totalBytes();
        for (int stripes = 1; stripes <= 7; stripes++) {
            List<long[]> pieces = new ArrayList<>();
            for (int s = 0; s < stripes; s++) {
                PlanCursor c = new PlanCursor(p, total * s / stripes, total * (s + 1) / stripes);
                while (c.hasMore()) {
                    long len = c.take(777);
                    assertThat(len).isBetween(1L, 777L);
                    pieces.add(new long[] {c.region(), c.sourceOffset(), c.destOffset(), len});
                }
            }
            // Re-assemble: consecutive pieces of one span continue where the previous one ended.
            long sum = 0;
            for (long[] piece : pieces) {
                sum += piece[3];
            }
            assertThat(sum).isEqualTo(total);
            int k = 0;
            for (int span = 0; span < p.spans(); span++) {
                long off = 0;
                while (off < p.spanLength(span)) {
                    long[] piece = pieces.get(k++);
                    assertThat(piece[0]).isEqualTo(p.spanRegion(span));
                    assertThat(piece[1]).isEqualTo(p.spanSourceOffset(span) + off);
                    assertThat(piece[2]).isEqualTo(p.spanDestOffset(span) + off);
                    off += piece[3];
                }
                assertThat(off).isEqualTo(p.spanLength(span));
            }
            assertThat(k).isEqualTo(pieces.size());
        }
    }
}
