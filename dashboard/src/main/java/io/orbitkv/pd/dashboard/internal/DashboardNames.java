package io.orbitkv.pd.dashboard.internal;

/**
 * The names of the dashboard's topology nodes and stores, fixed so that changelog topics survive refactors. Kept here,
 * below the processor that uses them, so the internal package never refers back to the public
 * {@code DashboardTopology} (which re-exports them).
 */
public final class DashboardNames {

    public static final String SOURCE = "dashboard-source";
    public static final String PROCESSOR = "dashboard-stats";
    public static final String DEAD_LETTER_SINK = "dashboard-dead-letters-sink";
    public static final String ORDERS_STORE = "dashboard-orders";
    public static final String INFLIGHT_STORE = "dashboard-inflight";
    public static final String FAILURES_STORE = "dashboard-failures";
    /** Per request: the timing marks that start or end a hop between two records, until the other end is read. */
    public static final String HOPS_STORE = "dashboard-hops";

    private DashboardNames() { }
}
