package io.orbitkv.pd.engine.sim.model;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.engine.sim.model.StepScheduler.Arrival;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Limits;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Outcome;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Request;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Role;
import io.orbitkv.pd.engine.sim.model.StepScheduler.SimResult;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * Every calibration point of docs/engine-model.md ("Calibration"), re-run through the scheduler and the preset's cost
 * model: the model reproduces each published figure within ±15 % (the bar). A change of a preset's costs that
 * breaks one fails here, naming the point.
 */
class CalibrationTest {

    private static final CostModel B8 = CostModels.LLAMA_8B_H100;
    private static final Limits VLLM = new Limits(8192, 256, 16, 1 << 20);

    /** Every point checked, as a table row (printed after the class: docs/engine-model.md quotes it). */
    private static final List<String> ROWS = java.util.Collections.synchronizedList(new ArrayList<>());

    @org.junit.jupiter.api.AfterAll
    static void printTable() {
        System.out.println("| point | published (ms) | model (ms) | error |\n| --- | ---: | ---: | ---: |");
        ROWS.stream().sorted().forEach(System.out::println);
    }

    private static void within15(String point, double modelMs, double publishedMs) {
        ROWS.add(String.format(java.util.Locale.ROOT, "| %s | %.2f | %.2f | %+.1f %% |", point, publishedMs, modelMs,
                (modelMs / publishedMs - 1) * 100));
        assertThat(modelMs).as("%s: model %.2f ms against published %.2f ms", point, modelMs, publishedMs)
                .isBetween(publishedMs * 0.85, publishedMs * 1.15);
    }

    /** The one decode step of a batch of {@code n} sequences whose contexts hold {@code context} tokens each (ms). */
    private static double decodeStepMs(CostModel c, int n, int context) {
        StepScheduler s = new StepScheduler(Role.DECODE, VLLM, c);
        for (int i = 0; i < n; i++) {
            s.add(new Request("r" + i, context - 1, 2, 0)); // prompt + the first token = context
        }
        return s.plan().durationPs() / 1e9;
    }

    @Test
    void vllmBatchOneItlAgainstContext() {
        // vLLM blog "The State of FP8 KV-Cache" (2026-04-22), Llama-3.1-8B, 1×H100, BF16 KV: ITL = 4.37e-5 ms × input + 6.44 ms.
        for (int input : new int[] {1024, 8192, 32_768, 125_000}) {
            within15("vLLM ITL fit at " + input, decodeStepMs(B8, 1, input + 64), 4.37e-5 * input + 6.44);
        }
    }

    @Test
    void sglangDecodeBatch1And128() {
        // sglang #1008 (bench_latency, Llama-3-8B, input 128, output 8): decode median 7.37 ms at bs 1, 11.84 ms at bs 128.
        within15("SGLang decode bs 1", decodeStepMs(B8, 1, 132), 7.37);
        within15("SGLang decode bs 128", decodeStepMs(B8, 128, 132), 11.84);
        // sglang #2134 (bench_one_batch, Llama-3.1-8B, bs 128, 128 in, 128 out): decode ~10.2 ms a step.
        within15("SGLang decode bs 128, 128 + 64 context", decodeStepMs(B8, 128, 192), 10.2);
    }

    @Test
    void sglangPrefillOf128Times128Tokens() {
        // sglang #2134: prefill latency 0.373 s for 128 prompts of 128 tokens, in one forward pass.
        StepScheduler s = new StepScheduler(Role.PREFILL, new Limits(1 << 20, 1024, 16, 1 << 20), B8);
        for (int i = 0; i < 128; i++) {
            s.add(new Request("r" + i, 128, 1, 0));
        }
        within15("SGLang prefill 128 × 128", s.plan().durationPs() / 1e9, 373.0);
    }

    @Test
    void vllmCiLatencyBatch8() {
        // vLLM CI performance benchmark (H200): latency_llama8B_tp1, batch 8, 32 in, 128 out: 833.4 ms; the 70B on 4 GPUs: 2077.5 ms.
        within15("vLLM CI 8B batch 8", batchLatencyMs(B8, 8, 32, 128), 833.4);
        within15("vLLM CI 70B TP4 batch 8", batchLatencyMs(CostModels.LLAMA_70B_TP4, 8, 32, 128), 2077.5);
    }

    private static double batchLatencyMs(CostModel c, int batch, int in, int out) {
        List<Arrival> a = new ArrayList<>();
        for (int i = 0; i < batch; i++) {
            a.add(new Arrival(0, new Request("r" + i, in, out, 0)));
        }
        SimResult r = StepScheduler.simulate(Role.BOTH, VLLM, c, a);
        return r.events().getLast().atUs() / 1e3;
    }

    @Test
    void vllmConcurrency8LongPrompts() {
        // vLLM blog (2026-04-22) Table 4, BF16 KV: 150 requests at concurrency 8, ~20k in / ~2k out (±15 %):
        // median TTFT 763.6 ms, median ITL 15.18 ms.
        Random rnd = new Random(42);
        StepScheduler s = new StepScheduler(Role.BOTH, VLLM, B8);
        Map<String, Long> sent = new HashMap<>();
        Map<String, Long> last = new HashMap<>();
        List<Long> ttft = new ArrayList<>();
        List<Long> itl = new ArrayList<>();
        long now = 0;
        int started = 0;
        int inFlight = 0;
        while (started < 150 || inFlight > 0) {
            while (inFlight < 8 && started < 150) {
                String id = "r" + started++;
                s.add(new Request(id, (int) (20_000 * (0.85 + 0.3 * rnd.nextDouble())), (int) (2_000 * (0.85 + 0.3 * rnd.nextDouble())), 0));
                sent.put(id, now);
                inFlight++;
            }
            StepScheduler.Plan p = s.plan();
            now += p.durationPs() / 1_000_000L;
            for (Outcome o : s.complete(p)) {
                if (o.kind() == Outcome.Kind.FIRST_TOKEN) {
                    ttft.add(now - sent.get(o.id()));
                } else {
                    itl.add(now - last.get(o.id()));
                }
                last.put(o.id(), now);
                if (o.kind() == Outcome.Kind.FINISHED) {
                    inFlight--;
                }
            }
        }
        within15("vLLM c=8 ~20k/2k median TTFT", median(ttft) / 1e3, 763.6);
        within15("vLLM c=8 ~20k/2k median ITL", median(itl) / 1e3, 15.18);
    }

    private static double median(List<Long> xs) {
        List<Long> s = new ArrayList<>(xs);
        s.sort(null);
        return s.get(s.size() / 2);
    }
}
