package io.orbitkv.pd.cli;

import io.orbitkv.pd.cli.logtools.LogSourceOptions;
import io.orbitkv.pd.logtools.LogFileException;
import io.orbitkv.pd.logtools.LogSource;
import io.orbitkv.pd.logtools.TopicRole;
import io.orbitkv.pd.logtools.replay.ReplayReport;
import io.orbitkv.pd.logtools.replay.Replayer;
import io.orbitkv.pd.logtools.replay.RoutingWhatIf;
import java.util.EnumSet;
import java.util.concurrent.Callable;
import org.slf4j.LoggerFactory;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/** {@code orbitkv-pd replay}: feeds a recorded log into a fresh decider and diffs its decisions against the recorded ones. */
@Command(name = "replay", mixinStandardHelpOptions = true,
        description = {"Replays the log into a fresh decider and diffs its decisions with the log's.",
                "Feeds the recorded facts (a cluster's topics, or an export file) into a fresh",
                "decider, one partition at a time, and compares its decisions with the recorded",
                "ones, request by request: the proof that a run can be reproduced from its log",
                "alone. Prints the first differing decision of each request with both versions",
                "and the fields that differ; exit 1 on any difference. Pass the decider's",
                "--config: its timeouts, retries and auth.key shape every decision."})
final class ReplayCommand implements Callable<Integer> {

    @Mixin
    LogSourceOptions source;

    @Option(names = "--json", description = "One JSON document instead of text (for tools).")
    boolean json;

    @Option(names = "--max-differences", defaultValue = "20", description = "Requests whose first difference is shown (default: ${DEFAULT-VALUE}).")
    int maxDifferences;

    @Option(names = "--routing", paramLabel = "POLICY", description = "What-if routing instead: replay the recorded requests (their prompts'"
            + " blocks from the routing decisions in the log) through per-engine prefix caches of the recorded sizes under POLICY"
            + " (round_robin, least_in_flight, prefix_aware) and print per engine the hit rate, prompt tokens computed and KV bytes"
            + " moved next to the recorded routing's. Deterministic. See docs/routing.md.")
    String routing;

    @Option(names = "--local-prefill", description = "With --routing prefix_aware: conditional disaggregation (a request is prefilled on its"
            + " decode engine when that engine lacks at most --max-uncached-tokens of the prompt or holds --min-cached-share of it).")
    boolean localPrefill;

    @Option(names = "--max-uncached-tokens", defaultValue = "256", description = "Conditional disaggregation's first rule (default: ${DEFAULT-VALUE}).")
    int maxUncachedTokens;

    @Option(names = "--min-cached-share", defaultValue = "0.7", description = "Conditional disaggregation's second rule (default: ${DEFAULT-VALUE}).")
    double minCachedShare;

    @Override
    public Integer call() {
        if (routing != null) {
            return whatIf();
        }
        quietReplayLogs();
        try (LogSource log = source.open(EnumSet.of(TopicRole.REQUEST_EVENTS, TopicRole.DECISIONS))) {
            ReplayReport report = Replayer.replay(log, source.deciderConfig().policy(), source.topics(), maxDifferences, source.progress(json));
            if (json) {
                report.writeJson(System.out);
            } else {
                report.writeText(System.out);
            }
            System.out.flush();
            return report.identical() ? 0 : 1;
        } catch (LogFileException e) {
            System.err.println("replay: " + e.getMessage());
            return 2;
        } finally {
            source.close();
        }
    }

    private int whatIf() {
        try (LogSource log = source.open(EnumSet.of(TopicRole.ENGINES, TopicRole.ANSWERS))) {
            RoutingWhatIf.Recorded rec = RoutingWhatIf.read(log, source.serdes(), source.progress(false));
            if (rec.requests().isEmpty()) {
                System.err.println("replay: no routing decisions in the log (" + rec.unrouted() + " answers without one: the proxy writes them"
                        + " with proxy.kv-index.enabled=true, for requests whose prompt it could tokenize)");
                return 1;
            }
            RoutingWhatIf.Local local = localPrefill ? new RoutingWhatIf.Local(maxUncachedTokens, minCachedShare) : null;
            RoutingWhatIf.Outcome what = RoutingWhatIf.whatIf(routing, local, rec.requests(), rec.engines());
            RoutingWhatIf.print(System.out, RoutingWhatIf.recorded(rec.requests(), rec.engines()), what, rec.requests().size());
            if (rec.unrouted() > 0) {
                System.out.println(rec.unrouted() + " answers without a routing decision left out (colocated, or the index was off)");
            }
            System.out.flush();
            return 0;
        } catch (LogFileException e) {
            System.err.println("replay: " + e.getMessage());
            return 2;
        } catch (IllegalArgumentException e) {
            System.err.println("replay: " + e.getMessage());
            return 2;
        } finally {
            source.close();
        }
    }

    /** The replayed decider logs what it dead-letters and Streams' test driver its start-up: the report says what matters. */
    private static void quietReplayLogs() {
        for (String name : new String[] {"org.apache.kafka.streams", "io.orbitkv.pd.decider"}) {
            if (LoggerFactory.getLogger(name) instanceof ch.qos.logback.classic.Logger l) {
                l.setLevel(ch.qos.logback.classic.Level.ERROR);
            }
        }
    }
}
