package io.orbitkv.pd.logtools;

import io.orbitkv.pd.schemas.Topic;
import io.orbitkv.pd.schemas.Topics;
import java.util.Locale;

/**
 * What a topic is to the log tools, independent of the deployment's topic prefix: a file exported from a
 * deployment with prefix {@code prod.} is read without knowing that prefix, because its header names each
 * topic's role. The order of the constants is the tie-break of the merged read order: at equal timestamps a
 * fact is read before the decisions it caused, and dead letters and the proxy's answers come last.
 */
public enum TopicRole {
    ENGINES, REQUEST_EVENTS, DECISIONS, ENGINE_COMMANDS, DEAD_LETTERS, ANSWERS;

    /** The role's short name as used on the command line and in file headers: {@code request-events}. */
    public String id() {
        return name().toLowerCase(Locale.ROOT).replace('_', '-');
    }

    public static TopicRole fromId(String id) {
        for (TopicRole r : values()) {
            if (r.id().equals(id)) {
                return r;
            }
        }
        throw new IllegalArgumentException("unknown topic role '" + id + "': one of engines, request-events, decisions,"
                + " engine-commands, dead-letters, answers");
    }

    /** This role's topic in a deployment's registry. */
    public Topic<String, ?> topic(Topics topics) {
        return switch (this) {
            case ENGINES -> topics.engines();
            case REQUEST_EVENTS -> topics.requestEvents();
            case DECISIONS -> topics.decisions();
            case ENGINE_COMMANDS -> topics.engineCommands();
            case DEAD_LETTERS -> topics.deadLetters();
            case ANSWERS -> topics.answers();
        };
    }
}
