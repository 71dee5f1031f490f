package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.PrintWriter;
import java.io.StringWriter;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** A word the command line does not know is an error (exit 2, naming it), even beside {@code --help}. */
class UnknownCommandTest {

    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
            "nosuch --help|nosuch",
            "nosuch|nosuch",
            "bench nosuch --help|nosuch",
            "trace --help some-id extra|extra"})
    void unknownWordsAreRefused(String line, String named) {
        StringWriter out = new StringWriter();
        StringWriter err = new StringWriter();
        var cli = Main.commandLine();
        cli.setOut(new PrintWriter(out, true));
        cli.setErr(new PrintWriter(err, true));
        int exit = cli.execute(line.split(" "));
        assertThat(exit).as(err.toString()).isEqualTo(2);
        assertThat(err.toString()).contains("Unmatched argument").contains("'" + named + "'");
    }

    @ParameterizedTest
    @CsvSource({"--help", "bench --help", "trace --help"})
    void helpAloneStillWorks(String line) {
        StringWriter out = new StringWriter();
        var cli = Main.commandLine();
        cli.setOut(new PrintWriter(out, true));
        assertThat(cli.execute(line.split(" "))).isZero();
        assertThat(out.toString()).startsWith("Usage: orbitkv-pd");
    }
}
