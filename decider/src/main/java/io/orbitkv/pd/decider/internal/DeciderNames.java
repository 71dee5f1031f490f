package io.orbitkv.pd.decider.internal;

/**
 * The names of the decider's topology nodes and stores, fixed so that changelog topics survive refactors. Kept here,
 * below the processors that use them, so the internal package never refers back to the public {@code DeciderTopology}
 * (which re-exports them).
 */
public final class DeciderNames {

    public static final String SOURCE = "request-events-source";
    public static final String PROCESSOR = "decider";
    public static final String DECISIONS_SINK = "decisions-sink";
    public static final String COMMANDS_SINK = "engine-commands-sink";
    public static final String DEAD_LETTER_SINK = "dead-letters-sink";
    public static final String REQUESTS_STORE = "decider-requests";
    public static final String LOAD_STORE = "decider-engine-load";
    public static final String ENGINES_STORE = "decider-engines";

    private DeciderNames() { }
}
