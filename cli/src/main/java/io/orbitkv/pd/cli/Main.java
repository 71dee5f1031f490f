package io.orbitkv.pd.cli;

import io.orbitkv.pd.bench.BenchCommand;
import io.orbitkv.pd.bench.chaos.ChaosCommand;
import io.orbitkv.pd.cli.demo.DemoCommand;
import io.orbitkv.pd.runtime.ParentWatch;
import picocli.CommandLine;
import picocli.CommandLine.Command;

/** The {@code orbitkv-pd} command: one entry point for every component, the demo and the tools. */
@Command(name = "orbitkv-pd", mixinStandardHelpOptions = true, version = "orbitkv-pd 0.1.0",
        description = "OrbitKV P/D: Kafka control plane and KV data plane for prefill/decode disaggregated inference.",
        subcommands = {DemoCommand.class, BrokerCommand.class, TopicsCommand.class, AclsCommand.class, DeciderCommand.class, WorkerCommand.class,
                EngineCommand.class, ProxyCommand.class, TraceCommand.class, AuditCommand.class, ReplayCommand.class, ExportCommand.class,
                DashboardCommand.class, KvEventsBridgeCommand.class, io.orbitkv.pd.cli.k8s.K8sCommand.class, BenchCommand.class, ChaosCommand.class, CommandLine.HelpCommand.class},
        footer = {"", "  ./orbitkv-pd test    runs every test (handled by the launcher script, through Maven)"})
public final class Main implements Runnable {

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    public static void main(String[] args) {
        ParentWatch.install();
        System.exit(commandLine().execute(args));
    }

    /** The command tree, with bad configuration reported as one clear line (exit code 2) instead of a stack trace. */
    static CommandLine commandLine() {
        return new CommandLine(new Main()).setCaseInsensitiveEnumValuesAllowed(true).setExecutionStrategy(Main::refuseUnmatched)
                .setExecutionExceptionHandler((e, cmd, parsed) -> {
            if (e instanceof IllegalArgumentException || e instanceof java.io.UncheckedIOException
                    || e instanceof java.nio.file.NoSuchFileException) {
                cmd.getErr().println(cmd.getColorScheme().errorText(cmd.getCommandName() + ": " + e.getMessage()));
                cmd.getErr().println("Run '" + cmd.getCommandSpec().qualifiedName() + " --help' for the options.");
                return 2;
            }
            throw e;
        });
    }

    /**
     * Picocli lets a help option win over words it did not match ({@code orbitkv-pd nosuch --help} printed the top-level
     * usage and exited 0); an unknown command or argument is an error whatever else is on the line.
     */
    private static int refuseUnmatched(CommandLine.ParseResult parsed) {
        for (CommandLine.ParseResult p = parsed; p != null; p = p.subcommand()) {
            if (!p.unmatched().isEmpty()) {
                throw new CommandLine.UnmatchedArgumentException(p.commandSpec().commandLine(), p.unmatched());
            }
        }
        return new CommandLine.RunLast().execute(parsed);
    }

    @Override
    public void run() {
        spec.commandLine().usage(System.out);
    }
}
