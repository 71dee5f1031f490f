package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.Map;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

/**
 * {@code ./orbitkv-pd --help} lists every command with a one-line summary; a first impression cut mid-sentence ("… an
 * embedded KRaft broker, the") is what a new user saw (issue 32). Each command and subcommand's summary — its header, or
 * the first line of its description — is a complete sentence.
 */
class HelpSummariesTest {

    @Test
    void everyCommandsSummaryIsACompleteSentence() {
        check(Main.commandLine());
    }

    private static void check(CommandLine cli) {
        for (Map.Entry<String, CommandLine> sub : cli.getSubcommands().entrySet()) {
            CommandLine.Model.UsageMessageSpec u = sub.getValue().getCommandSpec().usageMessage();
            String summary = u.header().length > 0 ? u.header()[0] : u.description().length > 0 ? u.description()[0] : "";
            assertThat(summary.strip()).as("summary of '%s'", sub.getValue().getCommandSpec().qualifiedName()).isNotEmpty()
                    .matches(".*[.)]$");
            check(sub.getValue());
        }
    }
}
