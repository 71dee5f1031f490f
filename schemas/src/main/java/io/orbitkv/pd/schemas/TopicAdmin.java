package io.orbitkv.pd.schemas;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.errors.TopicExistsException;

/** Creates the product's topics from their {@link TopicSpec}s. Idempotent: existing topics are left as they are. */
public final class TopicAdmin {

    private TopicAdmin() { }

    /**
     * Creates every topic in {@code topics} that does not exist yet.
     *
     * @return the names that were created by this call
     */
    public static List<String> ensureTopics(Admin admin, Topics topics) {
        try {
            Set<String> existing = admin.listTopics().names().get(30, TimeUnit.SECONDS);
            List<NewTopic> missing = new ArrayList<>();
            for (Topic<String, ?> t : topics.all()) {
                if (!existing.contains(t.name())) {
                    missing.add(new NewTopic(t.name(), t.spec().partitions(), t.spec().replicationFactor()).configs(t.spec().configs()));
                }
            }
            List<String> created = new ArrayList<>();
            var result = admin.createTopics(missing);
            for (NewTopic nt : missing) {
                try {
                    result.values().get(nt.name()).get(30, TimeUnit.SECONDS);
                    created.add(nt.name());
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof TopicExistsException)) {
                        throw new IllegalStateException("creating topic " + nt.name() + ": " + e.getCause().getMessage(), e.getCause());
                    }
                }
            }
            return created;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while creating topics", e);
        } catch (ExecutionException | TimeoutException e) {
            throw new IllegalStateException("cannot list topics: " + e.getMessage(), e);
        }
    }
}
