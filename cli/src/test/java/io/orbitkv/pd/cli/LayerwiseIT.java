package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;
import static io.orbitkv.pd.cli.Completions.complete;
import static io.orbitkv.pd.cli.Completions.text;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.engine.sim.SimModel;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.harness.PipelineSpec;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * Layer by layer end to end (docs/worker.md, "Layer by layer"): Java engines on their workers' engine API, a prefill whose
 * steps take a GPU's time (the 70B cost model, chunked at 2,048 tokens), reporting its layers as they complete; the prefill
 * worker starts the order issued ahead of the prefill at the first report and pushes each layer's pages while the next
 * computes. Every answer is the model's, and the log audits clean.
 */
@WithKafka
class LayerwiseIT {

    @Test
    void aLongPromptsKvMovesLayerByLayerAndTheAnswerIsTheModels(KraftCluster kafka) throws Exception {
        run(kafka, spec(), "LayerwiseIT-java-");
    }

    /** The same with a Python prefill engine: the library's client reports the progress its simulated steps make. */
    @Test
    void aPythonPrefillEngineReportsItsLayersThroughTheLibrary(KraftCluster kafka) throws Exception {
        run(kafka, spec().withPythonEngines(java.util.Set.of("prefill-0")), "LayerwiseIT-python-");
    }

    /**
     * The same through the vLLM connector on both engines (docs/vllm.md): vLLM's {@code save_kv_layer}, called per layer
     * of each step as its model runner does, is what reports the progress.
     */
    @Test
    void aPrefillThroughTheVllmConnectorReportsItsLayersFromSaveKvLayer(KraftCluster kafka) throws Exception {
        run(kafka, spec(Map.of("engine.vllm-connector", "true")).withPythonEngines(java.util.Set.of("prefill-0", "decode-0")), "LayerwiseIT-vllm-");
    }

    private static PipelineSpec spec() {
        return spec(Map.of());
    }

    private static PipelineSpec spec(Map<String, String> engine) {
        Map<String, String> e = new java.util.HashMap<>(Map.of("engine.cost", "llama-70b-tp4", "engine.max-batched-tokens", "2048"));
        e.putAll(engine);
        return PipelineSpec.defaults().withEngines(1, 1).withModel(ModelPreset.TINY, 1024, 0.2, 4).withEngineApi(true)
                .withExtra(Map.of(), e, Map.of("worker.layerwise.min-bytes", "0"), Map.of());
    }

    private void run(KraftCluster kafka, PipelineSpec spec, String name) throws Exception {
        Path dir = Files.createDirectories(Path.of("target", "it", name + System.nanoTime()).toAbsolutePath());
        SimModel model = new SimModel(42);
        try (Pipeline pipeline = Pipeline.start(spec, dir, System.out::println, kafka.bootstrapServers())) {
            // one warm-up first: a cold engine's first prefill may end before the order issued ahead of it comes
            for (int i = -1; i < 3; i++) {
                // ~6,000 tokens: 3 chunks of 2,048, ~0.4 s of prefill at the 70B cost — longer than the order ahead takes to come
                String prompt = "document " + i + " " + "red green blue yellow ".repeat(1000);
                HttpResponse<String> r = complete(pipeline, prompt, 4);
                assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
                assertThat(text(r.body())).isEqualTo(model.answer(prompt, 4));
            }
            await("the prefill worker pushed the three layer by layer").atMost(Duration.ofSeconds(10)).until(() -> logLines(pipeline.logsDir()) >= 3);
            String config = pipeline.child("decider").config().toString();
            await().atMost(Duration.ofSeconds(30)).untilAsserted(() -> {
                CliRun a = CliRun.of("audit", "--config", config);
                assertThat(a.exit()).as(a.out() + a.err()).isZero();
                assertThat(a.out()).contains("CLEAN");
            });
        }
    }

    /** Pushes the workers' logs say went layer by layer. */
    private static long logLines(Path logs) throws Exception {
        try (Stream<Path> files = Files.list(logs)) {
            long n = 0;
            for (Path f : files.filter(x -> x.getFileName().toString().startsWith("worker")).toList()) {
                n += Files.readAllLines(f).stream().filter(l -> l.contains("pushing layer by layer")).count();
            }
            return n;
        }
    }
}
