package io.orbitkv.pd.harness;

/**
 * How the Java simulated engines take part in P/D (lower case: these are the command line's words, {@code --engines}).
 */
public enum EngineJoin {
    /** Through their transfer workers' engine API (the worker's local socket), as a Python engine joins: the default. */
    api,
    /** With Kafka clients of their own ({@code EngineClient}). */
    kafka
}
