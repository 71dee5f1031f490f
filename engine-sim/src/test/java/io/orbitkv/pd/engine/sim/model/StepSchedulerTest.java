package io.orbitkv.pd.engine.sim.model;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.engine.sim.model.StepScheduler.Arrival;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Chunk;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Limits;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Outcome;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Request;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Role;
import io.orbitkv.pd.engine.sim.model.StepScheduler.SimResult;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The scheduler's rules, each on a case small enough to work out by hand (docs/engine-model.md, "The scheduler"). */
class StepSchedulerTest {

    /** 1 µs fixed, 10 ns a prompt token, 1 ns a pair, 100 ns a decoding sequence, 1 ns a KV token read. */
    static final CostModel COSTS = new CostModel(1_000_000, 10_000, 1_000, 100_000, 1_000);

    @Test
    void decodesGoFirstAndPrefillChunksFillTheTokenBudget() {
        StepScheduler s = new StepScheduler(Role.BOTH, new Limits(8, 4, 4, 100), COSTS);
        s.add(new Request("a", 3, 3, 0));
        s.add(new Request("b", 10, 2, 0));
        StepScheduler.Plan p1 = s.plan();
        // a's whole prompt (3), then b's first 5 tokens: 8 in all
        assertThat(p1.prefills()).containsExactly(new Chunk("a", 0, 3), new Chunk("b", 0, 5));
        assertThat(p1.decodes()).isEmpty();
        // 1 µs + 8 tokens × 10 ns + pairs (a: 6, b: 15) × 1 ns = 1,101 ns
        assertThat(p1.durationPs()).isEqualTo(1_000_000 + 8 * 10_000 + 21 * 1_000);
        assertThat(s.complete(p1)).containsExactly(new Outcome("a", Outcome.Kind.FIRST_TOKEN));
        StepScheduler.Plan p2 = s.plan();
        // a decodes (context 3 + 1), b's remaining 5 tokens start at 5: pairs 5·5 + 15 = 40
        assertThat(p2.decodes()).containsExactly("a");
        assertThat(p2.prefills()).containsExactly(new Chunk("b", 5, 5));
        assertThat(p2.decodeContextTokens()).isEqualTo(4);
        assertThat(p2.durationPs()).isEqualTo(1_000_000 + 5 * 10_000 + 40 * 1_000 + 100_000 + 4 * 1_000);
        assertThat(s.complete(p2)).containsExactly(new Outcome("a", Outcome.Kind.TOKEN), new Outcome("b", Outcome.Kind.FIRST_TOKEN));
        StepScheduler.Plan p3 = s.plan();
        assertThat(p3.decodes()).containsExactly("a", "b");
        assertThat(s.complete(p3)).containsExactly(new Outcome("a", Outcome.Kind.FINISHED), new Outcome("b", Outcome.Kind.FINISHED));
        assertThat(s.plan()).isNull();
        assertThat(s.blocksUsed()).isZero();
    }

    @Test
    void aRequestThatDoesNotFitWaitsAndSoDoesEveryOneBehindIt() {
        // 4-token blocks, 6 blocks: a needs (8 + 8) / 4 = 4, b 4 (does not fit beside a), c 1 (would fit, but FCFS)
        StepScheduler s = new StepScheduler(Role.BOTH, new Limits(64, 8, 4, 6), COSTS);
        s.add(new Request("a", 8, 8, 0));
        s.add(new Request("b", 8, 8, 0));
        s.add(new Request("c", 2, 2, 0));
        StepScheduler.Plan p = s.plan();
        assertThat(p.prefills()).extracting(Chunk::id).containsExactly("a");
        s.complete(p);
        assertThat(s.waitingCount()).isEqualTo(2);
        assertThat(s.blocksUsed()).isEqualTo(4);
        for (int i = 0; i < 7; i++) {
            s.complete(s.plan()); // a decodes its 7 other tokens; b and c wait
        }
        assertThat(s.blocksUsed()).isZero();
        assertThat(s.plan().prefills()).extracting(Chunk::id).containsExactly("b", "c");
    }

    @Test
    void theRunningSetIsCappedAndCachedTokensCostNothing() {
        StepScheduler s = new StepScheduler(Role.BOTH, new Limits(64, 1, 16, 100), COSTS);
        s.add(new Request("a", 40, 2, 32)); // 32 of 40 cached: 8 tokens to compute, starting at 32
        s.add(new Request("b", 4, 2, 0));
        StepScheduler.Plan p = s.plan();
        assertThat(p.prefills()).containsExactly(new Chunk("a", 32, 8));
        assertThat(p.durationPs()).isEqualTo(1_000_000 + 8 * 10_000 + CostModel.pairs(32, 8) * 1_000);
    }

    @Test
    void aPrefillEngineLetsASequenceGoAtItsFirstTokenAndADecodeEngineStartsFromTheSecond() {
        List<Arrival> arrivals = List.of(new Arrival(0, new Request("a", 4, 3, 0)), new Arrival(0, new Request("b", 4, 1, 0)));
        SimResult prefill = StepScheduler.simulate(Role.PREFILL, new Limits(64, 8, 4, 100), COSTS, arrivals);
        assertThat(prefill.steps()).hasSize(1);
        assertThat(prefill.events()).extracting(e -> e.id() + ":" + e.kind()).containsExactly("a:FIRST_TOKEN", "a:FINISHED", "b:FIRST_TOKEN",
                "b:FINISHED");
        SimResult decode = StepScheduler.simulate(Role.DECODE, new Limits(64, 8, 4, 100), COSTS, arrivals);
        // b asked for one token, which the prefill sampled: nothing to decode; a decodes tokens 2 and 3
        assertThat(decode.steps()).hasSize(2);
        assertThat(decode.steps().get(0).decodes()).containsExactly("a");
        assertThat(decode.events()).extracting(e -> e.id() + ":" + e.kind()).containsExactly("a:TOKEN", "a:FINISHED");
    }

    @Test
    void inVirtualTimeAStepStartsWhenTheLastEndedOrAtTheNextArrival() {
        List<Arrival> arrivals = List.of(new Arrival(0, new Request("a", 4, 2, 0)), new Arrival(50, new Request("b", 4, 2, 0)));
        SimResult r = StepScheduler.simulate(Role.BOTH, new Limits(64, 8, 4, 100), new CostModel(10_000_000, 0, 0, 0, 0), arrivals);
        // 10 µs a step: a's prefill at 0, its decode at 10, idle until b at 50
        assertThat(r.steps()).extracting(StepScheduler.SimStep::startUs).containsExactly(0L, 10L, 50L, 60L);
        assertThat(r.events()).extracting(StepScheduler.SimEvent::atUs).containsExactly(10L, 20L, 60L, 70L);
    }

    @Test
    void anEngineThatServesBothRunsEachRequestForItsOwnPart() {
        StepScheduler s = new StepScheduler(Role.BOTH, new Limits(100, 8, 4, 100), COSTS);
        s.add(new Request("p", 4, 5, 0), Role.PREFILL); // a P/D prefill: 1 block (its output is not decoded here)
        s.add(new Request("d", 8, 3, 0), Role.DECODE); // a transferred KV: decodes from its second token, 3 blocks
        s.add(new Request("c", 4, 2, 0)); // colocated (the engine's role): 2 blocks
        StepScheduler.Plan p = s.plan();
        assertThat(p.decodes()).containsExactly("d");
        assertThat(p.prefills()).containsExactly(new Chunk("p", 0, 4), new Chunk("c", 0, 4));
        assertThat(s.complete(p)).containsExactly(new Outcome("p", Outcome.Kind.FIRST_TOKEN), new Outcome("p", Outcome.Kind.FINISHED),
                new Outcome("d", Outcome.Kind.TOKEN), new Outcome("c", Outcome.Kind.FIRST_TOKEN));
        assertThat(s.blocksUsed()).as("d: 3 blocks, c: 2; p left").isEqualTo(5);
        assertThat(s.add(new Request("one", 8, 1, 0), Role.DECODE)).as("nothing left to decode").isFalse();
    }

    @Test
    void anAbortedSequenceLeavesAndFreesItsBlocks() {
        StepScheduler s = new StepScheduler(Role.BOTH, new Limits(100, 8, 4, 100), COSTS);
        s.add(new Request("a", 4, 10, 0));
        s.add(new Request("b", 4, 10, 0));
        s.complete(s.plan());
        assertThat(s.blocksUsed()).isEqualTo(8);
        assertThat(s.abort("a")).isTrue();
        assertThat(s.blocksUsed()).isEqualTo(4);
        s.add(new Request("w", 4, 10, 0));
        assertThat(s.abort("w")).as("a waiting one too").isTrue();
        assertThat(s.abort("a")).isFalse();
        assertThat(s.plan().decodes()).containsExactly("b");
        assertThat(s.waitingCount()).isZero();
    }
}
