package io.orbitkv.pd.cli;

import io.orbitkv.pd.engine.sim.SimModel;
import io.orbitkv.pd.proxy.OrbitProxy;
import io.orbitkv.pd.proxy.ProxyConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code orbitkv-pd proxy}: runs the OpenAI-compatible P/D proxy. */
@Command(name = "proxy", mixinStandardHelpOptions = true,
        header = "Runs the OpenAI-compatible proxy that routes each request to a prefill and a decode engine.",
        description = {"Runs the OpenAI-compatible proxy: admits each request (RequestAdmitted), picks a prefill and a decode engine",
                "(round_robin or least_in_flight on the decider's GET /engines), dispatches both at once, streams the answer, maps",
                "failures to 502/503/504 and turns a client disconnect into CancelRequested. Keys and defaults: docs/proxy.md."})
final class ProxyCommand implements Callable<Integer> {

    @Option(names = "--config", description = "Properties file (proxy.*, bootstrap.servers, topics.*, serde.*, kafka.*).")
    Path config;

    @Option(names = "--bootstrap", description = "Kafka bootstrap servers (overrides bootstrap.servers).")
    String bootstrap;

    @Option(names = "--port", description = "HTTP port (overrides proxy.http.port; 0 = any).")
    Integer port;

    @Override
    public Integer call() throws Exception {
        ConfigProps props = ConfigProps.loadOrEmpty(config);
        props.override("bootstrap.servers", bootstrap);
        props.override("proxy.http.port", port);
        ProxyConfig cfg = ProxyConfig.from(props);
        String tokenizerFile = props.string("proxy.tokenizer", "");
        boolean special = props.bool("proxy.tokenizer.add-special-tokens", true);
        props.requireAllKeysUsed("docs/proxy.md");
        // A real model's engines: its tokenizer.json; else the engines this launcher runs are the simulator's, and their
        // tokenizer is the one the proxy must count and hash with.
        io.orbitkv.pd.proxy.Tokenizer tokenizer = !tokenizerFile.isBlank() ? io.orbitkv.pd.proxy.HfTokenizer.load(Path.of(tokenizerFile), special)
                : new io.orbitkv.pd.proxy.Tokenizer() {
                    @Override
                    public int countTokens(String prompt) {
                        return SimModel.tokenize(prompt).length;
                    }

                    @Override
                    public int[] tokenIds(String prompt) {
                        return SimModel.tokenize(prompt);
                    }
                };
        OrbitProxy proxy = OrbitProxy.start(cfg, tokenizer);
        io.orbitkv.pd.runtime.ShutdownBound.install("proxy", proxy::close);
        System.out.println("proxy running: url=" + proxy.url() + " routing=" + cfg.routing() + " decider=" + cfg.deciderUrls());
        proxy.awaitClose();
        return 0;
    }
}
