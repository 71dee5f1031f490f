package io.orbitkv.pd.bench;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.util.BitSet;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

class CpuAffinityTest {

    @Test
    void parsesAndFormatsCpuListsAsTasksetWritesThem() {
        assertThat(CpuAffinity.parse("0")).isEqualTo(bits(0));
        assertThat(CpuAffinity.parse("0-2")).isEqualTo(bits(0, 1, 2));
        assertThat(CpuAffinity.parse(" 1, 3-4 ,7")).isEqualTo(bits(1, 3, 4, 7));
        assertThat(CpuAffinity.format(bits(0, 1, 2, 5, 7, 8))).isEqualTo("0-2,5,7-8");
        assertThat(CpuAffinity.format(CpuAffinity.parse("3,0-1"))).isEqualTo("0-1,3");
    }

    @Test
    void refusesWhatIsNotACpuListNamingThePart() {
        assertThatThrownBy(() -> CpuAffinity.parse("")).hasMessageContaining("empty");
        assertThatThrownBy(() -> CpuAffinity.parse("0,x")).hasMessageContaining("'x' is not a CPU number");
        assertThatThrownBy(() -> CpuAffinity.parse("3-1")).hasMessageContaining("'3-1'");
        assertThatThrownBy(() -> CpuAffinity.parse("-1")).hasMessageContaining("'-1'");
        assertThatThrownBy(() -> CpuAffinity.parse("1024")).hasMessageContaining("< 1024");
    }

    @Test
    void pinsEveryThreadOfTheProcessAndThreadsStartedLaterInheritIt() throws Exception {
        assumeTrue(CpuAffinity.supported(), CpuAffinity.unavailableReason());
        BitSet before = CpuAffinity.of(0);
        BitSet one = bits(before.nextSetBit(0));
        try {
            int pinned = CpuAffinity.pinProcess(one);
            assertThat(pinned).isGreaterThan(1); // this thread and the JVM's own (GC, JIT, ...)
            for (long tid : CpuAffinity.threads()) {
                try {
                    assertThat(CpuAffinity.of(tid)).as("thread %d", tid).isEqualTo(one);
                } catch (IllegalStateException ended) {
                    // a thread that ended between listing and asking
                }
            }
            BitSet later = CompletableFuture.supplyAsync(() -> CpuAffinity.of(0), r -> Thread.ofPlatform().start(r)).get();
            assertThat(later).isEqualTo(one);
        } finally {
            CpuAffinity.pinProcess(before);
        }
        assertThat(CpuAffinity.of(0)).isEqualTo(before);
    }

    @Test
    void pinsOneThreadAndTheThreadsItStartsWhileOthersStayWhereTheyWere() throws Exception {
        assumeTrue(CpuAffinity.supported(), CpuAffinity.unavailableReason());
        BitSet process = CpuAffinity.of(0);
        BitSet last = bits(process.length() - 1);
        BitSet other = CompletableFuture.supplyAsync(() -> {
            BitSet before = CpuAffinity.pinThread(last);
            try {
                assertThat(before).isEqualTo(process);
                return CompletableFuture.supplyAsync(() -> CpuAffinity.of(0), r -> Thread.ofPlatform().start(r)).join();
            } finally {
                CpuAffinity.pinThread(before);
            }
        }, r -> Thread.ofPlatform().start(r)).get();
        assertThat(other).isEqualTo(last);
        assertThat(CpuAffinity.of(0)).isEqualTo(process);
    }

    @Test
    void refusesCpusThatAreNotOnlineListingThoseThatAre() {
        assumeTrue(CpuAffinity.supported(), CpuAffinity.unavailableReason());
        BitSet before = CpuAffinity.of(0);
        assertThatThrownBy(() -> CpuAffinity.pinProcess(bits(1000)))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("CPUs 1000 are not online here (online: " + CpuAffinity.format(CpuAffinity.online()) + ")");
        assertThatThrownBy(() -> CpuAffinity.pinProcess(new BitSet())).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> CpuAffinity.pinnable("0,1000")).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("CPUs 1000 are not online here");
        assertThat(CpuAffinity.pinnable(CpuAffinity.format(before))).isEqualTo(before);
        assertThat(CpuAffinity.of(0)).isEqualTo(before);
    }

    private static BitSet bits(int... cpus) {
        BitSet b = new BitSet();
        for (int c : cpus) {
            b.set(c);
        }
        return b;
    }
}
