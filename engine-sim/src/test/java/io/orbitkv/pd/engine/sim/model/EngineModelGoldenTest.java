package io.orbitkv.pd.engine.sim.model;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Arrival;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Chunk;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Limits;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Request;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Role;
import io.orbitkv.pd.engine.sim.model.StepScheduler.SimEvent;
import io.orbitkv.pd.engine.sim.model.StepScheduler.SimResult;
import io.orbitkv.pd.engine.sim.model.StepScheduler.SimStep;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * The cross-language golden test of the engine model: the scenarios in {@code engine-model/golden.json} (arrivals, limits,
 * costs) and the steps and token times they must give, here and in the Python engine ({@code
 * python/tests/test_engine_model.py} reads the same file). The file was written by this class once
 * ({@code -Dorbitkv.golden.write=true}) after the hand-worked cases of {@link StepSchedulerTest} passed; any change to the
 * model's rules in either language fails one of the two tests until both agree again and the file is rewritten.
 */
class EngineModelGoldenTest {

    static final Path GOLDEN = Path.of("src/test/resources/engine-model/golden.json");
    private static final ObjectMapper JSON = new ObjectMapper();

    @Test
    void everyScenarioGivesTheRecordedStepsAndTokenTimes() throws Exception {
        if (Boolean.getBoolean("orbitkv.golden.write")) {
            write();
        }
        JsonNode root = JSON.readTree(GOLDEN.toFile());
        assertThat(root.path("scenarios").size()).isGreaterThanOrEqualTo(4);
        for (JsonNode sc : root.path("scenarios")) {
            SimResult r = run(sc);
            // compared as JSON text: the file's numbers read back as ints where this side made longs
            assertThat(steps(r).toString()).as(sc.path("name").asText() + ": steps").isEqualTo(sc.path("steps").toString());
            assertThat(events(r).toString()).as(sc.path("name").asText() + ": events").isEqualTo(sc.path("events").toString());
        }
    }

    static SimResult run(JsonNode sc) {
        JsonNode l = sc.path("limits");
        JsonNode c = sc.path("costs");
        List<Arrival> arrivals = new ArrayList<>();
        for (JsonNode a : sc.path("arrivals")) {
            arrivals.add(new Arrival(a.get(0).asLong(), new Request(a.get(1).asText(), a.get(2).asInt(), a.get(3).asInt(), a.get(4).asInt())));
        }
        return StepScheduler.simulate(Role.valueOf(sc.path("role").asText().toUpperCase(Locale.ROOT)),
                new Limits(l.path("max_batched_tokens").asInt(), l.path("max_num_seqs").asInt(), l.path("block_tokens").asInt(),
                        l.path("num_blocks").asInt()),
                new CostModel(c.path("fixed_ps").asLong(), c.path("prefill_token_ps").asLong(), c.path("prefill_pair_ps").asLong(),
                        c.path("decode_seq_ps").asLong(), c.path("kv_token_ps").asLong()), arrivals);
    }

    /** Each step as [start µs, duration µs, [decoding ids], [[id, start, tokens] ...], running, waiting, blocks used]. */
    static ArrayNode steps(SimResult r) {
        ArrayNode out = JSON.createArrayNode();
        for (SimStep s : r.steps()) {
            ArrayNode st = out.addArray().add(s.startUs()).add(s.durationUs());
            ArrayNode d = st.addArray();
            s.decodes().forEach(d::add);
            ArrayNode p = st.addArray();
            for (Chunk c : s.prefills()) {
                p.addArray().add(c.id()).add(c.start()).add(c.tokens());
            }
            st.add(s.running()).add(s.waiting()).add(s.blocksUsed());
        }
        return out;
    }

    /** Each event as [time µs, id, kind]. */
    static ArrayNode events(SimResult r) {
        ArrayNode out = JSON.createArrayNode();
        for (SimEvent e : r.events()) {
            out.addArray().add(e.atUs()).add(e.id()).add(e.kind().name());
        }
        return out;
    }

    /** Writes the golden file from the scenarios below and this implementation's results. */
    private static void write() throws Exception {
        ObjectNode root = JSON.createObjectNode();
        root.put("about", "Engine model golden scenarios (docs/engine-model.md): arrivals [µs, id, prompt, output, cached], the steps"
                + " [start µs, duration µs, decodes, prefill chunks [id, start, tokens], running, waiting, blocks used] and events"
                + " [µs, id, kind] both the Java and the Python engine model must give. Written by EngineModelGoldenTest.");
        ArrayNode scs = root.putArray("scenarios");
        CostModel small = new CostModel(1_000_000, 10_000, 1_000, 100_000, 1_000);
        List<long[]> mixed = new ArrayList<>();
        Random rnd = new Random(20261205);
        long t = 0;
        for (int i = 0; i < 24; i++) {
            t += rnd.nextInt(40);
            int prompt = 1 + rnd.nextInt(120);
            int output = 1 + rnd.nextInt(12);
            boolean cached = rnd.nextInt(4) == 0 && prompt > 16;
            mixed.add(new long[] {t, i, prompt, output, cached ? 16 : 0});
        }
        for (String role : List.of("both", "prefill", "decode")) {
            scenario(scs, "small " + role, role, 64, 6, 16, 40, small, mixed);
        }
        // The 8b preset's costs (CostModels.LLAMA_8B_H100) on a Poisson-like load with long prompts and chunked prefill.
        CostModel b8 = CostModels.LLAMA_8B_H100;
        List<long[]> load = new ArrayList<>();
        Random r2 = new Random(8);
        long at = 0;
        for (int i = 0; i < 40; i++) {
            at += (long) (-Math.log(1 - r2.nextDouble()) * 150_000);
            int prompt = 128 + r2.nextInt(6000);
            load.add(new long[] {at, i, prompt, 8 + r2.nextInt(56), r2.nextInt(3) == 0 ? (prompt / 2 / 16) * 16 : 0});
        }
        for (String role : List.of("both", "prefill", "decode")) {
            scenario(scs, "8b " + role, role, 8192, 256, 16, 4096, b8, load);
        }
        Files.createDirectories(GOLDEN.getParent());
        Files.writeString(GOLDEN, JSON.writerWithDefaultPrettyPrinter().writeValueAsString(root) + "\n");
    }

    private static void scenario(ArrayNode scs, String name, String role, int budget, int seqs, int block, int blocks, CostModel c,
                                 List<long[]> arrivals) {
        ObjectNode sc = scs.addObject().put("name", name).put("role", role);
        sc.putObject("limits").put("max_batched_tokens", budget).put("max_num_seqs", seqs).put("block_tokens", block).put("num_blocks", blocks);
        sc.putObject("costs").put("fixed_ps", c.fixedPs()).put("prefill_token_ps", c.prefillTokenPs()).put("prefill_pair_ps", c.prefillPairPs())
                .put("decode_seq_ps", c.decodeSeqPs()).put("kv_token_ps", c.kvTokenPs());
        ArrayNode a = sc.putArray("arrivals");
        for (long[] x : arrivals) {
            a.addArray().add(x[0]).add("r" + x[1]).add((int) x[2]).add((int) x[3]).add((int) x[4]);
        }
        SimResult r = run(sc);
        sc.set("steps", steps(r));
        sc.set("events", events(r));
    }
}
