package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.PrintWriter;
import java.io.StringWriter;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** {@code bench decider} refuses bad options before it starts a broker: exit 2 and a line naming the option. */
class BenchCommandTest {

    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
            "--modes|7|--modes: 7 is not a mode; use 0-5",
            "--modes|-1|--modes: -1 is not a mode; use 0-5",
            "--partitions|0|--partitions: must be >= 1, got 0",
            "--rate|0|--rate: must be >= 1 handoff/s, got 0",
            "--warmup|-1|--warmup: must be >= 0 s, got -1",
            "--measure|0|--measure: must be >= 1 s, got 0",
            "--burst|0|--burst: must be >= 1 handoff, got 0",
            "--write-behind|-5|--write-behind: must be 0 (at commits only) or more ms, got -5",
            "--bench-cpus|1-x|--bench-cpus: CPU list '1-x': '1-x' is not a CPU number",
            "--broker-cpus|1000|--broker-cpus: CPUs 1000 are not online here (online: ",
            "--decider-cpus|,|--decider-cpus: CPU list ',': '' is not a CPU number"})
    void badOptionsAreRefusedWithTheirName(String option, String value, String message) {
        StringWriter err = new StringWriter();
        var cli = Main.commandLine();
        cli.setErr(new PrintWriter(err, true));
        int exit = cli.execute("bench", "decider", option, value);
        assertThat(exit).isEqualTo(2);
        assertThat(err.toString()).startsWith(message);
    }

    @org.junit.jupiter.api.Test
    void brokerCpusNeedTheEmbeddedBroker() {
        StringWriter err = new StringWriter();
        var cli = Main.commandLine();
        cli.setErr(new PrintWriter(err, true));
        assertThat(cli.execute("bench", "decider", "--bootstrap", "localhost:1", "--broker-cpus", "0")).isEqualTo(2);
        assertThat(err.toString()).startsWith("--broker-cpus pins the embedded broker; with --bootstrap there is none");
    }
}
