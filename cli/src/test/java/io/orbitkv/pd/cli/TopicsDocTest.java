package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topic;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/** docs/topics.md is a contract other teams read: it must list exactly the topics of the registry, with their types. */
class TopicsDocTest {

    @Test
    void topicsPageMatchesTheRegistry() throws Exception {
        String doc = Files.readString(Path.of("..", "docs", "topics.md"));
        Topics topics = new Topics(TopicsConfig.defaults(), EventSerdes.embedded());

        for (Topic<String, ?> t : topics.all()) {
            Matcher row = Pattern.compile("(?m)^\\| `" + Pattern.quote(t.name()) + "` \\| ([^|]+) \\| ([^|]+) \\| (\\d+)").matcher(doc);
            assertThat(row.find()).as("docs/topics.md has a row for %s", t.name()).isTrue();
            assertThat(row.group(1).strip()).as("key of %s", t.name()).isEqualTo(t.keyName());
            assertThat(row.group(2)).as("value schema of %s", t.name()).contains("`" + t.valueTypeName() + "`");
            assertThat(Integer.parseInt(row.group(3))).as("partitions of %s", t.name()).isEqualTo(t.spec().partitions());
        }
        List<String> documented = Pattern.compile("(?m)^\\| `(orbitkv\\.[a-z-]+)`").matcher(doc).results().map(m -> m.group(1)).toList();
        assertThat(documented).containsExactlyInAnyOrderElementsOf(topics.all().stream().map(Topic::name).toList());
    }
}
